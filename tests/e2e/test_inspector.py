"""The MCP Inspector CLI (`@modelcontextprotocol/inspector`, a real client of the TypeScript SDK)
against moat, over stdio and over HTTP, in both protocol eras.

Environment: MOAT_NODE_TOOLS, the `node_modules/.bin` folder holding `node` (22.19 or later) and
`mcp-inspector` (default: tests/npm/node_modules/.bin, where `./dev test` installs them).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT
from support import TOKEN, assert_raw_text_only
from test_http_protocol import HttpServer

# The Inspector's exit code when the tool itself reports an error.
TOOL_ERROR_EXIT = 5
ERAS = ["legacy", "modern"]


@pytest.fixture(scope="module")
def node_tools() -> Path:
    value = os.environ.get("MOAT_NODE_TOOLS", "tests/npm/node_modules/.bin")
    path = Path(value) if Path(value).is_absolute() else REPO_ROOT / value
    if not (path / "mcp-inspector").exists() or not (path / "node").exists():
        pytest.fail(f"mcp-inspector or node is missing from {path}; `./dev test` installs them")
    return path


@pytest.fixture(scope="module")
def http_server(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HttpServer]:
    path = tmp_path_factory.mktemp("inspector-http") / "moat.stderr"
    server = HttpServer(moat_bin, [plugin("echo"), plugin("chatty")], path)
    yield server
    server.stop()


@pytest.fixture
def inspector(node_tools: Path, tmp_path: Path) -> Callable[..., tuple[int, Any]]:
    """Runs `mcp-inspector --cli --format json ARGS…`; returns its exit code and JSON output."""

    def run(*args: str) -> tuple[int, Any]:
        # A HOME of its own: the Inspector keeps a catalog of servers there.
        env = dict(
            os.environ, PATH=f"{node_tools}{os.pathsep}{os.environ['PATH']}", HOME=str(tmp_path)
        )
        done = subprocess.run(
            [str(node_tools / "mcp-inspector"), "--cli", "--format", "json", *args],
            capture_output=True, env=env, timeout=120, check=False,
        )
        try:
            output = json.loads(done.stdout)
        except ValueError:
            pytest.fail(f"the Inspector printed no JSON (exit {done.returncode}):\n"
                        f"stdout: {done.stdout!r}\nstderr: {done.stderr.decode(errors='replace')}")
        return done.returncode, output

    return run


@pytest.fixture(params=["stdio", "http"])
def target(
    request: pytest.FixtureRequest,
    moat_bin: Path,
    plugin: Callable[[str], Path],
) -> list[str]:
    """How the Inspector reaches moat: the command that starts it, or the URL it serves."""
    if request.param == "http":
        server: HttpServer = request.getfixturevalue("http_server")
        return [f"http://127.0.0.1:{server.port}/mcp", "--header", f"Authorization: Bearer {TOKEN}"]
    return [str(moat_bin), "serve", str(plugin("echo")), str(plugin("chatty"))]


@pytest.mark.parametrize("era", ERAS)
def test_tools_list(inspector: Callable[..., tuple[int, Any]], target: list[str], era: str) -> None:
    code, output = inspector("--protocol-era", era, *target, "--method", "tools/list")
    assert code == 0, output
    tools = {tool["name"]: tool for tool in output["result"]["tools"]}
    assert {"echo_echo", "echo_repeat", "chatty_nap"} <= tools.keys()
    repeat = tools["echo_repeat"]["inputSchema"]
    assert repeat["required"] == ["message", "times"]
    assert repeat["properties"]["times"]["maximum"] == 255


@pytest.mark.parametrize("era", ERAS)
def test_tools_call_with_arguments(
    inspector: Callable[..., tuple[int, Any]], target: list[str], era: str
) -> None:
    arguments = json.dumps({"message": "ab", "times": 3, "separator": "-"})
    code, output = inspector("--protocol-era", era, *target, "--method", "tools/call",
                             "--tool-name", "echo_repeat", "--tool-args-json", arguments)
    assert code == 0, output
    assert_raw_text_only(output["result"], "ab-ab-ab")


def test_a_tool_error_is_reported_as_one(
    inspector: Callable[..., tuple[int, Any]], target: list[str]
) -> None:
    code, output = inspector(*target, "--method", "tools/call", "--tool-name", "chatty_crash",
                             "--tool-args-json", json.dumps({"message": "inspected"}))
    assert code == TOOL_ERROR_EXIT, output
    assert output["result"]["isError"] is True
    assert "inspected" in output["result"]["content"][0]["text"]


@pytest.fixture(scope="module")
def notebook_config(
    plugin: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    folder = tmp_path_factory.mktemp("inspector-notes")
    (folder / "first.md").write_text("# First\n")
    config = folder / "moat.toml"
    config.write_text(
        f"[plugins.notebook]\npath = {json.dumps(str(plugin('notebook')))}\n"
        f'files = [{{ host = {json.dumps(str(folder))}, guest = "/notes", mode = "ro" }}]\n'
    )
    return config


@pytest.mark.parametrize("era", ERAS)
def test_a_resource_is_read_and_a_prompt_got(
    inspector: Callable[..., tuple[int, Any]], moat_bin: Path, notebook_config: Path, era: str
) -> None:
    # Through a script: the Inspector takes any `--config` on its command line for its own.
    script = notebook_config.with_name("serve.sh")
    script.write_text(f'#!/bin/sh\nexec "{moat_bin}" serve --config "{notebook_config}"\n')
    script.chmod(0o755)
    served = [str(script)]
    code, output = inspector("--protocol-era", era, *served, "--method", "resources/read",
                             "--uri", "notebook://notes/first")
    assert code == 0, output
    [contents] = output["result"]["contents"]
    assert contents == {"uri": "notebook://notes/first", "mimeType": "text/markdown",
                        "text": "# First\n"}

    code, output = inspector("--protocol-era", era, *served, "--method", "prompts/get",
                             "--prompt-name", "notebook_summarize", "--prompt-args", "name=first")
    assert code == 0, output
    embedded = output["result"]["messages"][0]["content"]
    assert embedded["type"] == "resource"
    assert embedded["resource"]["text"] == "# First\n"
