"""Guest log messages and progress reports, as the `mcp` client's callbacks receive them."""

from __future__ import annotations

import asyncio
import uuid

from mcp.types import LOG_LEVEL_META_KEY
from support import LEGACY, MODERN, Served, Servers

LEVELS = ["debug", "info", "notice", "warning", "error"]


def opt_in(served: Served, level: str = "debug") -> dict[str, str] | None:
    """The request `_meta` that asks for log messages: needed on 2026-07-28 only."""
    return {LOG_LEVEL_META_KEY: level} if served.mode == MODERN else None


async def log_all_levels(served: Served, meta: dict[str, str] | None) -> str:
    """Has chatty log a fresh message at every level; returns the message."""
    message = f"log {uuid.uuid4()}"
    result = await served.client.call_tool("chatty_log_levels", {"message": message}, meta=meta)
    assert result.structured_content == {"value": 5}
    return message


def levels_of(served: Served, message: str) -> list[str]:
    return [log.level for log in served.logs if log.data == message]


async def test_guest_logs_reach_the_logging_callback(served: Served) -> None:
    message = await log_all_levels(served, opt_in(served))
    await served.wait_for(lambda: len(levels_of(served, message)) == 5, "five log messages")
    logs = [log for log in served.logs if log.data == message]
    assert [log.level for log in logs] == LEVELS
    assert {log.logger for log in logs} == {"chatty"}


async def test_legacy_set_level_filters_guest_logs(servers: Servers) -> None:
    served = await servers.get(LEGACY)
    await served.client.set_logging_level("warning")
    try:
        message = await log_all_levels(served, None)
        await served.wait_for(lambda: len(levels_of(served, message)) >= 2, "two log messages")
        await asyncio.sleep(0.2)  # room for any message that should not come
        assert levels_of(served, message) == ["warning", "error"]
    finally:
        await served.client.set_logging_level("debug")


async def test_modern_request_log_level_filters_guest_logs(servers: Servers) -> None:
    served = await servers.get(MODERN)
    message = await log_all_levels(served, opt_in(served, "warning"))
    await served.wait_for(lambda: len(levels_of(served, message)) >= 2, "two log messages")
    await asyncio.sleep(0.2)  # room for any message that should not come
    assert levels_of(served, message) == ["warning", "error"]


async def test_modern_requests_without_a_log_level_get_no_logs(servers: Servers) -> None:
    served = await servers.get(MODERN)
    message = await log_all_levels(served, None)
    await asyncio.sleep(0.3)  # room for any message that should not come
    assert levels_of(served, message) == []


async def test_guest_progress_reaches_the_progress_callback(served: Served) -> None:
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    # A pause after each report, as a tool doing real work would have.
    result = await served.client.call_tool(
        "chatty_count", {"steps": 3, "pause": 20}, progress_callback=on_progress
    )
    assert result.structured_content == {"value": 3}
    assert reports == [(n, 3, f"step {n} of 3") for n in (1, 2, 3)]


async def test_progress_sent_right_before_returning_reaches_the_callback(served: Served) -> None:
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    result = await served.client.call_tool(
        "chatty_count", {"steps": 5, "pause": 0}, progress_callback=on_progress
    )
    assert result.structured_content == {"value": 5}
    assert reports == [(n, 5, f"step {n} of 5") for n in range(1, 6)]

