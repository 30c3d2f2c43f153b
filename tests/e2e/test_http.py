"""`moat serve --http`: the same tools over Streamable HTTP, driven by the real `mcp` client, and
the endpoint's guards (Origin, Host, body size) checked on the wire."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from support import AUTH, MODES, assert_text_only, free_port, http_transport, wait_for_port

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "e2e", "version": "1"},
    },
}


@pytest.fixture(scope="module")
def http_url(moat_bin: Path, moat_toml: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("http") / "moat.stderr"
    stderr = log.open("w")
    process = subprocess.Popen(
        [str(moat_bin), "serve", "--config", str(moat_toml), "--http", f"127.0.0.1:{port}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    wait_for_port(port, process, log)
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(timeout=10)
    stderr.close()


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("content-type", "application/json")
    request.add_header("accept", "application/json, text/event-stream")
    for name, value in {**AUTH, **(headers or {})}.items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.parametrize("mode", MODES)
async def test_tools_over_http_with_the_mcp_client(http_url: str, mode: str) -> None:
    async with Client(http_transport(http_url), mode=mode, read_timeout_seconds=30) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert "echo_echo" in names and "chatty_crash" in names
        result = await client.call_tool("echo_repeat", {"message": "ab", "times": 2, "separator": "+"})
        assert_text_only(result, "ab+ab")
        bad = await client.call_tool("echo_repeat", {"message": "ab", "times": -1})
        assert bad.is_error
        assert "times: expected integer 0..=255, got -1" in bad.content[0].text
        crashed = await client.call_tool("chatty_crash", {"message": "over http"})
        assert crashed.is_error and "over http" in crashed.content[0].text
        again = await client.call_tool("echo_echo", {"message": "still here"})
        assert_text_only(again, "still here")


def test_a_foreign_origin_is_refused(http_url: str) -> None:
    status, _ = post(http_url, json.dumps(INITIALIZE).encode(), {"origin": "https://evil.example"})
    assert status == 403


def test_a_loopback_origin_is_accepted(http_url: str) -> None:
    port = http_url.split(":")[2].split("/")[0]
    status, body = post(
        http_url, json.dumps(INITIALIZE).encode(), {"origin": f"http://localhost:{port}"}
    )
    assert status == 200, body
    assert '"serverInfo"' in body


def test_a_foreign_host_is_refused(http_url: str) -> None:
    """DNS rebinding: a page on evil.example resolved to 127.0.0.1 still says Host: evil.example."""
    status, _ = post(http_url, json.dumps(INITIALIZE).encode(), {"host": "evil.example"})
    assert status in (400, 403)


def test_an_oversized_body_is_refused(http_url: str) -> None:
    big = dict(INITIALIZE, params=dict(INITIALIZE["params"], padding="x" * (5 << 20)))
    status, _ = post(http_url, json.dumps(big).encode())
    assert status == 413


def metrics(http_url: str) -> dict[str, float]:
    """moat's `/metrics`, sample by sample: `name{labels}` → value."""
    url = http_url.removesuffix("/mcp") + "/metrics"
    with urllib.request.urlopen(urllib.request.Request(url, headers=AUTH), timeout=30) as response:
        assert response.headers["content-type"].startswith("application/openmetrics-text")
        text = response.read().decode()
    assert text.endswith("# EOF\n"), text[-200:]
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            samples[series] = float(value)
    return samples


async def test_calls_are_counted_in_the_metrics_by_plugin_tool_and_outcome(http_url: str) -> None:
    before = metrics(http_url)
    async with Client(http_transport(http_url), mode=MODES[0], read_timeout_seconds=30) as client:
        await client.call_tool("echo_repeat", {"message": "m", "times": 1})
        await client.call_tool("echo_repeat", {"message": "m", "times": -1})
        await client.call_tool("chatty_crash", {"message": "counted"})
        with pytest.raises(MCPError, match="unknown tool"):
            await client.call_tool("no_such_tool_named_by_the_client", {})
    after = metrics(http_url)

    def grew(series: str) -> float:
        return after.get(series, 0) - before.get(series, 0)

    assert grew('moat_calls_total{plugin="echo",tool="echo_repeat",outcome="ok"}') == 1
    assert grew('moat_calls_total{plugin="echo",tool="echo_repeat",outcome="invalid_arguments"}') == 1
    assert grew('moat_calls_total{plugin="chatty",tool="chatty_crash",outcome="trap"}') == 1
    # A name only the client made up is counted without it: the series cannot grow unbounded.
    assert grew('moat_calls_total{plugin="",tool="",outcome="unknown_tool"}') == 1
    assert not any("no_such_tool" in series for series in after)
    assert grew('moat_call_duration_seconds_count{plugin="echo",tool="echo_repeat"}') == 2
    assert after["moat_plugins_loaded"] == 2
    assert after["moat_tools_served"] >= 2
