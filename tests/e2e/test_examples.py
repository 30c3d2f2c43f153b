"""The ported examples, each built as its author would, then served beside the Rust plugin it
was ported from: examples/typescript/weather (`npm install`, `moat build`, `npm test`) against
plugins/weather, on the same Open-Meteo-shaped server on loopback, and examples/python/text
(`moat build`, `python -m unittest`) against part of plugins/text. A port has its original's WIT,
so a client must see the same tools, schemas and descriptions, and get the same answers.

Environment:
  npm and node on PATH; the TypeScript example's packages come from the npm registry (or its cache)
  componentize-py in the virtualenv beside this Python (tests/e2e/requirements.txt)
  MOAT_PLUGINS  the folder of built plugins, the Rust weather.wasm and text.wasm among them
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO_ROOT = Path(__file__).resolve().parents[2]

CURRENT = {
    "timezone": "Europe/Berlin",
    "current": {
        "time": "2026-11-30T10:00", "temperature_2m": 3.5, "relative_humidity_2m": 81,
        "apparent_temperature": 0.4, "precipitation": 0.2, "weather_code": 61,
        "wind_speed_10m": 14.8, "wind_direction_10m": 250,
    },
}
DAILY = {
    "timezone": "Europe/Berlin",
    "daily": {
        "time": ["2026-11-30", "2026-12-01"], "weather_code": [3, 71],
        "temperature_2m_max": [5.1, 2.0], "temperature_2m_min": [-0.5, -3.2],
        "precipitation_sum": [0.0, 4.3], "precipitation_probability_max": [10, None],
    },
}

# Each call both plugins answer: conditions, a forecast, the API's refusal (latitude 45), a day
# count the schema refuses before the plugin runs, and an answer that is not JSON (latitude 7).
CALLS = [
    ("weather_current", {"latitude": 52.52, "longitude": 13.41}),
    ("weather_forecast", {"latitude": 52.52, "longitude": 13.41, "days": 2}),
    ("weather_current", {"latitude": 45, "longitude": 0}),
    ("weather_forecast", {"latitude": 0, "longitude": 0, "days": 17}),
    ("weather_forecast", {"latitude": 7, "longitude": 0}),
]


class Api(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (the handler's name)
        Api.seen.append(self.path)
        status, body = 200, json.dumps(CURRENT if "current=" in self.path else DAILY)
        if "latitude=45" in self.path:
            status, body = 400, json.dumps({"error": True, "reason": "Latitude must be in range of -90 to 90°."})
        elif "latitude=7" in self.path:
            body = "<html>maintenance</html>"
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def api() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def run(*args: str | Path, cwd: Path, moat_bin: Path) -> subprocess.CompletedProcess[str]:
    # moat, then componentize-py from this Python's virtualenv, then node and npm.
    path = [str(moat_bin.parent), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    env = dict(os.environ, PATH=os.pathsep.join(path))
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def weather_ts(moat_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The TypeScript weather plugin, built and tested in a copy of its folder."""
    project = tmp_path_factory.mktemp("examples") / "weather"
    shutil.copytree(REPO_ROOT / "examples/typescript/weather", project, ignore=shutil.ignore_patterns("node_modules", "build", "types"))
    run("npm", "install", "--prefer-offline", "--no-audit", "--no-fund", cwd=project, moat_bin=moat_bin)
    built = run(moat_bin, "build", cwd=project, moat_bin=moat_bin)
    assert "carries the docs of 1 of its 1 exports and its permission manifest" in built.stderr, built.stderr
    run("npm", "test", cwd=project, moat_bin=moat_bin)
    return project / "build/weather.wasm"


