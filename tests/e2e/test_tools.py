"""tools/list and tools/call through the `mcp` client, in both protocol eras."""

from __future__ import annotations

import time

import pytest
from mcp import MCPError, types
from support import DEADLINE_MS, LEGACY, MODERN, Served, Servers, assert_text_only

def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1, result
    block = result.content[0]
    assert isinstance(block, types.TextContent), result
    return block.text


async def test_connects(served: Served) -> None:
    client = served.client
    if served.mode == LEGACY:
        assert client.protocol_version == "2025-11-25"
        assert client.server_info is not None and client.server_info.name == "moat"
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.logging is not None
        assert client.instructions and "WebAssembly" in client.instructions
    else:
        assert client.protocol_version == MODERN
        # The client adopted 2026-07-28 without asking; ask now, as mode="auto" would.
        raw = await client.session.send_discover(MODERN)
        discovered = types.DiscoverResult.model_validate(raw)
        assert MODERN in discovered.supported_versions
        assert discovered.capabilities.tools is not None
        assert discovered.result_type == "complete"
        server_info = (discovered.meta or {}).get("io.modelcontextprotocol/serverInfo")
        assert server_info and server_info["name"] == "moat", raw


async def test_lists_every_exported_function_as_a_tool(served: Served) -> None:
    listing = await served.client.list_tools(cache_mode="bypass")
    assert listing.next_cursor is None
    tools = {tool.name: tool for tool in listing.tools}
    assert sorted(tools) == [
        "chatty_count",
        "chatty_crash",
        "chatty_log_levels",
        "chatty_nap",
        "chatty_shout",
        "chatty_spin",
        "echo_echo",
        "echo_repeat",
    ]
    # Listed in name order.
    assert [tool.name for tool in listing.tools] == sorted(tools)

    echo = tools["echo_echo"]
    assert echo.title == "Echo"
    assert echo.description == (
        "Returns `message` exactly as it was given. Use it only to check that tool calls work\n"
        "(or to measure them): it does nothing else."
    )
    assert echo.input_schema == {
        "type": "object",
        "properties": {"message": {"type": "string", "description": "the text to send back."}},
        "required": ["message"],
        "additionalProperties": False,
    }
    # A string result is text alone: no output schema.
    assert echo.output_schema is None
    assert echo.annotations is not None
    assert echo.annotations.read_only_hint is True
    assert echo.annotations.open_world_hint is False

    repeat = tools["echo_repeat"]
    assert repeat.title == "Repeat"
    # The WIT name of a sibling function (`echo`) is rewritten to its tool name.
    assert repeat.description == (
        "Returns `message` repeated `times` times, joined by `separator` (default: none). Use it\n"
        "only to try moat out or to make a long answer for a test; use `echo_echo` instead for one copy."
    )
    assert repeat.input_schema == {
        "type": "object",
        "properties": {
            "message": {"type": "string", "description": "the text to repeat."},
            "times": {
                "type": "integer",
                "minimum": 0,
                "maximum": 255,
                "description": "how many copies to return (0 gives the empty text).",
            },
            "separator": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "description": "placed between copies.",
                # From the `@schema separator {"default": ""}` tag.
                "default": "",
            },
        },
        "required": ["message", "times"],
        "additionalProperties": False,
    }
    assert repeat.output_schema is None

    # A number result keeps its output schema.
    assert tools["chatty_nap"].output_schema == {
        "type": "object",
        "properties": {"value": {"type": "integer", "minimum": 0, "maximum": 4294967295}},
        "required": ["value"],
        "additionalProperties": False,
    }

    # A function without parameters still takes an (empty) object.
    spin = tools["chatty_spin"]
    assert spin.input_schema["type"] == "object"
    assert spin.input_schema["properties"] == {}


async def test_a_string_result_is_text_alone_and_a_number_also_structured(served: Served) -> None:
    result = await served.client.call_tool("echo_echo", {"message": "héllo ✓ \"quoted\"\n"})
    assert_text_only(result, "héllo ✓ \"quoted\"\n")

    joined = await served.client.call_tool(
        "echo_repeat", {"message": "ab", "times": 3, "separator": "-"}
    )
    assert_text_only(joined, "ab-ab-ab")
    # The optional parameter may be left out, or be null.
    for arguments in ({"message": "ab", "times": 2}, {"message": "ab", "times": 2, "separator": None}):
        plain = await served.client.call_tool("echo_repeat", arguments)
        assert_text_only(plain, "abab")

    count = await served.client.call_tool("chatty_nap", {"ms": 0})
    assert text_of(count) == "0"
    assert count.structured_content == {"value": 0}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"message": "x", "times": 300}, "times: expected integer 0..=255, got 300"),
        ({"message": "x", "times": -1}, "times: expected integer 0..=255, got -1"),
        ({"message": "x", "times": 2.5}, "times: expected integer 0..=255, got 2.5"),
        ({"message": "x", "times": "3"}, 'times: expected integer 0..=255, got "3"'),
        ({"message": "x", "times": 1, "separator": 5}, "separator: expected string, got 5"),
        ({"times": 3}, "message: missing required value"),
        (
            {"message": "x", "times": 1, "extra": True},
            'arguments: unknown field "extra" (expected: message, times, separator)',
        ),
    ],
)
async def test_invalid_arguments_are_a_tool_error_naming_the_path(
    served: Served, arguments: dict[str, object], message: str
) -> None:
    result = await served.client.call_tool("echo_repeat", arguments)
    assert result.is_error is True, result
    assert result.structured_content is None
    assert text_of(result) == f"invalid arguments: {message}"


async def test_an_unknown_tool_is_a_jsonrpc_error(served: Served) -> None:
    with pytest.raises(MCPError) as raised:
        await served.client.call_tool("echo_nope", {})
    assert raised.value.code == types.INVALID_PARAMS
    assert "echo_nope" in raised.value.message


async def test_a_panic_is_a_tool_error_and_the_server_keeps_serving(served: Served) -> None:
    result = await served.client.call_tool("chatty_crash", {"message": "the sky is falling"})
    assert result.is_error is True
    assert result.structured_content is None
    text = text_of(result)
    assert "crashed" in text and "the sky is falling" in text, text

    after = await served.client.call_tool("echo_echo", {"message": "still here"})
    assert_text_only(after, "still here")
    again = await served.client.call_tool("chatty_nap", {"ms": 1})
    assert again.structured_content == {"value": 1}


async def test_a_busy_loop_is_stopped_at_the_deadline(served: Served) -> None:
    started = time.monotonic()
    result = await served.client.call_tool("chatty_spin", {})
    elapsed = time.monotonic() - started
    assert result.is_error is True
    assert text_of(result) == (
        f"the tool ran longer than its {DEADLINE_MS}ms deadline and was stopped"
    )
    assert DEADLINE_MS / 1000 <= elapsed < DEADLINE_MS / 1000 + 3, elapsed

    after = await served.client.call_tool("chatty_nap", {"ms": 0})
    assert after.structured_content == {"value": 0}


async def test_a_sleep_past_the_deadline_is_stopped_at_the_deadline(servers: Servers) -> None:
    served = await servers.get(LEGACY)
    started = time.monotonic()
    result = await served.client.call_tool("chatty_nap", {"ms": 1500})
    elapsed = time.monotonic() - started
    assert result.is_error is True
    assert "deadline" in text_of(result)
    assert elapsed < DEADLINE_MS / 1000 + 0.7, f"stopped only after {elapsed:.2f}s"
