"""One log event, one line, whatever a caller puts in it: moat logs a refused token's `kid`, and
a `kid` carrying CR LF (or a Unicode line separator) and a line of the caller's own making shows
up escaped inside moat's line, never as a line of its own."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from support import free_port, stop, wait_for_port
from test_http import INITIALIZE

FORGED = "2026-12-05T08:00:00.000000Z  INFO moat::serve: forged by the caller"


def keys_server() -> ThreadingHTTPServer:
    """An issuer's key set with no keys: every token's `kid` is unknown, and logged."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server name)
            body = b'{"keys": []}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def b64(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def test_a_kid_carrying_a_forged_log_line_stays_inside_moats_line(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    keys = keys_server()
    issuer = f"http://127.0.0.1:{keys.server_address[1]}"
    (tmp_path / "moat.toml").write_text(f"""
[plugins.echo]
path = {json.dumps(str(plugin("echo")))}

[auth.oauth]
issuer = "{issuer}"
jwks_uri = "{issuer}/jwks"
""")
    port = free_port()
    log = tmp_path / "moat.stderr"
    with log.open("w") as errlog:
        process = subprocess.Popen(
            [str(moat_bin), "serve", "--config", str(tmp_path / "moat.toml"), "--http", f"127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errlog,
        )
    try:
        wait_for_port(port, process, log)
        kid = f"k1\r\n{FORGED}\n{FORGED}\u2028{FORGED}\x1b[2K"
        token = ".".join([b64({"alg": "RS256", "typ": "JWT", "kid": kid}), b64({"sub": "mallory"}), "c2ln"])
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/mcp", data=json.dumps(INITIALIZE).encode(), method="POST",
            headers={"authorization": f"Bearer {token}", "content-type": "application/json",
                     "accept": "application/json, text/event-stream"},
        )
        try:
            urllib.request.urlopen(request, timeout=30)
            raise AssertionError("a token signed by no published key was accepted")
        except urllib.error.HTTPError as refused:
            assert refused.code == 401
    finally:
        stop(process)
        keys.shutdown()

    text = log.read_text(errors="replace")
    # splitlines() breaks at every line boundary a reader might honour: CR, LF, U+2028, NEL…
    refusals = [line for line in text.splitlines() if "forged by the caller" in line]
    assert len(refusals) == 1, text
    assert "refused a request from 127.0.0.1" in refusals[0] and "k1\\r\\n2026" in refusals[0], text
    assert "\x1b" not in text, text
