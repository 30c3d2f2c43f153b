"""tools/list and tools/call through the `mcp` client, in both protocol eras."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client, MCPError, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from support import (
    DEADLINE_MS,
    ECHO_SUMMARY,
    INSTRUCTIONS_PREAMBLE,
    LEGACY,
    MODERN,
    MODES,
    Served,
    Servers,
    assert_text_only,
)

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
        "chatty_nap_as_task",
        "chatty_nap_once_as_task",
        "chatty_shout",
        "chatty_spin",
        "echo_echo",
        "echo_repeat",
    ]
    # Listed in name order.
    assert [tool.name for tool in listing.tools] == sorted(tools)

    echo = tools["echo_echo"]
    assert echo.title == "Echo"
    # The WIT comment's wrapped lines are one paragraph.
    assert echo.description == (
        "Returns `message` exactly as it was given. Use it only to check that tool calls work "
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
        "Returns `message` repeated `times` times, joined by `separator` (default: none). Use it "
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


async def test_instructions_carry_the_summary_of_each_plugin(served: Served) -> None:
    if served.mode == LEGACY:
        # What `initialize` returned, as the client keeps it.
        instructions = served.client.instructions
    else:
        raw = await served.client.session.send_discover(MODERN)
        instructions = types.DiscoverResult.model_validate(raw).instructions
    assert instructions is not None
    # The fixed first sentence, then "PLUGIN: summary" (the world's doc comment) for each plugin.
    preamble, *summaries = instructions.split("\n\n")
    assert preamble == INSTRUCTIONS_PREAMBLE
    assert f"echo: {ECHO_SUMMARY}" in summaries, instructions
    assert sorted(summary.split(": ")[0] for summary in summaries) == ["chatty", "echo"], instructions


@asynccontextmanager
async def serving(moat_bin: Path, tmp_path: Path, mode: str, *plugins: Path) -> AsyncIterator[Client]:
    """The `mcp` client on a `moat serve PLUGIN…` of its own, over stdio."""
    params = StdioServerParameters(
        command=str(moat_bin),
        args=["serve", *map(str, plugins)],
        env={k: v for k, v in os.environ.items() if k.startswith("MOAT_")},
    )
    with (tmp_path / f"moat-{mode}.stderr").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=60) as client:
            yield client


@pytest.mark.parametrize("mode", MODES)
async def test_json_names_are_camel_case_and_the_wit_spelling_is_told_the_right_one(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path, mode: str
) -> None:
    # text's `base64-encode: func(text: string, url-safe: option<bool>) -> string`.
    async with serving(moat_bin, tmp_path, mode, plugin("text")) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        encode = tools["text_base64_encode"]
        assert list(encode.input_schema["properties"]) == ["text", "urlSafe"]
        assert encode.input_schema["properties"]["urlSafe"]["default"] is False
        assert encode.input_schema["required"] == ["text"]
        # The sibling `base64-decode` is named as the model knows it.
        assert encode.description is not None
        assert encode.description.endswith("`text_base64_decode` reverses it."), encode.description

        # "ÿþ?" is the bytes c3 bf c3 be 3f: the alphabets differ, and so does the padding.
        safe = await client.call_tool("text_base64_encode", {"text": "ÿþ?", "urlSafe": True})
        assert_text_only(safe, "w7_Dvj8")
        standard = await client.call_tool("text_base64_encode", {"text": "ÿþ?", "urlSafe": False})
        assert_text_only(standard, "w7/Dvj8=")
        default = await client.call_tool("text_base64_encode", {"text": "ÿþ?"})
        assert_text_only(default, "w7/Dvj8=")

        # Spelt as WIT does, or in snake_case: refused before the guest runs, with the right name.
        for spelling in ("url-safe", "url_safe"):
            refused = await client.call_tool("text_base64_encode", {"text": "ÿþ?", spelling: True})
            assert refused.is_error is True, refused
            assert refused.structured_content is None
            assert text_of(refused) == (
                f'invalid arguments: arguments: unknown field "{spelling}" (the field is spelt "urlSafe")'
            )


# Arguments that break weather_forecast's `@schema` tags, and what moat says of each.
OUT_OF_RANGE = [
    ({"latitude": 52.52, "longitude": 13.41, "days": 0}, "days: 0 is less than the minimum of 1"),
    ({"latitude": 52.52, "longitude": 13.41, "days": 17}, "days: 17 is greater than the maximum of 16"),
    ({"latitude": 91, "longitude": 13.41}, "latitude: 91 is greater than the maximum of 90"),
    ({"latitude": 52.52, "longitude": -180.5}, "longitude: -180.5 is less than the minimum of -180"),
]


async def test_a_schema_tag_constraint_is_checked_before_the_guest_runs(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    # weather's `@schema days {"minimum": 1, "maximum": 16, "default": 7}` and the coordinates'
    # ranges. It has no network grant here: a call that reached the guest would say so.
    async with serving(moat_bin, tmp_path, LEGACY, plugin("weather")) as client:
        forecast = {tool.name: tool for tool in (await client.list_tools()).tools}["weather_forecast"]
        days = forecast.input_schema["properties"]["days"]
        assert days["anyOf"] == [{"type": "integer", "minimum": 1, "maximum": 16}, {"type": "null"}]
        assert days["default"] == 7
        latitude = forecast.input_schema["properties"]["latitude"]
        assert (latitude["type"], latitude["minimum"], latitude["maximum"]) == ("number", -90, 90)

        for arguments, message in OUT_OF_RANGE:
            refused = await client.call_tool("weather_forecast", arguments)
            assert refused.is_error is True, (arguments, refused)
            assert refused.structured_content is None, arguments
            assert text_of(refused) == f"invalid arguments: {message}"

        # At the edges of the ranges the guest runs, and meets the missing grant.
        edge = {"latitude": -90, "longitude": 180, "days": 16}
        allowed = await client.call_tool("weather_forecast", edge)
        assert allowed.is_error is True, allowed
        texts = [block.text for block in allowed.content if isinstance(block, types.TextContent)]
        assert not any("invalid arguments" in text for text in texts), texts
        assert any("the host denied the request" in text for text in texts), texts
        assert any('denied: not granted to plugin "weather"' in text for text in texts), texts
