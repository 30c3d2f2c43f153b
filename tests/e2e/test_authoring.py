"""A plugin author's path in Python, JavaScript and TypeScript: `moat new`, `moat build`
(componentize-py, or esbuild and componentize-js, then the WIT docs and manifest embedded), the
project's own test, and the tool served to the Python `mcp` client with its description from the
WIT doc comments.

Environment:
  componentize-py on PATH or in the virtualenv beside this Python (tests/e2e/requirements.txt)
  npm and node on PATH; the JavaScript project's packages come from the npm registry (or its
  cache, which `./dev test` filled for tests/js)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

# The toolchains: componentize-py from this Python's virtualenv, node and npm from PATH.
TOOL_PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def run(*args: str | Path, cwd: Path, moat_bin: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=os.pathsep.join([str(moat_bin.parent), TOOL_PATH]))
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


async def served_greet(moat_bin: Path, component: Path, tool: str) -> tuple[str | None, str]:
    """The description of `tool` and its answer to "moat", from a `moat serve COMPONENT`."""
    params = StdioServerParameters(command=str(moat_bin), args=["serve", str(component)])
    async with Client(stdio_client(params), read_timeout_seconds=120) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool(tool, {"name": "moat"})
        return tools[tool].description, result.content[0].text


@pytest.mark.parametrize("lang", ["python", "javascript", "typescript"])
async def test_new_build_test_and_serve(moat_bin: Path, tmp_path: Path, lang: str) -> None:
    moat = moat_bin.resolve()
    started = time.monotonic()
    run(moat, "new", "hello-tools", "--lang", lang, cwd=tmp_path, moat_bin=moat)
    project = tmp_path / "hello-tools"
    manifest = project / ("pyproject.toml" if lang == "python" else "package.json")
    assert manifest.is_file() and (project / "wit/hello-tools.wit").is_file()
    if lang != "python":
        run("npm", "install", "--prefer-offline", "--no-audit", "--no-fund", cwd=project, moat_bin=moat)
    if lang == "typescript":
        run("npm", "run", "check", cwd=project, moat_bin=moat)
    built = run(moat, "build", cwd=project, moat_bin=moat)
    assert "carries the docs of 1 of its" in built.stderr and "permission manifest" in built.stderr
    component = project / "build/hello-tools.wasm"

    # The project's own test calls the component through moat.
    test = [sys.executable, "-m", "unittest", "-q"] if lang == "python" else ["npm", "test"]
    run(*test, cwd=project, moat_bin=moat)

    description, answer = await served_greet(moat, component, "hello_tools_greet")
    assert answer == "Hello, moat!"
    assert description is not None and description.startswith("Greets `name`."), description
    report = json.loads(run(moat, "inspect", "--json", component, cwd=project, moat_bin=moat).stdout)
    assert report["manifest"] == {"files": [], "env": [], "network": []}
    assert report["summary"].startswith("What the hello-tools plugin is for")
    print(f"{lang}: new → build → test → served in {time.monotonic() - started:.1f} s")


def test_new_refuses_a_bad_name_and_an_existing_folder(moat_bin: Path, tmp_path: Path) -> None:
    bad = subprocess.run([str(moat_bin), "new", "Hello_Tools", "--lang", "python"], capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode != 0 and "is not a plugin name" in bad.stderr
    (tmp_path / "taken").mkdir()
    taken = subprocess.run([str(moat_bin), "new", "taken", "--lang", "python"], capture_output=True, text=True, cwd=tmp_path)
    assert taken.returncode != 0 and "exists already" in taken.stderr


def test_build_outside_a_project_says_what_it_looks_for(moat_bin: Path, tmp_path: Path) -> None:
    done = subprocess.run([str(moat_bin), "build", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode != 0
    assert "no pyproject.toml, package.json or Cargo.toml" in done.stderr
