"""Changing what moat serves while it runs: the `mcp` client hears `notifications/tools/list_changed`
(legacy sessions on their connection, 2026-07-28 clients through `subscriptions/listen`) and lists
the new tools; bad edits cost nothing; `tools/list` pages with opaque cursors.

Every test starts a `moat serve` of its own on a config or plugin folder in a temporary folder, and
edits them there.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import ToolListChangedNotification
from support import LEGACY, MODERN, assert_text_only, free_port, http_transport, wait_for_port

# How long a reload may take: moat waits for the files to settle, then compiles what changed.
RELOAD_SECONDS = 60.0


class Watched:
    """A client connected to a `moat serve` of its own, counting tool-list change notifications."""

    def __init__(self, client: Client, stderr_path: Path, process: subprocess.Popen[bytes] | None):
        self.client = client
        self.stderr_path = stderr_path
        self.process = process
        #: Every `notifications/tools/list_changed` received, as sent on the wire.
        self.notifications: list[dict[str, Any]] = []

    @property
    def changes(self) -> int:
        return len(self.notifications)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + RELOAD_SECONDS
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not happen within {RELOAD_SECONDS}s\nmoat's stderr:\n{self.stderr()}")
            await asyncio.sleep(0.05)

    async def next_change(self, seen: int) -> None:
        """Waits for a tool-list change notification after the first `seen` ones."""
        await self.until(lambda: self.changes > seen, "notifications/tools/list_changed")

    async def names(self) -> list[str]:
        """Every tool, walking all pages."""
        names: list[str] = []
        cursor = None
        while True:
            page = await self.client.list_tools(cursor=cursor, cache_mode="refresh")
            names.extend(tool.name for tool in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return names


def moat_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("MOAT_") or k in ("HOME", "PATH")}


@asynccontextmanager
async def serving(
    moat_bin: Path, args: list[str], tmp_path: Path, mode: str, http: bool = False
) -> AsyncIterator[Watched]:
    """`moat serve ARGS…` over stdio (or HTTP), with an `mcp` client in `mode` connected to it."""
    stderr_path = tmp_path / f"moat-{time.monotonic_ns()}.stderr"
    watched: Watched | None = None

    async def on_message(message: Any) -> None:
        if isinstance(message, ToolListChangedNotification) and watched is not None:
            watched.notifications.append(message.model_dump(by_alias=True, exclude_none=True))

    with stderr_path.open("w") as errlog:
        if http:
            port = free_port()
            process = subprocess.Popen(
                [str(moat_bin), "serve", *args, "--http", f"127.0.0.1:{port}"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errlog,
                env=moat_env(),
            )
            try:
                wait_for_port(port, process, stderr_path)
                async with Client(
                    http_transport(f"http://127.0.0.1:{port}/mcp"),
                    mode=mode,
                    message_handler=on_message,
                    read_timeout_seconds=60,
                ) as client:
                    watched = Watched(client, stderr_path, process)
                    yield watched
            finally:
                process.terminate()
                process.wait(timeout=10)
        else:
            params = StdioServerParameters(command=str(moat_bin), args=["serve", *args], env=moat_env())
            async with Client(
                stdio_client(params, errlog=errlog),
                mode=mode,
                message_handler=on_message,
                read_timeout_seconds=60,
            ) as client:
                watched = Watched(client, stderr_path, None)
                await client.list_tools()  # moat has loaded its plugins
                yield watched


def write_config(path: Path, entries: dict[str, Path], extra: str = "") -> None:
    """Writes moat.toml the way editors do: a new file renamed over the old one."""
    text = "".join(f"[plugins.{name}]\npath = {json.dumps(str(wasm))}\n\n" for name, wasm in entries.items())
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text + extra)
    os.replace(temporary, path)


# --- Legacy sessions: the notification on the connection ----------------------------------------


@pytest.mark.parametrize("http", [False, True], ids=["stdio", "http"])
async def test_a_legacy_session_hears_of_config_changes(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path, http: bool
) -> None:
    config = tmp_path / "moat.toml"
    write_config(config, {"echo": plugin("echo")})
    async with serving(moat_bin, ["--config", str(config)], tmp_path, LEGACY, http=http) as moat:
        assert await moat.names() == ["echo_echo", "echo_repeat"]

        write_config(config, {"echo": plugin("echo"), "chatty": plugin("chatty")})
        await moat.next_change(0)
        names = await moat.names()
        assert "chatty_nap" in names and "echo_echo" in names
        result = await moat.client.call_tool("chatty_nap", {"ms": 1})
        assert result.structured_content == {"value": 1}

        write_config(config, {"chatty": plugin("chatty")})
        await moat.next_change(1)
        assert "echo_echo" not in await moat.names()
        with pytest.raises(MCPError, match="unknown tool"):
            await moat.client.call_tool("echo_echo", {"message": "gone"})


async def test_a_plugin_folder_is_watched(moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path) -> None:
    folder = tmp_path / "plugins"
    folder.mkdir()
    shutil.copy(plugin("echo"), folder / "echo.wasm")
    async with serving(moat_bin, [str(folder)], tmp_path, LEGACY) as moat:
        shutil.copy(plugin("chatty"), folder / "chatty.wasm")
        await moat.next_change(0)
        assert {"echo_echo", "chatty_nap"} <= set(await moat.names())

        (folder / "echo.wasm").unlink()
        await moat.next_change(1)
        names = await moat.names()
        assert "chatty_nap" in names and not any(n.startswith("echo_") for n in names)


async def test_an_engine_change_waits_for_a_restart(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    config = tmp_path / "moat.toml"
    write_config(config, {"echo": plugin("echo")}, extra="[engine]\nmax_tables_per_plugin = 32\n")
    async with serving(moat_bin, ["--config", str(config)], tmp_path, LEGACY) as moat:
        write_config(config, {"echo": plugin("echo")}, extra="[engine]\nmax_tables_per_plugin = 40\n")
        await moat.until(lambda: "[engine] changed" in moat.stderr(), "the warning of the new [engine]")
        assert "max_tables_per_plugin = 32" in moat.stderr()
        result = await moat.client.call_tool("echo_echo", {"message": "still here"})
        assert_text_only(result, "still here")

        # Out of bounds: the reload fails and says which key.
        write_config(config, {"echo": plugin("echo")}, extra="[engine]\nmax_tables_per_plugin = 0\n")
        await moat.until(lambda: "reload failed" in moat.stderr(), "the reload failure in the log")
        assert "max_tables_per_plugin" in moat.stderr().split("reload failed", 1)[1]
        assert await moat.names() == ["echo_echo", "echo_repeat"]


async def test_bad_edits_keep_the_tools_already_served(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    config = tmp_path / "moat.toml"
    echo = tmp_path / "echo.wasm"
    shutil.copy(plugin("echo"), echo)
    write_config(config, {"echo": echo})
    async with serving(moat_bin, ["--config", str(config)], tmp_path, LEGACY) as moat:
        # A config line that does not parse: nothing changes, and the log says where.
        write_config(config, {"echo": echo}, extra="[plugins.chatty]\npath = 42\n")
        await moat.until(lambda: "reload failed" in moat.stderr(), "the reload failure in the log")
        assert str(config) in moat.stderr() and "line 5" in moat.stderr()
        write_config(config, {"echo": echo})
        await moat.until(lambda: moat.stderr().count("plugins loaded") == 2, "a reload of the fixed config")

        # A plugin file that is no longer a component: the version loaded before stays.
        echo.write_bytes(echo.read_bytes()[:1000])
        await moat.until(lambda: "still serving the version loaded before" in moat.stderr(), "the kept plugin")
        assert str(echo) in moat.stderr()
        assert moat.changes == 0
        result = await moat.client.call_tool("echo_echo", {"message": "still here"})
        assert_text_only(result, "still here")
        assert await moat.names() == ["echo_echo", "echo_repeat"]

        # Both fixed, and a plugin added: one change for the client.
        shutil.copy(plugin("echo"), echo)
        write_config(config, {"echo": echo, "chatty": plugin("chatty")})
        await moat.next_change(0)
        assert "chatty_crash" in await moat.names()


async def test_a_reload_that_cannot_be_built_whole_applies_nothing(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    config = tmp_path / "moat.toml"
    write_config(config, {"echo": plugin("echo")})
    # A credential store anyone on the machine may read: moat refuses to open it.
    store = tmp_path / "credentials.sealed"
    store.write_bytes(b"not sealed")
    store.chmod(0o644)
    consent = f"""credential_store = {{ path = "{store.name}", key = "{"k" * 40}" }}

