"""MCP servers written with the official TypeScript SDK (`McpServer`, `registerTool` with zod
schemas, `StdioServerTransport`), built by `moat build` unchanged and served in the sandbox.

The servers are in tests/ts-sdk, one folder each, written the way community servers are:
`compute` (zod schemas, structured output, a thrown error), `v2` (the SDK's 2.x line), `fetcher` (`fetch` and `process.env`
in handlers), `asker` (elicitation, progress, logs), `stuck` (handlers that never settle),
`hostile` (reaching for what it was not granted), and two that must not build: `uses-fs`
(`node:fs`, through a module of its own) and `env-at-load` (an API key read while loading).
The clients are real: the Python `mcp` SDK in both protocol eras, and the TypeScript SDK's
(the MCP Inspector CLI) in both.

Environment:
  MOAT_TS_SDK  the folder of the servers (default tests/ts-sdk), each built by `moat build` into
               its build/NAME.wasm (`./dev test` builds them); a test that needs one fails
               when it is missing
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import LOG_LEVEL_META_KEY, ElicitResult
from support import MODERN, MODES, SETTLE_SECONDS, assert_text_only
from test_inspector import ERAS, TOOL_ERROR_EXIT, inspector, node_tools

__all__ = ["inspector", "node_tools"]  # the fixtures, shared with test_inspector

BUILD_HINT = "build it with `moat build tests/ts-sdk/NAME`, or run `./dev test`"


def servers_dir() -> Path:
    value = os.environ.get("MOAT_TS_SDK", "tests/ts-sdk")
    return Path(value) if Path(value).is_absolute() else REPO_ROOT / value


def cache_dir() -> Path:
    """moat's compile cache as the tests' moat finds it, where `./dev test` compiled the servers."""
    if os.environ.get("MOAT_CACHE_DIR"):
        return Path(os.environ["MOAT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "moat"


@pytest.fixture(scope="module")
def server() -> Callable[[str], Path]:
    """The component `moat build` made of the server NAME, or a failure saying why not."""

    def built(name: str) -> Path:
        path = servers_dir() / name / "build" / f"{name}.wasm"
        if not path.is_file():
            pytest.fail(f"{path} is missing; {BUILD_HINT.replace('NAME', name)}")
        return path

    return built


def write_config(folder: Path, text: str, secrets: str | None = None) -> Path:
    if secrets is not None:
        (folder / "secrets.toml").write_text(secrets)
        (folder / "secrets.toml").chmod(0o600)
        text = 'secrets = "secrets.toml"\n\n' + text
    path = folder / "moat.toml"
    path.write_text(text)
    return path


@asynccontextmanager
async def serving(
    moat_bin: Path, tmp_path: Path, mode: str, config: Path, env: dict[str, str] | None = None, **callbacks: Any
) -> AsyncIterator[Client]:
    """The `mcp` client on a `moat serve --config CONFIG` of its own, over stdio."""
    params = StdioServerParameters(
        command=str(moat_bin),
        args=["serve", "--config", str(config)],
        env={**{k: v for k, v in os.environ.items() if k.startswith("MOAT_") or k in ("PATH", "HOME", "XDG_CACHE_HOME")}, **(env or {})},
    )
    with (tmp_path / f"moat-{mode}.stderr").open("a") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=120, **callbacks) as client:
            yield client


def config_for(folder: Path, name: str, wasm: Path, extra: str = "") -> Path:
    return write_config(folder, f"[plugins.{name}]\npath = {json.dumps(str(wasm))}\n{extra}")


# --- Building -------------------------------------------------------------------------------


def build(moat_bin: Path, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(moat_bin), "build", str(servers_dir() / name)],
        capture_output=True, text=True, timeout=300, check=False,
    )


# What `moat build` says of the servers that cannot work in the sandbox: where, and what to do.
REFUSALS = {
    # The module that imports it, through the one that brought that in, from the entry.
    "uses-fs": ["Node's `node:fs` module: server.ts → lib/notes.ts → node:fs", "no file system"],
    # Its top level runs at build time: the key would be frozen unset.
    "env-at-load": ["process.env.WEATHER_API_KEY is read at server.ts:4 while the server loads",
                    "read it inside the tool handler"],
}


@pytest.mark.parametrize("name", REFUSALS)
def test_a_server_that_cannot_work_in_the_sandbox_does_not_build_and_is_told_why(
    moat_bin: Path, name: str
) -> None:
    done = build(moat_bin, name)
    assert done.returncode != 0, done.stderr
    for said in REFUSALS[name]:
        assert said in done.stderr, done.stderr
    assert not (servers_dir() / name / "build").exists()


# --- Tools as the SDK declares them -----------------------------------------------------------

# What zod 4 makes of compute's `add` schema, as the SDK sends it.
ADD_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
}


@pytest.mark.parametrize("mode", MODES)
async def test_compute_is_served_with_the_sdks_tools_and_schemas(
    moat_bin: Path, server: Callable[[str], Path], tmp_path: Path, mode: str
) -> None:
    config = config_for(tmp_path, "compute", server("compute"))
    async with serving(moat_bin, tmp_path, mode, config) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert sorted(tools) == ["compute_add", "compute_convert", "compute_divide", "compute_stats"]
        add = tools["compute_add"]
        assert add.description == "Adds two numbers"
        assert add.title == "Add"
        assert {k: v for k, v in add.input_schema.items() if k != "additionalProperties"} == ADD_SCHEMA
        convert = tools["compute_convert"].input_schema
        assert convert["properties"]["from"]["enum"] == ["m", "km", "mi", "ft"]
        assert convert["properties"]["value"]["description"] == "The length to convert"
        assert sorted(convert["required"]) == ["from", "to", "value"]
        assert tools["compute_stats"].output_schema["required"] == ["count", "sum", "mean", "min", "max"]

        assert_text_only(await client.call_tool("compute_add", {"a": 2, "b": 3}), "5")
        assert_text_only(await client.call_tool("compute_convert", {"value": 1, "from": "mi", "to": "km"}), "1.609")
        stats = await client.call_tool("compute_stats", {"values": [1, 2, 6], "options": {"label": "s"}})
        assert stats.is_error is False, stats
        assert stats.structured_content == {"count": 3, "sum": 9, "mean": 3, "min": 1, "max": 6}

        # The handler's throw is the SDK's tool error, and the server goes on.
        divided = await client.call_tool("compute_divide", {"a": 1, "b": 0})
        assert divided.is_error is True
        assert "division by zero" in divided.content[0].text
        assert_text_only(await client.call_tool("compute_divide", {"a": 9, "b": 3}), "3")


@pytest.mark.parametrize("mode", MODES)
async def test_arguments_are_checked_against_the_zod_schema_before_the_server_runs(
    moat_bin: Path, server: Callable[[str], Path], tmp_path: Path, mode: str
) -> None:
    config = config_for(tmp_path, "compute", server("compute"))
    async with serving(moat_bin, tmp_path, mode, config) as client:
        missing = await client.call_tool("compute_add", {"a": 2})
        assert missing.is_error is True
        assert "invalid arguments" in missing.content[0].text
        assert '"b" is a required property' in missing.content[0].text
        wrong = await client.call_tool("compute_convert", {"value": 1, "from": "parsec", "to": "m"})
        assert wrong.is_error is True
        assert "parsec" in wrong.content[0].text
        assert_text_only(await client.call_tool("compute_add", {"a": -1, "b": 1}), "0")


@pytest.mark.parametrize("mode", MODES)
async def test_the_servers_prompts_are_served_and_their_arguments_checked(
    moat_bin: Path, server: Callable[[str], Path], tmp_path: Path, mode: str
) -> None:
    config = config_for(tmp_path, "compute", server("compute"))
    async with serving(moat_bin, tmp_path, mode, config) as client:
        (explain,) = (await client.list_prompts()).prompts
        assert explain.name == "compute_explain"
        assert explain.description == "Asks the model to explain a calculation step by step"
        assert [(a.name, a.required) for a in explain.arguments] == [("expression", True)]
        got = await client.get_prompt("compute_explain", {"expression": "6 * 7"})
        assert [(m.role, m.content.text) for m in got.messages] == [
            ("user", "Explain step by step how to compute 6 * 7.")
        ]
        with pytest.raises(MCPError, match='"expression" is a required argument'):
            await client.get_prompt("compute_explain", {})
        with pytest.raises(MCPError, match='no argument "stolen"'):
            await client.get_prompt("compute_explain", {"expression": "1", "stolen": "x"})


@pytest.mark.parametrize("mode", MODES)
async def test_a_server_on_the_sdks_2_line_is_served_the_same_way(
    moat_bin: Path, server: Callable[[str], Path], tmp_path: Path, mode: str
) -> None:
    config = config_for(tmp_path, "v2", server("v2"))
    async with serving(moat_bin, tmp_path, mode, config) as client:
        (shout,) = (await client.list_tools()).tools
        assert shout.name == "v2_shout"
        assert shout.description == "Says it louder"
        assert shout.input_schema["properties"]["times"] == {"default": 1, "type": "integer", "minimum": 1, "maximum": 5}
        assert shout.output_schema["properties"] == {"loud": {"type": "string"}}
        # zod's default fills what the caller left out, inside the server.
        loud = await client.call_tool("v2_shout", {"text": "hi"})
        assert loud.structured_content == {"loud": "HI!"}
        empty = await client.call_tool("v2_shout", {"text": ""})
        assert empty.is_error is True
        assert "invalid arguments" in empty.content[0].text


@pytest.mark.parametrize("era", ERAS)
def test_the_typescript_client_lists_and_calls_the_server(
    inspector: Callable[..., tuple[int, Any]], moat_bin: Path, server: Callable[[str], Path], era: str
) -> None:
    # The Inspector runs with a HOME of its own: moat is told where the compiled code is.
    served = ["-e", f"MOAT_CACHE_DIR={cache_dir()}", "--connect-timeout", "300000",
              str(moat_bin), "serve", str(server("compute"))]
    code, listed = inspector("--protocol-era", era, *served, "--method", "tools/list")
    assert code == 0, listed
    tools = {tool["name"]: tool for tool in listed["result"]["tools"]}
    names = sorted(tools)
    assert names == ["compute_add", "compute_convert", "compute_divide", "compute_stats"]
    assert tools["compute_add"]["inputSchema"]["required"] == ["a", "b"]
    code, called = inspector("--protocol-era", era, *served, "--method", "tools/call",
                             "--tool-name", "compute_stats", "--tool-args-json", json.dumps({"values": [2, 4]}))
    assert code == 0, called
    assert called["result"]["structuredContent"]["mean"] == 3
    code, refused = inspector("--protocol-era", era, *served, "--method", "tools/call",
                              "--tool-name", "compute_divide", "--tool-args-json", json.dumps({"a": 1, "b": 0}))
    assert code == TOOL_ERROR_EXIT, refused
    assert "division by zero" in refused["result"]["content"][0]["text"]


# --- Network and environment the sandbox way --------------------------------------------------


class Upstream:
    """A loopback HTTP server that counts the requests it receives and keeps their headers."""

    def __init__(self) -> None:
        self.seen: list[Any] = []  # each request's headers, looked up by any case
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server API)
                upstream.seen.append(self.headers)
                body = f"hello from upstream; authorization={self.headers.get('Authorization')}".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstreams() -> Iterator[tuple[Upstream, Upstream]]:
    """Two upstreams: one the server is granted, one it is not."""
    granted, other = Upstream(), Upstream()
    yield granted, other
    granted.stop()
    other.stop()


UPSTREAM_TOKEN = "upstream-secret-0123456789"


@pytest.mark.parametrize("mode", MODES)
async def test_fetch_goes_through_the_grants_and_carries_the_injected_credential(
    moat_bin: Path, server: Callable[[str], Path], tmp_path: Path, mode: str,
    upstreams: tuple[Upstream, Upstream],
) -> None:
    granted, other = upstreams
    config = write_config(
        tmp_path,
        f"[plugins.fetcher]\npath = {json.dumps(str(server('fetcher')))}\n"
        f"network = [{json.dumps(granted.origin)}]\n"
        f'env = {{ FETCHER_GREETING = "hello from moat.toml" }}\n'
        f'inject = [{{ host = {json.dumps(granted.origin)}, header = "Authorization", '
        f'value = "Bearer ${{secret:UPSTREAM_TOKEN}}" }}]\n',
        secrets=f'UPSTREAM_TOKEN = "{UPSTREAM_TOKEN}"\n',
    )
    async with serving(moat_bin, tmp_path, mode, config, env={"FETCHER_GREETING": "from the shell"}) as client:
        fetched = await client.call_tool("fetcher_fetch_url", {"url": f"{granted.origin}/data"})
        assert fetched.is_error is False, fetched
        # moat added the credential on the way out, and keeps it from the server on the way back.
        assert [seen.get("Authorization") for seen in granted.seen] == [f"Bearer {UPSTREAM_TOKEN}"]
        assert fetched.content[0].text.startswith("200\nhello from upstream; authorization=")
        assert UPSTREAM_TOKEN not in fetched.content[0].text

        denied = await client.call_tool("fetcher_fetch_url", {"url": f"{other.origin}/data"})
        assert denied.is_error is True
        assert other.seen == []

        # The env value moat.toml grants, read in the handler, not the shell's.
        assert_text_only(await client.call_tool("fetcher_greeting", {}), "hello from moat.toml")


@pytest.mark.parametrize("mode", MODES)
async def test_a_hostile_server_reaches_nothing_it_was_not_granted(
    moat_bin: Path, server: Callable[[str], Path], tmp_path: Path, mode: str,
    upstreams: tuple[Upstream, Upstream],
) -> None:
    target, _ = upstreams
    secret = tmp_path / "secret.txt"
    secret.write_text("do-not-leak")
    config = config_for(tmp_path, "hostile", server("hostile"), "max_memory_mb = 128\n")
    async with serving(moat_bin, tmp_path, mode, config, env={"HOSTILE_BAIT": "do-not-leak"}) as client:
        out = await client.call_tool("hostile_exfiltrate", {"url": f"{target.origin}/steal"})
        assert out.is_error is True, out
        assert target.seen == []

        # JavaScript in the component has no file API, and fetch() no file: scheme.
        stolen = await client.call_tool("hostile_read_file", {"path": str(secret)})
        assert stolen.is_error is True, stolen
        assert "do-not-leak" not in stolen.content[0].text

        env = await client.call_tool("hostile_dump_env", {})
        assert env.is_error is False, env
        assert json.loads(env.content[0].text) == {}

        hog = await client.call_tool("hostile_hog", {})
        assert hog.is_error is True, hog
        # The next call has a fresh instance.
        again = await client.call_tool("hostile_dump_env", {})
        assert json.loads(again.content[0].text) == {}


# --- Asking the client, reporting progress ----------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_the_server_asks_the_client_and_reports_progress_and_logs(
    moat_bin: Path, server: Callable[[str], Path], tmp_path: Path, mode: str
) -> None:
    asked: list[Any] = []
    logs: list[Any] = []

    async def elicit(_context: Any, params: Any) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action="accept", content={"answer": "blue"})

    async def on_log(params: Any) -> None:
        logs.append(params)

    config = config_for(tmp_path, "asker", server("asker"))
    async with serving(moat_bin, tmp_path, mode, config, elicitation_callback=elicit, logging_callback=on_log) as client:
        answered = await client.call_tool("asker_ask", {"question": "Favourite colour?"})
        assert_text_only(answered, "the user answered: blue")
        assert [params.message for params in asked] == ["Favourite colour?"]

        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total, message))

        # A 2026-07-28 request asks for log messages in its `_meta`.
        meta = {LOG_LEVEL_META_KEY: "debug"} if mode == MODERN else None
        counted = await client.call_tool("asker_count", {"n": 3}, progress_callback=on_progress, meta=meta)
        assert_text_only(counted, "counted to 3")
        assert progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
        deadline = time.monotonic() + SETTLE_SECONDS
        while not any(log.data == "counted to 3" for log in logs) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    assert [(log.level, log.data) for log in logs] == [("info", "counted to 3")]


# --- Handlers that never settle ---------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_handler_that_never_settles_fails_its_call_and_the_next_call_works(
    moat_bin: Path, server: Callable[[str], Path], tmp_path: Path, mode: str
) -> None:
    config = config_for(tmp_path, "stuck", server("stuck"), "deadline_ms = 2000\n")
    async with serving(moat_bin, tmp_path, mode, config) as client:
        # Nothing left to wait on: the engine stops at once. A timer that keeps the loop busy:
        # the deadline stops it. A throw where the SDK cannot catch it: the engine reports it.
        expected = {
            "stuck_never": "the handler's promise never settled",
            "stuck_spin_timer": "deadline",
            "stuck_throw_later": "thrown from a timer",
        }
        for tool, said in expected.items():
            result = await client.call_tool(tool, {})
            assert result.is_error is True, (tool, result)
            assert said in result.content[0].text, (tool, result)
            assert_text_only(await client.call_tool("stuck_fine", {}), "fine")


# --- A new server, the SDK's way ------------------------------------------------------------


async def test_moat_new_makes_an_sdk_server_that_builds_and_serves(moat_bin: Path, tmp_path: Path) -> None:
    made = subprocess.run([str(moat_bin), "new", "hello", "--lang", "typescript-sdk"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "hello"
    assert not (project / "wit").exists()
    # No node_modules yet: `moat build` runs `npm install` first.
    built = subprocess.run([str(moat_bin), "build"], cwd=project, capture_output=True, text=True,
                           timeout=600, check=False)
    assert built.returncode == 0, built.stderr
    config = config_for(tmp_path, "hello", project / "build" / "hello.wasm")
    async with serving(moat_bin, tmp_path, MODERN, config) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert sorted(tools) == ["hello_add", "hello_greet"]
        assert tools["hello_greet"].input_schema["properties"]["name"]["description"] == "Who to greet"
        assert_text_only(await client.call_tool("hello_greet", {"name": "moat"}), "Hello, moat!")
        added = await client.call_tool("hello_add", {"a": 2, "b": 40})
        assert added.structured_content == {"sum": 42}
