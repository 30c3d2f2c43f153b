"""What the end-to-end tests share: where moat and the plugins are, and servers to talk to.

Every test talks to a real `moat serve` process over stdio. Starting one costs seconds (moat compiles
every plugin it serves), so the servers driven by the `mcp` client start once per session and
protocol mode and are shared (each worker of `./dev test`'s pytest-xdist is a session of its own);
the tests that need a process of their own (raw stdio, stdin EOF) start one.

Environment:
  MOAT_BIN      the moat executable (default: target/debug/moat)
  MOAT_PLUGINS  the folder of built plugins (default: target/wasm-plugins/wasm32-wasip2/release)
Relative paths are taken from the current folder, then from the repository root. When moat, the
folder or one of the plugins the tests use (echo, chatty) is missing, the run stops at once and says
which.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from pytest_asyncio import is_async_test
from support import DEADLINE_MS, MODES, RawServer, Served, Servers

REPO_ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Runs every async test in the session's event loop, where the shared servers live."""
    session_loop = pytest.mark.asyncio(loop_scope="session")
    for item in items:
        if is_async_test(item):
            item.add_marker(session_loop, append=False)


# The plugins the tests call; anything else in MOAT_PLUGINS is left alone.
PLUGINS = ["echo", "chatty", "shapes", "weather", "text"]
BUILD_HINT = "build them with `cargo test` and `cargo build -p moat`, or run `./dev test`"


def _locate(variable: str, default: str) -> tuple[Path | None, str]:
    """The path `variable` names (or `default`), and how to name it in an error."""
    value = os.environ.get(variable)
    if not value:
        return REPO_ROOT / default, f"{REPO_ROOT / default} ({variable} is unset)"
    candidates = [Path(value)]
    if not Path(value).is_absolute():
        candidates.append(REPO_ROOT / value)
    for candidate in candidates:
        if candidate.exists():
            return candidate, f"{variable}={value}"
    return None, f"{variable}={value}"


def _paths() -> tuple[Path, Path]:
    """moat and the plugin folder; stops the whole run, with one clear message, when missing."""
    problems = []
    moat, moat_source = _locate("MOAT_BIN", "target/debug/moat")
    if moat is None or not moat.is_file():
        problems.append(f"the moat executable is missing: {moat_source}")
    plugins, plugins_source = _locate("MOAT_PLUGINS", "target/wasm-plugins/wasm32-wasip2/release")
    if plugins is None or not plugins.is_dir():
        problems.append(f"the folder of built plugins is missing: {plugins_source}")
    else:
        for name in PLUGINS:
            if not (plugins / f"{name}.wasm").is_file():
                problems.append(f"plugin {name}.wasm is missing from {plugins_source}")
    if problems:
        pytest.exit("moat e2e: " + "; ".join(problems) + f"; {BUILD_HINT}", returncode=1)
    assert moat is not None and plugins is not None
    return moat.resolve(), plugins.resolve()


def pytest_sessionstart(session: pytest.Session) -> None:
    _paths()


@pytest.fixture(scope="session")
def moat_bin() -> Path:
    return _paths()[0]


@pytest.fixture(scope="session")
def plugins_dir() -> Path:
    return _paths()[1]


@pytest.fixture(scope="session")
def plugin(plugins_dir: Path) -> Callable[[str], Path]:
    """The path of a built plugin, by crate name."""
    return lambda name: plugins_dir / f"{name}.wasm"


@pytest.fixture(scope="session")
def moat_toml(tmp_path_factory: pytest.TempPathFactory, plugin: Callable[[str], Path]) -> Path:
    """A moat.toml serving `echo`, and `chatty` with a short deadline."""
    path = tmp_path_factory.mktemp("config") / "moat.toml"
    path.write_text(
        f"[plugins.echo]\npath = {json.dumps(str(plugin('echo')))}\n\n"
        f"[plugins.chatty]\npath = {json.dumps(str(plugin('chatty')))}\n"
        f"deadline_ms = {DEADLINE_MS}\n"
    )
    return path


# --- Servers driven by the `mcp` client -------------------------------------------------------


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def servers(
    moat_bin: Path, moat_toml: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Servers]:
    servers = Servers(moat_bin, moat_toml, tmp_path_factory.mktemp("stderr"))
    yield servers
    await servers.stop_all()


@pytest_asyncio.fixture(scope="session", loop_scope="session", params=MODES)
async def served(request: pytest.FixtureRequest, servers: Servers) -> Served:
    """The shared server, once per protocol mode of the client."""
    return await servers.get(request.param)


# --- Raw stdio --------------------------------------------------------------------------------


@pytest.fixture
def raw_server(
    moat_bin: Path, tmp_path: Path
) -> Iterator[Callable[..., RawServer]]:
    """Starts `moat serve ARGS…` processes for raw stdio, stopped at the end of the test."""
    started: list[RawServer] = []

    def start(*args: str) -> RawServer:
        server = RawServer(moat_bin, list(args), tmp_path / f"moat-{len(started)}.stderr")
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def raw_chatty(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RawServer]:
    """`moat serve chatty.wasm` (default limits) spoken to line by line, initialized, per module."""
    server = RawServer(
        moat_bin, [str(plugin("chatty"))], tmp_path_factory.mktemp("raw") / "moat.stderr"
    )
    server.initialize()
    yield server
    server.stop()