async def served(
    moat_bin: Path, name: str, component: Path, grants: str, calls: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The tools `component` lists as plugin `name` with `grants` (moat.toml lines), and the results of `calls`."""
    config = tmp_path / f"{component.parent.parent.name}-moat.toml"
    config.write_text(f"[plugins.{name}]\npath = {json.dumps(str(component))}\n{grants}\n")
    params = StdioServerParameters(command=str(moat_bin), args=["serve", "-q", "--config", str(config)])
    async with Client(stdio_client(params), read_timeout_seconds=120) as client:
        tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in (await client.list_tools()).tools]
        results = []
        for tool, args in calls:
            result = await client.call_tool(tool, args)
            results.append(result.model_dump(mode="json", by_alias=True, exclude_none=True))
    return tools, results


def api_grants(port: int) -> str:
    return f'network = ["http://127.0.0.1:{port}"]\nenv = {{ WEATHER_API_URL = "http://127.0.0.1:{port}" }}'


def test_the_examples_are_moat_new_projects(moat_bin: Path, tmp_path: Path) -> None:
    """What the author did not write is what `moat new` writes, so an example builds as any project."""
    run(moat_bin, "new", "weather", "--lang", "typescript", cwd=tmp_path, moat_bin=moat_bin)
    for name in ["build.mjs", "tsconfig.json", ".gitignore"]:
        assert (REPO_ROOT / "examples/typescript/weather" / name).read_text() == (tmp_path / "weather" / name).read_text(), name
    run(moat_bin, "new", "text", "--lang", "python", cwd=tmp_path, moat_bin=moat_bin)
    template = (tmp_path / "text/pyproject.toml").read_text().splitlines()
    example = (REPO_ROOT / "examples/python/text/pyproject.toml").read_text().splitlines()
    assert [line for line in example if not line.startswith("description")] == [
        line for line in template if not line.startswith("description")
    ]
    assert (REPO_ROOT / "examples/typescript/weather/wit/weather.wit").read_text().replace(
        "    import wasi:cli/environment@0.2.3;\n", ""
    ) == (REPO_ROOT / "plugins/weather/wit/weather.wit").read_text(), "the WIT is the Rust plugin's, with the environment imported"


async def test_the_port_answers_as_the_rust_plugin_does(
    moat_bin: Path, plugins_dir: Path, weather_ts: Path, api: int, tmp_path: Path
) -> None:
    rust_tools, rust_results = await served(moat_bin, "weather", plugins_dir / "weather.wasm", api_grants(api), CALLS, tmp_path)
    seen_by_rust = list(Api.seen)
    Api.seen.clear()
    ts_tools, ts_results = await served(moat_bin, "weather", weather_ts, api_grants(api), CALLS, tmp_path)
    assert ts_tools == rust_tools
    assert [t["name"] for t in ts_tools] == ["weather_current", "weather_forecast"]
    assert ts_tools[0]["description"].startswith("The current weather at a place")
    assert Api.seen == seen_by_rust, "the same requests reach the API"

    for (tool, args), rust, ts in zip(CALLS, rust_results, ts_results, strict=True):
        if "is not what was expected" in json.dumps(rust):
            # Each language's JSON parser words its own complaint; the start is the plugin's.
            for result in (rust, ts):
                assert result["isError"] is True
                assert result["content"][0]["text"].startswith("the weather API's answer is not what was expected: ")
            continue
        assert ts == rust, f"{tool} {args}"
    assert rust_results[0]["structuredContent"]["description"] == "Slight rain"
    assert rust_results[1]["structuredContent"]["value"][1]["minC"] == -3.2
    assert "HTTP 400: Latitude must be in range" in rust_results[2]["content"][0]["text"]


# What the Python port is asked, and the Rust text plugin too.
TEXT_CALLS = [
    ("text_hash", {"text": "abc", "algorithm": "sha256"}),
    ("text_hash", {"text": "", "algorithm": "md5", "encoding": "base64"}),
    ("text_hash", {"text": "héllo", "algorithm": "sha512"}),
    ("text_hash", {"text": "abc", "algorithm": "sha3"}),
    ("text_base64_encode", {"text": "hé?>", "urlSafe": True}),
    ("text_base64_encode", {"text": "hé?>"}),
    ("text_base64_decode", {"data": "aMOp\nPz4"}),
    ("text_base64_decode", {"data": "aMOpPz4="}),
    ("text_base64_decode", {"data": "a$b"}),
    ("text_base64_decode", {"data": "/w=="}),
    ("text_stats", {"text": ""}),
    ("text_stats", {"text": "two words\r\nand  more\n\nend"}),
]


@pytest.fixture(scope="module")
def text_py(moat_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Python text plugin, built and tested in a copy of its folder."""
    project = tmp_path_factory.mktemp("examples") / "text"
    shutil.copytree(REPO_ROOT / "examples/python/text", project, ignore=shutil.ignore_patterns("build", "wit_world", "__pycache__"))
    built = run(moat_bin, "build", cwd=project, moat_bin=moat_bin)
    assert "now carries the docs of 1 of its" in built.stderr and "permission manifest" in built.stderr, built.stderr
    run(sys.executable, "-m", "unittest", "-q", cwd=project, moat_bin=moat_bin)
    return project / "build/text.wasm"


async def test_the_python_port_answers_as_the_rust_plugin_does(
    moat_bin: Path, plugins_dir: Path, text_py: Path, tmp_path: Path
) -> None:
    rust_tools, rust_results = await served(moat_bin, "text", plugins_dir / "text.wasm", "", TEXT_CALLS, tmp_path)
    py_tools, py_results = await served(moat_bin, "text", text_py, "", TEXT_CALLS, tmp_path)
    ported = {t["name"] for t in py_tools}
    assert ported == {"text_hash", "text_base64_encode", "text_base64_decode", "text_stats"}
    assert py_tools == [t for t in rust_tools if t["name"] in ported]

    for (tool, args), rust, py in zip(TEXT_CALLS, rust_results, py_results, strict=True):
        if rust["isError"]:
            # Refused alike; each language words why in its own way past the first words.
            assert py["isError"], f"{tool} {args}: {py}"
            assert py["content"][0]["text"].split(":")[0] == rust["content"][0]["text"].split(":")[0], f"{tool} {args}"
            continue
        assert py == rust, f"{tool} {args}"
    assert rust_results[0]["content"][0]["text"].startswith("ba7816bf")
    assert [r["isError"] for r in rust_results].count(True) == 3, "sha3, a `$` and bytes that are not UTF-8"
