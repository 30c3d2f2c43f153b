"""`moat serve --http` on the wire: legacy sessions, stateless 2026-07-28 requests and their header
checks, JSON-RPC errors as HTTP statuses, and cancellation that really stops the guest."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import AUTH, SETTLE_SECONDS, assert_raw_text_only
from test_protocol import INVALID_PARAMS, METHOD_NOT_FOUND, MODERN, MODERN_META
from test_stdio import wait_until_quiet, wait_until_spinning

HEADER_MISMATCH = -32020
UNSUPPORTED_PROTOCOL_VERSION = -32022
ACCEPT = "application/json, text/event-stream"


class HttpServer:
    """`moat serve --http` on a free loopback port, with echo and chatty (default limits)."""

    def __init__(self, moat_bin: Path, plugins: list[Path], stderr_path: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.stderr_path = stderr_path
        self._stderr = stderr_path.open("w")
        self.process = subprocess.Popen(
            [str(moat_bin), "serve", *map(str, plugins), "--http", f"127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(f"moat --http did not start:\n{self.stderr()}")
                time.sleep(0.1)

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def post(self, message: Any, headers: dict[str, str] | None = None) -> Reply:
        """POSTs `message` to /mcp and reads the whole answer."""
        connection = self.connection()
        try:
            connection.request("POST", "/mcp", json.dumps(message), post_headers(headers))
            return Reply.read(connection.getresponse())
        finally:
            connection.close()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._stderr.close()


def post_headers(extra: dict[str, str] | None) -> dict[str, str]:
    return {"content-type": "application/json", "accept": ACCEPT, **AUTH, **(extra or {})}


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    """The headers a 2026-07-28 request carries beside its body."""
    headers = {"mcp-protocol-version": MODERN, "mcp-method": method}
    if name is not None:
        headers["mcp-name"] = name
    return headers


class Reply:
    """An HTTP answer and the JSON-RPC messages in it, whether sent as JSON or as SSE."""

    def __init__(self, status: int, headers: http.client.HTTPMessage, body: str) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.content_type = (headers.get("content-type") or "").split(";")[0]
        self.messages: list[dict[str, Any]] = []
        if self.content_type == "text/event-stream":
            self.messages = [json.loads(d) for d in sse_data(body.splitlines())]
        elif self.content_type == "application/json" and body:
            self.messages = [json.loads(body)]

    @classmethod
    def read(cls, response: http.client.HTTPResponse) -> Reply:
        return cls(response.status, response.headers, response.read().decode())

    @property
    def message(self) -> dict[str, Any]:
        """The last message: the response itself, after any notifications."""
        assert self.messages, f"no JSON-RPC message in HTTP {self.status}: {self.body!r}"
        return self.messages[-1]


def sse_data(lines: list[str]) -> list[str]:
    """The non-empty `data:` payloads of SSE lines (priming events carry none)."""
    data = [line[5:].strip() for line in lines if line.startswith("data:")]
    return [d for d in data if d]


def request(request_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def echo_call(request_id: int, message: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "echo_echo", "arguments": {"message": message}}
    if meta is not None:
        params["_meta"] = meta
    return request(request_id, "tools/call", params)


def modern_echo(server: HttpServer, message: str) -> Reply:
    call = echo_call(1, message, MODERN_META)
    return server.post(call, modern_headers("tools/call", "echo_echo"))


INITIALIZE = request(
    1,
    "initialize",
    {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "moat-e2e", "version": "0"},
    },
)


@pytest.fixture(scope="module")
def server(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HttpServer]:
    path = tmp_path_factory.mktemp("http-protocol") / "moat.stderr"
    server = HttpServer(moat_bin, [plugin("echo"), plugin("chatty")], path)
    yield server
    server.stop()


def wait_for_stderr(server: HttpServer, text: str, times: int) -> None:
    deadline = time.monotonic() + SETTLE_SECONDS
    while server.stderr().count(text) < times:
        if time.monotonic() > deadline:
            pytest.fail(f"{text!r} did not reach moat's log {times} time(s):\n{server.stderr()}")
        time.sleep(0.02)


# --- Legacy sessions --------------------------------------------------------------------------


def open_session(server: HttpServer) -> str:
    reply = server.post(INITIALIZE)
    assert reply.status == 200, reply.body
    assert reply.message["result"]["protocolVersion"] == "2025-11-25"
    session = reply.headers.get("mcp-session-id")
    assert session, "a legacy initialize opens a session"
    headers = {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    initialized = server.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, headers)
    assert initialized.status == 202, initialized.body
    return session


def test_an_initialize_too_large_to_keep_opens_no_session(server: HttpServer) -> None:
    # A session keeps its initialize (in Redis, under [cluster]): one caller may not fill it.
    bloated = json.loads(json.dumps(INITIALIZE))
    bloated["params"]["capabilities"]["experimental"] = {"padding": {"x": "y" * (70 << 10)}}
    reply = server.post(bloated)
    assert reply.status == 400, reply.body
    assert reply.message["error"]["code"] == -32602
    assert "more than the 64 KiB a session keeps" in reply.message["error"]["message"]
    assert "mcp-session-id" not in reply.headers
    # A plain one still opens a session.
    assert open_session(server)


def test_a_legacy_session_serves_calls_until_it_is_deleted(server: HttpServer) -> None:
    session = open_session(server)
    headers = {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    reply = server.post(echo_call(2, "in a session"), headers)
    assert reply.status == 200
    assert reply.content_type == "text/event-stream", "legacy answers stream as SSE"
    assert_raw_text_only(reply.message["result"], "in a session")

    connection = server.connection()
    connection.request("DELETE", "/mcp", headers={**headers, **AUTH})
    # 200, as the spec says and the Python SDK expects (it logs anything else as a failure).
    assert connection.getresponse().status == 200
    connection.close()
    gone = server.post(echo_call(3, "after the end"), headers)
    assert gone.status == 404, gone.body


def test_an_unknown_session_is_not_found(server: HttpServer) -> None:
    headers = {"mcp-session-id": "no-such-session", "mcp-protocol-version": "2025-11-25"}
    assert server.post(echo_call(2, "lost"), headers).status == 404


# --- 2026-07-28: stateless ---------------------------------------------------------------------


def test_a_modern_request_is_stateless_and_answered_as_json(server: HttpServer) -> None:
    reply = modern_echo(server, "stateless")
    assert reply.status == 200, reply.body
    assert reply.content_type == "application/json", "a lone answer needs no stream"
    assert reply.headers.get("mcp-session-id") is None
    assert reply.message["result"]["resultType"] == "complete"
    assert_raw_text_only(reply.message["result"], "stateless")


def test_a_modern_call_with_progress_is_streamed_as_sse(server: HttpServer) -> None:
    meta = dict(MODERN_META, progressToken="steps")
    call = request(1, "tools/call", {"name": "chatty_count", "arguments": {"steps": 3, "pause": 0},
                                     "_meta": meta})
    reply = server.post(call, modern_headers("tools/call", "chatty_count"))
    assert reply.status == 200, reply.body
    assert reply.content_type == "text/event-stream"
    progress = [m["params"] for m in reply.messages if m.get("method") == "notifications/progress"]
    assert [(p["progressToken"], p["progress"]) for p in progress] == [
        ("steps", 1), ("steps", 2), ("steps", 3)
    ]
    assert reply.message["result"]["structuredContent"] == {"value": 3}


def test_server_discover_over_http(server: HttpServer) -> None:
    reply = server.post(request(1, "server/discover", {"_meta": MODERN_META}),
                        modern_headers("server/discover"))
    assert reply.status == 200, reply.body
    assert MODERN in reply.message["result"]["supportedVersions"]


def test_a_method_header_that_disagrees_with_the_body_is_refused(server: HttpServer) -> None:
    reply = server.post(echo_call(1, "x", MODERN_META), modern_headers("tools/list"))
    assert reply.status == 400
    assert reply.message["error"]["code"] == HEADER_MISMATCH


def test_a_name_header_that_disagrees_with_the_body_is_refused(server: HttpServer) -> None:
    reply = server.post(echo_call(1, "x", MODERN_META), modern_headers("tools/call", "chatty_spin"))
    assert reply.status == 400
    assert reply.message["error"]["code"] == HEADER_MISMATCH


def test_an_unsupported_version_is_refused_with_the_supported_ones(server: HttpServer) -> None:
    meta = dict(MODERN_META, **{"io.modelcontextprotocol/protocolVersion": "2099-01-01"})
    headers = modern_headers("tools/list") | {"mcp-protocol-version": "2099-01-01"}
    reply = server.post(request(1, "tools/list", {"_meta": meta}), headers)
    assert reply.status == 400
    assert reply.message["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
    assert MODERN in reply.message["error"]["data"]["supported"]


def test_a_modern_request_without_meta_is_a_bad_request(server: HttpServer) -> None:
    reply = server.post(request(1, "tools/list", {}), modern_headers("tools/list"))
    assert reply.status == 400
    assert reply.message["error"]["code"] == INVALID_PARAMS


def test_a_request_with_neither_a_session_nor_a_version_names_both_ways_in(
        server: HttpServer) -> None:
    reply = server.post(request(4, "tools/list", {}))
    assert reply.status == 400, reply.body
    assert reply.content_type == "application/json", reply.body
    error = reply.message["error"]
    assert reply.message["id"] == 4
    assert error["code"] == -32600
    assert "send `initialize` first" in error["message"], error
    assert "2026-07-28" in error["message"] and "params._meta" in error["message"], error


def test_an_unknown_modern_method_is_not_found(server: HttpServer) -> None:
    reply = server.post(request(1, "no/such-method", {"_meta": MODERN_META}),
                        modern_headers("no/such-method"))
    assert reply.status == 404
    assert reply.message["error"]["code"] == METHOD_NOT_FOUND


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_get_and_delete_without_a_session_are_not_allowed(server: HttpServer, method: str) -> None:
    connection = server.connection()
    connection.request(method, "/mcp", headers={"accept": ACCEPT, "mcp-protocol-version": MODERN, **AUTH})
    assert connection.getresponse().status == 405
    connection.close()


def test_malformed_json_is_a_parse_error(server: HttpServer) -> None:
    connection = server.connection()
    connection.request("POST", "/mcp", b'{"jsonrpc": "2.0", "id": 1, "method"', post_headers(None))
    reply = Reply.read(connection.getresponse())
    connection.close()
    assert reply.status == 400
    assert reply.message["error"]["code"] == -32700
    assert modern_echo(server, "after garbage").status == 200


# --- Cancellation -------------------------------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_closing_a_modern_stream_stops_the_guest(server: HttpServer) -> None:
    cancelled = server.stderr().count("call cancelled by the client")
    # A raw socket: moat sends the SSE headers with the first event, which a spinning guest never
    # produces, so an HTTP client would sit in getresponse().
    spin = json.dumps(
        request(1, "tools/call", {"name": "chatty_spin", "arguments": {}, "_meta": MODERN_META})
    ).encode()
    headers = post_headers(modern_headers("tools/call", "chatty_spin"))
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    stream = socket.create_connection(("127.0.0.1", server.port))
    stream.sendall(
        f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{server.port}\r\n{head}"
        f"content-length: {len(spin)}\r\n\r\n".encode() + spin
    )
    time.sleep(0.2)
    wait_until_spinning(server.process.pid)

    stream.close()  # the client walks away
    wait_for_stderr(server, "call cancelled by the client", cancelled + 1)
    wait_until_quiet(server.process.pid)
    started = time.monotonic()
    assert modern_echo(server, "served promptly").status == 200
    assert time.monotonic() - started < 5


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_cancelled_notification_stops_the_guest_of_a_session(server: HttpServer) -> None:
    session = open_session(server)
    headers = {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    cancelled = server.stderr().count("call cancelled by the client")
    spin_reply: list[Reply] = []
    spinning = threading.Thread(
        target=lambda: spin_reply.append(
            server.post(request(7, "tools/call", {"name": "chatty_spin", "arguments": {}}), headers)
        )
    )
    spinning.start()
    time.sleep(0.2)
    wait_until_spinning(server.process.pid)

    note = {"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 7, "reason": "test"}}
    assert server.post(note, headers).status == 202
    wait_for_stderr(server, "call cancelled by the client", cancelled + 1)
    wait_until_quiet(server.process.pid)
    reply = server.post(echo_call(8, "served promptly"), headers)
    assert_raw_text_only(reply.message["result"], "served promptly")
    spinning.join(timeout=10)


@pytest.mark.parametrize(
    "body",
    [
        [{"jsonrpc": "2.0", "id": 1, "method": "ping"}],  # batches left MCP in 2025-06-18
        {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        "just a string",
    ],
)
def test_a_body_that_is_no_jsonrpc_message_is_an_invalid_request(
    server: HttpServer, body: Any
) -> None:
    reply = server.post(body)
    assert reply.status == 400
    assert reply.message["error"]["code"] == -32600
    assert modern_echo(server, "served after").status == 200
