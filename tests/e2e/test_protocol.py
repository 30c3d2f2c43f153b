"""Every protocol version moat speaks, and how it answers bad input, line by line on stdio.

Versions 2024-11-05 to 2025-11-25 start with `initialize`; 2026-07-28 has no handshake and carries
its version and capabilities in every request's `_meta`. Each bad message gets JSON-RPC's answer
and the connection keeps serving: every test ends with a normal call.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from support import ECHO_SUMMARY, INSTRUCTIONS_PREAMBLE, RawServer, assert_raw_text_only

LEGACY_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
MODERN = "2026-07-28"
ALL_VERSIONS = [*LEGACY_VERSIONS, MODERN]

# The `_meta` every 2026-07-28 request carries.
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "moat-e2e", "version": "0"},
}

# JSON-RPC 2.0 and MCP error codes.
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
UNSUPPORTED_PROTOCOL_VERSION = -32022


@pytest.fixture
def echo_server(
    raw_server: Callable[..., RawServer], plugin: Callable[[str], Path]
) -> Callable[[], RawServer]:
    """Starts `moat serve echo.wasm chatty.wasm` for raw stdio, not yet initialized."""
    return lambda: raw_server(str(plugin("echo")), str(plugin("chatty")))


def initialize(server: RawServer, version: str) -> dict[str, object]:
    response = server.request(
        "initialize",
        {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "moat-e2e", "version": "0"},
        },
    )
    server.notify("notifications/initialized")
    return response


def echo(
    server: RawServer, message: str, meta: dict[str, object] | None = None
) -> dict[str, object]:
    """Calls echo_echo and returns the response."""
    params: dict[str, object] = {"name": "echo_echo", "arguments": {"message": message}}
    if meta is not None:
        params["_meta"] = meta
    return server.request("tools/call", params)


def assert_echoes(server: RawServer, message: str, meta: dict[str, object] | None = None) -> None:
    response = echo(server, message, meta)
    assert "result" in response, response
    assert_raw_text_only(response["result"], message)


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_each_legacy_version_is_negotiated_and_served(
    echo_server: Callable[[], RawServer], version: str
) -> None:
    server = echo_server()
    result = initialize(server, version)["result"]
    assert result["protocolVersion"] == version
    assert result["serverInfo"]["name"] == "moat"
    assert "tools" in result["capabilities"]
    tools = server.request("tools/list")["result"]["tools"]
    assert "echo_echo" in [tool["name"] for tool in tools]
    assert_echoes(server, f"spoken in {version}")
    assert server.request("ping")["result"] == {}


def test_an_unknown_version_is_offered_the_latest_legacy_one(
    echo_server: Callable[[], RawServer],
) -> None:
    server = echo_server()
    assert initialize(server, "1999-01-01")["result"]["protocolVersion"] == "2025-11-25"
    assert_echoes(server, "still served")


def test_modern_requests_need_no_handshake(echo_server: Callable[[], RawServer]) -> None:
    server = echo_server()
    discovered = server.request("server/discover", {"_meta": MODERN_META})["result"]
    assert discovered["supportedVersions"] == ALL_VERSIONS
    assert "tools" in discovered["capabilities"]
    assert discovered["resultType"] == "complete"
    # The fixed first sentence, then each plugin's summary (its WIT world's doc comment).
    preamble, *summaries = discovered["instructions"].split("\n\n")
    assert preamble == INSTRUCTIONS_PREAMBLE
    assert sorted(summary.split(":")[0] for summary in summaries) == ["chatty", "echo"]
    assert f"echo: {ECHO_SUMMARY}" in summaries
    listed = server.request("tools/list", {"_meta": MODERN_META})["result"]
    assert listed["resultType"] == "complete"
    assert isinstance(listed["ttlMs"], int) and listed["cacheScope"] in ("public", "private")
    response = echo(server, "stateless", MODERN_META)
    assert response["result"]["resultType"] == "complete"
    assert_raw_text_only(response["result"], "stateless")


def test_discover_then_initialize_on_one_connection(echo_server: Callable[[], RawServer]) -> None:
    """What some hosts do: probe with server/discover, then fall back to the legacy handshake."""
    server = echo_server()
    discovered = server.request("server/discover", {"_meta": MODERN_META})
    assert "result" in discovered, discovered
    assert initialize(server, "2025-06-18")["result"]["protocolVersion"] == "2025-06-18"
    assert_echoes(server, "after discover and initialize")


def test_a_modern_request_without_meta_is_invalid_params(
    echo_server: Callable[[], RawServer],
) -> None:
    server = echo_server()
    response = server.request("tools/list", {})
    assert response["error"]["code"] == INVALID_PARAMS, response
    assert "_meta" in response["error"]["message"]
    assert_echoes(server, "served after", MODERN_META)


def test_an_unsupported_modern_version_lists_the_supported_ones(
    echo_server: Callable[[], RawServer],
) -> None:
    server = echo_server()
    meta = dict(MODERN_META, **{"io.modelcontextprotocol/protocolVersion": "2099-01-01"})
    response = server.request("tools/list", {"_meta": meta})
    assert response["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION, response
    assert MODERN in response["error"]["data"]["supported"]
    assert_echoes(server, "served after", MODERN_META)


# --- Bad input --------------------------------------------------------------------------------


@pytest.fixture
def initialized(echo_server: Callable[[], RawServer]) -> RawServer:
    server = echo_server()
    initialize(server, "2025-11-25")
    return server


def test_unparsable_json_is_dropped_and_the_server_keeps_serving(initialized: RawServer) -> None:
    # The official SDKs ignore a line that is not JSON at all rather than answer it: there is no
    # id to answer to, and a peer echoing the error back would start an endless exchange.
    initialized.send_raw(b'{"jsonrpc": "2.0", "id": 99, "method": "tools/li\n')
    assert_echoes(initialized, "after garbage")
    assert [m for m in initialized.messages() if m.get("id") == 99] == []
    # Each dropped line is a warning with its length and its first bytes, escaped: not the
    # whole line, which may carry anything.
    text = b"hello\x1b[2J world, and then a secret: s3cr3t"
    initialized.send_raw(text + b"\n")
    assert_echoes(initialized, "after text")
    warnings = [line for line in initialized.stderr().splitlines() if "dropped a line" in line]
    assert len(warnings) == 2, initialized.stderr()
    assert " WARN " in warnings[0] and "of 48 bytes on stdin that is not JSON" in warnings[0], warnings
    assert 'it starts "{\\"jsonrpc\\": \\"2.0\\", \\"id\\": 99, \\"me…"' in warnings[0], warnings
    assert f"of {len(text)} bytes" in warnings[1], warnings
    assert 'it starts "hello\\x1b[2J world, and then a secr…"' in warnings[1], warnings
    assert "s3cr3t" not in initialized.stderr() and "\x1b" not in initialized.stderr()


def test_a_wrong_jsonrpc_version_is_an_invalid_request(initialized: RawServer) -> None:
    initialized.send({"jsonrpc": "1.0", "id": 7, "method": "tools/list"})
    error = initialized.receive()
    assert error["error"]["code"] == INVALID_REQUEST, error
    assert_echoes(initialized, "after a wrong version")


def test_an_unknown_method_is_method_not_found(initialized: RawServer) -> None:
    response = initialized.request("no/such-method", {})
    assert response["error"]["code"] == METHOD_NOT_FOUND, response
    assert_echoes(initialized, "after an unknown method")


def test_a_batch_is_an_invalid_request(initialized: RawServer) -> None:
    # JSON-RPC batches left MCP in 2025-06-18.
    batch = [{"jsonrpc": "2.0", "id": 50 + i, "method": "ping"} for i in range(2)]
    initialized.send_raw(json.dumps(batch).encode() + b"\n")
    error = initialized.receive()
    assert error["error"]["code"] == INVALID_REQUEST, error
    assert_echoes(initialized, "after a batch")


def test_an_oversized_message_is_dropped_and_the_server_keeps_serving(
    initialized: RawServer,
) -> None:
    # Past 16 MiB a line is discarded as it streams in, never buffered whole.
    huge = {
        "jsonrpc": "2.0",
        "id": 77,
        "method": "tools/call",
        "params": {"name": "echo_echo", "arguments": {"message": "x" * (17 << 20)}},
    }
    initialized.send(huge)
    assert_echoes(initialized, "after a huge message")
    assert [m for m in initialized.messages() if m.get("id") == 77] == []
    assert "exceeded the maximum line length" in initialized.stderr()


def test_a_large_result_is_a_tool_error(initialized: RawServer) -> None:
    response = initialized.request(
        "tools/call",
        {"name": "echo_repeat", "arguments": {"message": "x" * (1 << 20), "times": 5}},
    )
    assert response["result"]["isError"] is True
    assert "bytes allowed" in response["result"]["content"][0]["text"]
    assert_echoes(initialized, "after a large result")


@pytest.mark.parametrize("version", ["2025-11-25", MODERN])
def test_many_interleaved_calls_each_get_their_own_answer(
    echo_server: Callable[[], RawServer], version: str
) -> None:
    server = echo_server()
    meta = MODERN_META if version == MODERN else None
    if meta is None:
        initialize(server, version)
    sent = {}
    for n in range(60):
        params: dict[str, object]
        # (text, structured content): a number is both, a string text alone.
        expected: tuple[str, object]
        if n % 3 == 0:  # a guest call that takes a while, so answers come back out of order
            params = {"name": "chatty_nap", "arguments": {"ms": 60 - n}}
            expected = (str(60 - n), {"value": 60 - n})
        else:
            params = {"name": "echo_echo", "arguments": {"message": f"call {n}"}}
            expected = (f"call {n}", None)
        if meta is not None:
            params["_meta"] = meta
        sent[server.start_request("tools/call", params)] = expected
    answers = {}
    while len(answers) < len(sent):
        message = server.receive()
        if "id" in message and "method" not in message:
            answers[message["id"]] = message
    for request_id, (text, structured) in sent.items():
        result = answers[request_id]["result"]
        assert result["isError"] is False, result
        assert result["content"] == [{"type": "text", "text": text}], result
        assert result.get("structuredContent") == structured, result
    order = [m["id"] for m in server.messages() if m.get("id") in sent]
    assert order != sorted(order), "the calls did not overlap"
    assert_echoes(server, "after the crowd", meta)


def test_stdin_closed_before_a_word_is_a_quiet_exit(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    ended = subprocess.run(
        [str(moat_bin), "serve", str(plugin("echo"))],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MOAT_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert ended.returncode == 0, ended.stderr
    errors = [line for line in ended.stderr.splitlines() if "ERROR" in line or line.startswith("moat: ")]
    assert errors == [], ended.stderr
    assert ended.stdout == ""
