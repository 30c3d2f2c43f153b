"""The stdio transport itself: nothing but JSON-RPC on stdout, guest output on stderr, the order of
messages, cancellation, and exit on stdin EOF.

Most of these speak JSON-RPC line by line, without the `mcp` client, to see exactly what moat writes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from support import (
    SETTLE_SECONDS,
    RawServer,
    Served,
    assert_only_jsonrpc,
    assert_raw_text_only,
    assert_text_only,
)


def call(server: RawServer, tool: str, arguments: dict[str, object], **meta: object) -> int:
    """Starts a tools/call and returns its request id."""
    params: dict[str, object] = {"name": tool, "arguments": arguments}
    if meta:
        params["_meta"] = meta
    return server.start_request("tools/call", params)


def wait_for_stderr(server: RawServer, text: str, times: int = 1) -> str:
    """Waits until `text` is on moat's stderr `times` times; returns the stderr."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while (stderr := server.stderr()).count(text) < times:
        if time.monotonic() > deadline:
            pytest.fail(f"{text!r} did not reach moat's stderr {times} time(s):\n{stderr}")
        time.sleep(0.02)
    return stderr


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used so far (Linux)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_used_over(pid: int, seconds: float) -> float:
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return cpu_seconds(pid) - before


def wait_until_spinning(pid: int, within: float = 5.0) -> None:
    """Some half second of the next few uses a fifth of a core or more: a guest spins."""
    _wait_for_cpu(pid, lambda used: used > 0.1, within, "the guest is not spinning")


def wait_until_quiet(pid: int, within: float = 10.0) -> None:
    """Some half second of the next few is all but idle. A busy machine may lend moat's other
    threads a few ticks in one window, but a guest left spinning (its deadline is 30 s) fills
    every window until `within` has passed."""
    _wait_for_cpu(pid, lambda used: used < 0.05, within, "the guest still runs")


def _wait_for_cpu(pid: int, wanted: Callable[[float], bool], within: float, failure: str) -> None:
    deadline = time.monotonic() + within
    seen: list[float] = []
    while time.monotonic() < deadline:
        seen.append(round(cpu_used_over(pid, 0.5), 2))
        if wanted(seen[-1]):
            return
    pytest.fail(f"{failure}: CPU seconds per half second {seen}")


def test_guest_output_goes_to_stderr_never_to_stdout(raw_chatty: RawServer) -> None:
    marker = uuid.uuid4().hex
    # Output that would break a client if it reached stdout: a half line, and a fake message.
    out = f'{marker}-out {{"jsonrpc": "2.0", "id": 1, "result": {{}}}}\nno newline'
    err = f"{marker}-err\n"
    response = raw_chatty.request(
        "tools/call", {"name": "chatty_shout", "arguments": {"out": out, "err": err}}
    )
    assert_raw_text_only(response["result"], "done")
    # A panic writes to the guest's stderr too.
    crash = raw_chatty.request(
        "tools/call", {"name": "chatty_crash", "arguments": {"message": f"{marker}-panic"}}
    )
    assert crash["result"]["isError"] is True

    assert_only_jsonrpc(raw_chatty.lines)
    assert not any(marker.encode() + b"-out" in line for line in raw_chatty.lines)
    assert not any(marker.encode() + b"-err" in line for line in raw_chatty.lines)
    stderr = wait_for_stderr(raw_chatty, f"{marker}-out")
    wait_for_stderr(raw_chatty, f"{marker}-err")
    wait_for_stderr(raw_chatty, f"{marker}-panic")
    assert "no newline" in stderr


async def test_guest_output_does_not_disturb_the_client(served: Served) -> None:
    marker = uuid.uuid4().hex
    result = await served.client.call_tool(
        "chatty_shout", {"out": f"{marker} out\n", "err": f"{marker} err\n"}
    )
    assert_text_only(result, "done")
    # The client parsed every line moat wrote to stdout.
    assert served.transport_errors == []
    await served.wait_for(lambda: f"{marker} err" in served.stderr(), "guest stderr on moat's")
    assert f"{marker} out" in served.stderr()


