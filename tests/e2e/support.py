"""Helpers for the end-to-end tests: servers driven by the `mcp` client, and raw stdio."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import secrets
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

# The protocol modes of the `mcp` client every shared-server test runs in.
LEGACY = "legacy"
MODERN = "2026-07-28"
MODES = [LEGACY, MODERN]

# The deadline the shared servers give the `chatty` plugin.
DEADLINE_MS = 300

# How long a test waits for something that should happen at once (a notification, a log line).
SETTLE_SECONDS = 5.0


# `moat serve --http` requires a bearer token unless told otherwise; every moat the tests start
# inherits MOAT_TOKEN_FILE, so they all take this one (written here, private to its owner).
TOKEN = "moat_e2e_" + secrets.token_urlsafe(32)
TOKEN_FILE = Path(tempfile.mkdtemp(prefix="moat-e2e-token-")) / "http-token"
TOKEN_FILE.write_text(TOKEN + "\n")
TOKEN_FILE.chmod(0o600)
os.environ["MOAT_TOKEN_FILE"] = str(TOKEN_FILE)
AUTH = {"Authorization": f"Bearer {TOKEN}"}


# The first paragraph of every `instructions` moat sends.
INSTRUCTIONS_PREAMBLE = (
    "Tools run as sandboxed WebAssembly components; each one can reach only what its operator granted."
)
# The summary of the echo plugin: its world's doc comment in plugins/echo/wit/echo.wit.
ECHO_SUMMARY = "Sends input back unchanged: a way to try moat out and to measure what a call costs."


def assert_text_only(result: Any, text: str) -> None:
    """Asserts that the `mcp` client's `result` is what a tool returning a WIT `string` answers:
    a success whose only content is `text`, with no structured content."""
    assert result.is_error is False, result
    blocks = [(block.type, getattr(block, "text", None)) for block in result.content]
    assert blocks == [("text", text)], result
    assert result.structured_content is None, result


def assert_raw_text_only(result: dict[str, Any], text: str) -> None:
    """The same for the JSON `result` of a raw `tools/call` response."""
    assert result.get("isError") is False, result
    assert result["content"] == [{"type": "text", "text": text}], result
    assert "structuredContent" not in result, result


def http_transport(url: str, headers: dict[str, str] | None = None) -> Any:
    """The `mcp` client's Streamable HTTP transport to `url`, sending the tests' token (or
    `headers` instead)."""
    return streamable_http_client(url, http_client=create_mcp_http_client(headers=AUTH if headers is None else headers))


def stop(process: subprocess.Popen[Any]) -> None:
    """Ends a server the test started, killing it if it does not stop within 10 s."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen[Any], log: Path, timeout: float = 120) -> None:
    """Waits until `process` listens on 127.0.0.1:`port`; fails the test, with its `log`, if it
    ends or the time runs out first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"{process.args} did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.05)



@dataclass
class Served:
    """A `moat serve` process and the `mcp` client connected to it."""

    mode: str
    client: Client
    stderr_path: Path
    #: Every `notifications/message` the client received, in order.
    logs: list[Any] = field(default_factory=list)
    #: What the client could not parse: anything on moat's stdout that is not JSON-RPC.
    transport_errors: list[Exception] = field(default_factory=list)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        """Waits until `condition()` holds, failing after SETTLE_SECONDS."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not happen within {SETTLE_SECONDS}s")
            await asyncio.sleep(0.02)


