"""A plugin written in JavaScript: tests/js/echo, built by componentize-js, served and called as
the Rust echo plugin is.

Environment:
  MOAT_JS_PLUGINS  the folder of built JavaScript plugins (`./dev test` sets it to
                   target/js-plugins); a test that needs it fails when it is unset or missing
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from support import MODES, assert_raw_text_only, assert_text_only

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_HINT = "build it with `node tests/js/echo/build.mjs target/js-plugins/echo_js.wasm`, or run `./dev test`"


@pytest.fixture(scope="module")
def echo_js() -> Path:
    """The JavaScript echo component, or a failure saying why it cannot be found."""
    folder = os.environ.get("MOAT_JS_PLUGINS")
    if not folder:
        pytest.fail(f"MOAT_JS_PLUGINS is unset: it names the folder of built JavaScript plugins; {BUILD_HINT}")
    path = Path(folder) / "echo_js.wasm"
    if not path.is_absolute() and not path.exists():
        path = REPO_ROOT / path
    if not path.is_file():
        pytest.fail(f"echo_js.wasm is missing from MOAT_JS_PLUGINS={folder}; {BUILD_HINT}")
    return path.resolve()


# The input schemas the WIT types make (tests/js/echo/wit/echo.wit). Descriptions and defaults come
# from doc comments, which this build does not embed, so they are left out of the comparison.
ECHO_SCHEMA = {
    "type": "object",
    "properties": {"message": {"type": "string"}},
    "required": ["message"],
    "additionalProperties": False,
}
REPEAT_SCHEMA = {
    "type": "object",
    "properties": {
        "message": {"type": "string"},
        "times": {"type": "integer", "minimum": 0, "maximum": 255},
        "separator": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["message", "times"],
    "additionalProperties": False,
}


def typed(schema: Any) -> Any:
    """`schema` without the keywords doc comments add."""
    if isinstance(schema, dict):
        return {k: typed(v) for k, v in schema.items() if k not in ("description", "default")}
    if isinstance(schema, list):
        return [typed(item) for item in schema]
    return schema


@asynccontextmanager
async def serving(moat_bin: Path, tmp_path: Path, mode: str, plugin: Path) -> AsyncIterator[Client]:
    """The `mcp` client on a `moat serve PLUGIN` of its own, over stdio."""
    params = StdioServerParameters(
        command=str(moat_bin),
        args=["serve", str(plugin)],
        env={k: v for k, v in os.environ.items() if k.startswith("MOAT_")},
    )
    with (tmp_path / f"moat-{mode}.stderr").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=120) as client:
            yield client


@pytest.mark.parametrize("mode", MODES)
async def test_serves_the_javascript_echo(moat_bin: Path, echo_js: Path, tmp_path: Path, mode: str) -> None:
    async with serving(moat_bin, tmp_path, mode, echo_js) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert sorted(tools) == ["echo_js_echo", "echo_js_repeat"]
        assert typed(tools["echo_js_echo"].input_schema) == ECHO_SCHEMA
        assert typed(tools["echo_js_repeat"].input_schema) == REPEAT_SCHEMA
        # A string result is text alone.
        assert tools["echo_js_echo"].output_schema is None

        text = "héllo ✓ \"quoted\"\n🌍"
        assert_text_only(await client.call_tool("echo_js_echo", {"message": text}), text)
        joined = await client.call_tool("echo_js_repeat", {"message": "ab", "times": 3, "separator": "-"})
        assert_text_only(joined, "ab-ab-ab")
        # The optional parameter left out reaches JavaScript as `undefined`.
        assert_text_only(await client.call_tool("echo_js_repeat", {"message": "ab", "times": 2}), "abab")


def test_moat_call_runs_the_javascript_echo(moat_bin: Path, echo_js: Path) -> None:
    done = subprocess.run(
        [str(moat_bin), "call", str(echo_js), "echo", json.dumps({"message": "from JavaScript"})],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert_raw_text_only(json.loads(done.stdout), "from JavaScript")