[credentials.tracker]
hosts = ["tracker.example"]
consent = {{ authorization_endpoint = "https://tracker.example/auth", token_endpoint = "https://tracker.example/token", client_id = "moat", redirect_uri = "http://127.0.0.1:{free_port()}/oauth/callback/tracker" }}
"""
    async with serving(moat_bin, ["--config", str(config)], tmp_path, LEGACY) as moat:
        # A new plugin, and credentials whose store cannot be opened: the plugin must not be
        # served under rules the reload could not finish applying.
        text = consent + "".join(
            f"[plugins.{name}]\npath = {json.dumps(str(plugin(name)))}\n\n" for name in ("echo", "chatty"))
        temporary = config.with_suffix(".tmp")
        temporary.write_text(text)
        os.replace(temporary, config)
        await moat.until(lambda: "reload failed" in moat.stderr(), "the reload failure in the log")
        assert "is open to its group or others" in moat.stderr(), moat.stderr()
        assert moat.changes == 0
        assert await moat.names() == ["echo_echo", "echo_repeat"]
        # Fixed, it applies whole.
        store.chmod(0o600)
        store.unlink()
        temporary.write_text(text)
        os.replace(temporary, config)
        await moat.next_change(0)
        assert "chatty_crash" in await moat.names()


async def test_sighup_reloads(moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path) -> None:
    """A change no watched folder sees (the target of a symlinked plugin) is picked up on SIGHUP."""
    real = tmp_path / "real"
    real.mkdir()
    shutil.copy(plugin("echo"), real / "tool.wasm")
    link = tmp_path / "tool.wasm"
    link.symlink_to(real / "tool.wasm")
    config = tmp_path / "moat.toml"
    write_config(config, {"tool": link})
    async with serving(moat_bin, ["--config", str(config)], tmp_path, LEGACY, http=True) as moat:
        assert await moat.names() == ["tool_echo", "tool_repeat"]
        shutil.copy(plugin("chatty"), real / "tool.wasm")
        await asyncio.sleep(1.5)
        assert moat.changes == 0, "the symlink's target is not watched"

        assert moat.process is not None
        moat.process.send_signal(signal.SIGHUP)
        await moat.next_change(0)
        assert "reloading: SIGHUP" in moat.stderr()
        assert "tool_nap" in await moat.names()
        # The missing lock is news at start, not at each reload.
        assert moat.stderr().count("are not pinned") == 1, moat.stderr()


async def test_a_call_in_flight_finishes_across_a_reload(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    config = tmp_path / "moat.toml"
    write_config(config, {"echo": plugin("echo"), "chatty": plugin("chatty")})
    async with serving(moat_bin, ["--config", str(config)], tmp_path, LEGACY) as moat:
        nap = asyncio.create_task(moat.client.call_tool("chatty_nap", {"ms": 3000}))
        await asyncio.sleep(0.3)
        write_config(config, {"echo": plugin("echo")})
        await moat.next_change(0)
        assert not nap.done(), "the reload came after the call"
        with pytest.raises(MCPError, match="unknown tool"):
            await moat.client.call_tool("chatty_nap", {"ms": 1})
        result = await nap
        assert not result.is_error, result
        assert result.structured_content == {"value": 3000}


# --- 2026-07-28: subscriptions/listen ------------------------------------------------------------


@pytest.mark.parametrize("http", [False, True], ids=["stdio", "http"])
async def test_a_modern_client_hears_through_subscriptions_listen(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path, http: bool
) -> None:
    config = tmp_path / "moat.toml"
    write_config(config, {"echo": plugin("echo")})
    async with serving(moat_bin, ["--config", str(config)], tmp_path, MODERN, http=http) as moat:
        async with moat.client.listen(tools_list_changed=True) as subscription:
            assert subscription.honored.tools_list_changed
            write_config(config, {"echo": plugin("echo"), "chatty": plugin("chatty")})
            event = await asyncio.wait_for(anext(subscription), RELOAD_SECONDS)
            assert type(event).__name__ == "ToolsListChanged", event
        assert "chatty_nap" in await moat.names()
        # A 2026-07-28 client gets no notification outside its subscription: each one is tagged.
        assert moat.notifications, "the client's handler sees the subscription's notifications too"
        for notification in moat.notifications:
            meta = notification.get("params", {}).get("_meta", {})
            assert meta.get("io.modelcontextprotocol/subscriptionId") == subscription.subscription_id, notification


# --- Pagination -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [LEGACY, MODERN])
async def test_tools_list_pages_with_the_real_client(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path, mode: str
) -> None:
    config = tmp_path / "moat.toml"
    write_config(config, {"echo": plugin("echo"), "chatty": plugin("chatty")})
    async with serving(moat_bin, ["--config", str(config), "--page-size", "3"], tmp_path, mode) as moat:
        first = await moat.client.list_tools(cache_mode="refresh")
        assert len(first.tools) == 3 and first.next_cursor
        names = await moat.names()
        assert len(names) == 10 and len(set(names)) == 10
        assert names == sorted(names)
        with pytest.raises(MCPError, match="invalid cursor") as error:
            await moat.client.list_tools(cursor="bogus", cache_mode="refresh")
        assert error.value.error.code == -32602


async def test_a_thousand_tools_page_by_page(moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path) -> None:
    """30 copies of `shapes` (33 tools each) and 5 of `echo` (2 each): every tool exactly once."""
    config = tmp_path / "moat.toml"
    entries = {f"p{i:02}": plugin("shapes" if i < 30 else "echo") for i in range(35)}
    write_config(config, entries)
    async with serving(moat_bin, ["--config", str(config)], tmp_path, LEGACY) as moat:
        started = time.monotonic()
        names = await moat.names()
        elapsed = time.monotonic() - started
        assert len(names) == 1000 and len(set(names)) == 1000
        print(f"\nlisting 1000 tools in pages of 100 over stdio took {elapsed * 1000:.0f} ms")