def test_no_progress_without_a_progress_token(raw_chatty: RawServer) -> None:
    # With a pause after each report, any notification would be sent before the response.
    request = call(raw_chatty, "chatty_count", {"steps": 3, "pause": 10})
    messages = raw_chatty.until_response(request)
    assert messages[-1]["result"]["structuredContent"] == {"value": 3}
    assert [m for m in messages if m.get("method") == "notifications/progress"] == []


def test_progress_notifications_carry_the_token(raw_chatty: RawServer) -> None:
    request = call(raw_chatty, "chatty_count", {"steps": 2, "pause": 10}, progressToken="tok-1")
    messages = raw_chatty.until_response(request)
    progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
    assert progress == [
        {"progressToken": "tok-1", "progress": 1.0, "total": 2.0, "message": "step 1 of 2"},
        {"progressToken": "tok-1", "progress": 2.0, "total": 2.0, "message": "step 2 of 2"},
    ]


def test_notifications_of_a_call_precede_its_response(raw_chatty: RawServer) -> None:
    request = call(raw_chatty, "chatty_count", {"steps": 3, "pause": 0}, progressToken=7)
    progress_first = raw_chatty.until_response(request)
    request = call(raw_chatty, "chatty_log_levels", {"message": "ordered"})
    logs_first = raw_chatty.until_response(request)
    # Leave nothing of these calls behind for the next test.
    time.sleep(0.2)
    raw_chatty.request("ping")

    methods = [m.get("method") for m in progress_first[:-1]]
    assert methods == ["notifications/progress"] * 3, progress_first
    methods = [m.get("method") for m in logs_first[:-1]]
    assert methods == ["notifications/message"] * 5, logs_first


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_cancelled_call_is_stopped(raw_chatty: RawServer) -> None:
    pid = raw_chatty.process.pid
    cancelled = raw_chatty.stderr().count("call cancelled by the client")
    request = call(raw_chatty, "chatty_spin", {})  # default deadline: 30 s
    time.sleep(0.1)
    wait_until_spinning(pid)

    raw_chatty.notify("notifications/cancelled", {"requestId": request, "reason": "test"})
    wait_for_stderr(raw_chatty, "call cancelled by the client", cancelled + 1)
    wait_until_quiet(pid)
    # The connection still serves.
    assert raw_chatty.request("ping")["result"] == {}


def test_a_cancelled_call_gets_no_response(raw_chatty: RawServer) -> None:
    # MCP: the receiver of notifications/cancelled SHOULD NOT answer the cancelled request.
    cancelled = raw_chatty.stderr().count("call cancelled by the client")
    request = call(raw_chatty, "chatty_spin", {})  # default deadline: 30 s
    time.sleep(0.1)
    raw_chatty.notify("notifications/cancelled", {"requestId": request, "reason": "test"})
    # No answer could also mean the call still spins: moat must have stopped it.
    wait_for_stderr(raw_chatty, "call cancelled by the client", cancelled + 1)
    time.sleep(0.3)
    messages = raw_chatty.until_response(raw_chatty.start_request("ping"))
    assert [m for m in messages if m.get("id") == request] == []


def wait_for_exit(process: subprocess.Popen[bytes], seconds: float) -> int:
    try:
        return process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pytest.fail(f"moat was still running {seconds}s after its stdin closed")


def test_exits_on_stdin_eof(
    raw_server: Callable[..., RawServer], plugin: Callable[[str], Path]
) -> None:
    server = raw_server(str(plugin("echo")))
    server.initialize()
    response = server.request("tools/call", {"name": "echo_echo", "arguments": {"message": "hi"}})
    assert_raw_text_only(response["result"], "hi")

    server.close_stdin()
    # Well within the 2 s the Python SDK grants before it sends SIGTERM.
    assert wait_for_exit(server.process, 1.5) == 0, server.stderr()
    assert_only_jsonrpc(server.lines)


def test_exits_on_stdin_eof_before_initialize(raw_server: Callable[..., RawServer]) -> None:
    server = raw_server()  # no plugins: nothing to compile
    server.close_stdin()
    wait_for_exit(server.process, 1.5)
    server.stop()
    assert server.lines == []