class Servers:
    """Starts one shared server per mode, on first use, and stops them all at the end.

    Each server lives in a task of its own: the `mcp` client's context must be entered and left by
    the same task, and tests run in tasks of their own.
    """

    def __init__(self, moat_bin: Path, moat_toml: Path, stderr_dir: Path) -> None:
        self.moat_bin = moat_bin
        self.moat_toml = moat_toml
        self.stderr_dir = stderr_dir
        self.served: dict[str, Served] = {}
        self.stops: list[asyncio.Event] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def get(self, mode: str) -> Served:
        if mode not in self.served:
            self.served[mode] = await self._start(mode)
        return self.served[mode]

    async def _start(self, mode: str) -> Served:
        ready: asyncio.Future[Served] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        stderr_path = self.stderr_dir / f"moat-{mode}.stderr"

        async def own() -> None:
            logs: list[Any] = []
            transport_errors: list[Exception] = []

            async def on_log(params: Any) -> None:
                logs.append(params)

            async def on_message(message: Any) -> None:
                if isinstance(message, Exception):
                    transport_errors.append(message)

            params = StdioServerParameters(
                command=str(self.moat_bin),
                args=["serve", "--config", str(self.moat_toml)],
                # The client passes on only a few variables; moat's own (MOAT_LOG…) go along.
                env={k: v for k, v in os.environ.items() if k.startswith("MOAT_")},
            )
            with stderr_path.open("w") as errlog:
                try:
                    async with Client(
                        stdio_client(params, errlog=errlog),
                        mode=mode,
                        logging_callback=on_log,
                        message_handler=on_message,
                        read_timeout_seconds=30,
                    ) as client:
                        # In 2026-07-28 mode the client sends nothing on connecting; wait here,
                        # not in the first test, for moat to have compiled its plugins.
                        await client.list_tools()
                        ready.set_result(Served(mode, client, stderr_path, logs, transport_errors))
                        await stop.wait()
                except Exception as error:
                    if ready.done():
                        raise
                    ready.set_exception(error)
                finally:
                    if not ready.done():
                        ready.cancel()

        self.stops.append(stop)
        self.tasks.append(asyncio.create_task(own(), name=f"moat-{mode}"))
        try:
            return await asyncio.wait_for(asyncio.shield(ready), timeout=120)
        except Exception as error:
            stderr = stderr_path.read_text(errors="replace") if stderr_path.exists() else ""
            pytest.fail(f"starting moat in mode {mode} failed: {error!r}\nmoat's stderr:\n{stderr}")

    async def stop_all(self) -> None:
        for stop in self.stops:
            stop.set()
        for task in self.tasks:
            await task


class RawServer:
    """A `moat serve` process spoken to line by line, with every line of its stdout kept."""

    def __init__(self, moat_bin: Path, args: list[str], stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        self._stderr = stderr_path.open("w")
        self.process = subprocess.Popen(
            [str(moat_bin), "serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        #: Every line moat wrote to stdout, as bytes.
        self.lines: list[bytes] = []
        self._incoming: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._next_id = 1
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            try:
                self._incoming.put(json.loads(line))
            except ValueError:
                pass  # kept in `lines`, where the tests look for it
        self._incoming.put(None)

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def send_raw(self, data: bytes) -> None:
        """Writes `data` to moat's stdin as it is: for input that is not one JSON-RPC message."""
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def messages(self) -> list[dict[str, Any]]:
        """Every JSON message moat wrote so far, received or not."""
        parsed = []
        for line in list(self.lines):
            try:
                parsed.append(json.loads(line))
            except ValueError:
                pass
        return parsed

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def start_request(self, method: str, params: dict[str, Any] | None = None) -> int:
        """Sends a request and returns its id without waiting for the response."""
        request_id = self._next_id
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return request_id

    def receive(self, timeout: float = 30) -> dict[str, Any]:
        try:
            message = self._incoming.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"moat sent nothing for {timeout}s\nstderr:\n{self.stderr()}")
        if message is None:
            pytest.fail(f"moat closed its stdout\nstderr:\n{self.stderr()}")
        return message

    def until_response(self, request_id: int, timeout: float = 30) -> list[dict[str, Any]]:
        """Every message up to and including the response to `request_id`."""
        messages = []
        end = time.monotonic() + timeout
        while True:
            message = self.receive(timeout=max(0.01, end - time.monotonic()))
            messages.append(message)
            if message.get("id") == request_id and "method" not in message:
                return messages

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Sends a request and returns its response, skipping the notifications before it."""
        return self.until_response(self.start_request(method, params))[-1]

    def initialize(self) -> dict[str, Any]:
        response = self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "moat-e2e", "version": "0"},
            },
        )
        self.notify("notifications/initialized")
        return response

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def close_stdin(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    def stop(self) -> None:
        if self.process.stdin and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=5)
        self._stderr.close()


def assert_only_jsonrpc(lines: list[bytes]) -> None:
    """Every line is one JSON-RPC 2.0 message, as MCP's stdio transport requires."""
    for line in lines:
        try:
            message = json.loads(line)
        except ValueError:
            pytest.fail(f"moat wrote a line to stdout that is not JSON: {line!r}")
        assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", line
