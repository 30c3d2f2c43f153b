"""Many calls in flight on one connection, and calls the client gives up on."""

from __future__ import annotations

import asyncio
import time

import pytest
from mcp import MCPError, types
from support import Served, assert_text_only

CALLS = 20
NAP_MS = 100  # well inside the shared servers' 300 ms deadline for chatty


async def test_concurrent_calls_overlap(served: Served) -> None:
    async def nap(n: int) -> tuple[int, float, float]:
        started = time.monotonic()
        result = await served.client.call_tool("chatty_nap", {"ms": NAP_MS})
        assert result.structured_content == {"value": NAP_MS}, (n, result)
        return n, started, time.monotonic()

    started = time.monotonic()
    spans = await asyncio.gather(*(nap(n) for n in range(CALLS)))
    elapsed = time.monotonic() - started

    serial = CALLS * NAP_MS / 1000
    # One after another they would take `serial` seconds; side by side, little more than one nap.
    assert elapsed < serial / 2, f"{CALLS} naps of {NAP_MS} ms took {elapsed:.2f}s"
    # Every call was in flight while the last one started: they overlapped.
    last_start = max(start for _, start, _ in spans)
    assert all(end > last_start for _, _, end in spans)


async def test_interleaved_calls_get_their_own_results(served: Served) -> None:
    messages = [f"message {n}" for n in range(CALLS)]
    results = await asyncio.gather(
        *(served.client.call_tool("echo_echo", {"message": m}) for m in messages)
    )
    for message, result in zip(messages, results, strict=True):
        assert_text_only(result, message)


async def test_a_call_the_client_abandons_does_not_block_the_connection(served: Served) -> None:
    cancelled = served.stderr().count("call cancelled by the client")
    started = time.monotonic()
    # The client gives up after 50 ms and sends notifications/cancelled.
    with pytest.raises(MCPError) as raised:
        await served.client.call_tool("chatty_spin", {}, read_timeout_seconds=0.05)
    assert raised.value.code == types.REQUEST_TIMEOUT
    assert time.monotonic() - started < 1
    # moat stopped the call when told, rather than letting it spin to its deadline.
    await served.wait_for(
        lambda: served.stderr().count("call cancelled by the client") > cancelled,
        "moat logging the abandoned call as cancelled",
    )

    result = await served.client.call_tool("echo_echo", {"message": "next"})
    assert_text_only(result, "next")
    # Nothing the server sent about the abandoned call confused the client.
    assert served.transport_errors == []
