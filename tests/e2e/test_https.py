"""Plugins over HTTPS, against a real TLS server on loopback with a certificate authority made for
the test: a certificate the system trusts (here through `SSL_CERT_FILE`) lets moat download and
run the plugin; one it does not trust stops the download with a precise error.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import shutil
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import assert_raw_text_only


def openssl(*args: str | Path) -> None:
    if shutil.which("openssl") is None:
        pytest.fail("the openssl tool is missing (./dev test installs it)")
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A certificate authority (`ca.pem`) and a certificate it signed for 127.0.0.1."""
    folder = tmp_path_factory.mktemp("tls")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", folder / "ca.key", "-out", folder / "ca.pem", "-days", "2",
            "-subj", "/CN=moat test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign")
    openssl("req", *ec, "-keyout", folder / "server.key", "-out", folder / "server.csr",
            "-subj", "/CN=127.0.0.1")
    (folder / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    openssl("x509", "-req", "-in", folder / "server.csr", "-CA", folder / "ca.pem",
            "-CAkey", folder / "ca.key", "-CAcreateserial", "-out", folder / "server.pem",
            "-days", "2", "-extfile", folder / "ext.cnf")
    return folder


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def https_url(
    tls: Path, plugin: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """`echo.wasm` served over HTTPS on a free loopback port."""
    files = tmp_path_factory.mktemp("https-files")
    shutil.copy(plugin("echo"), files / "echo.wasm")
    handler = functools.partial(QuietHandler, directory=str(files))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls / "server.pem", tls / "server.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}/echo.wasm"
    server.shutdown()
    server.server_close()


def moat(moat_bin: Path, tmp_path: Path, *args: str, ca: Path | None) -> subprocess.CompletedProcess[str]:
    """Runs moat with its own cache, trusting `ca` besides nothing else when given."""
    env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    env["MOAT_CACHE_DIR"] = str(tmp_path / "cache")
    if ca is not None:
        env["SSL_CERT_FILE"] = str(ca)
    return subprocess.run(
        [str(moat_bin), *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_a_trusted_certificate_serves_the_plugin(
    moat_bin: Path, plugin: Callable[[str], Path], tls: Path, https_url: str, tmp_path: Path
) -> None:
    pulled = moat(moat_bin, tmp_path, "pull", https_url, ca=tls / "ca.pem")
    assert pulled.returncode == 0, pulled.stderr
    digest = hashlib.sha256(plugin("echo").read_bytes()).hexdigest()
    assert pulled.stdout.split() == [f"sha256:{digest}", https_url]
    assert "unsigned" in pulled.stderr, pulled.stderr

    called = moat(
        moat_bin, tmp_path, "call", https_url, "echo_echo", json.dumps({"message": "over TLS"}),
        ca=tls / "ca.pem",
    )
    assert called.returncode == 0, called.stderr
    assert_raw_text_only(json.loads(called.stdout), "over TLS")


def test_an_untrusted_certificate_stops_the_download(
    moat_bin: Path, https_url: str, tmp_path: Path
) -> None:
    refused = moat(moat_bin, tmp_path, "pull", https_url, ca=None)
    assert refused.returncode != 0
    host = https_url.split("/")[2]
    assert f"the TLS certificate of {host} is not trusted" in refused.stderr, refused.stderr
    assert "UnknownIssuer" in refused.stderr
    assert "ERROR" not in refused.stderr, "the refusal is reported twice"
    assert not any((tmp_path / "cache").rglob("*.wasm")), "something was kept"


def test_an_https_source_is_never_redirected_to_plain_http(
    moat_bin: Path, plugin: Callable[[str], Path], tls: Path, tmp_path: Path
) -> None:
    files = tmp_path / "files"
    files.mkdir()
    shutil.copy(plugin("echo"), files / "echo.wasm")
    plain = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(files))
    )
    target = f"http://127.0.0.1:{plain.server_address[1]}/echo.wasm"

    class Redirect(QuietHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("location", target)
            self.send_header("content-length", "0")
            self.end_headers()

    secure = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls / "server.pem", tls / "server.key")
    secure.socket = context.wrap_socket(secure.socket, server_side=True)
    servers = [plain, secure]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{secure.server_address[1]}/moved.wasm"
        refused = moat(moat_bin, tmp_path, "pull", url, ca=tls / "ca.pem")
        assert refused.returncode != 0, refused.stdout
        assert "never followed to plain http" in refused.stderr, refused.stderr
        # The plain URL itself is still fine: loopback http is allowed when asked for.
        pulled = moat(moat_bin, tmp_path, "pull", target, ca=None)
        assert pulled.returncode == 0, pulled.stderr
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
