"""Resources, prompts, completions and a tool that asks the user, through the `mcp` client, in
both protocol eras: the `notebook` plugin keeps notes in a granted folder, serves them as
resources, summarizes one in a prompt and confirms a delete with an elicitation (a request on a
legacy session; an `input_required` result and a replayed call on 2026-07-28). The raw HTTP
tests check what the client never shows: the sealed request state refused when altered or used
for another request, and the capability a request must declare.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitResult, PromptReference, ResourceTemplateReference
from support import LEGACY, MODES, MODERN
from test_http_protocol import MODERN_META, HttpServer, modern_headers, request


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "first.md").write_text("# First\nThe first note.\n")
    return folder


@pytest.fixture
def config(tmp_path: Path, notes: Path, plugin: Callable[[str], Path]) -> Path:
    path = tmp_path / "moat.toml"
    path.write_text(
        f"[plugins.notebook]\npath = {json.dumps(str(plugin('notebook')))}\n"
        f'files = [{{ host = {json.dumps(str(notes))}, guest = "/notes", mode = "rw" }}]\n'
    )
    return path


@asynccontextmanager
async def notebook(
    moat_bin: Path, config: Path, mode: str, tmp_path: Path, *args: str, **callbacks: Any
) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=str(moat_bin),
        args=["serve", "--config", str(config), *args],
        env={k: v for k, v in os.environ.items() if k.startswith("MOAT_")},
    )
    with (tmp_path / f"moat-{mode}.stderr").open("w") as errlog:
        async with Client(
            stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=60, **callbacks
        ) as client:
            yield client


def answering(action: str, confirm: bool = True) -> tuple[Callable[..., Any], list[Any]]:
    """An elicitation callback that answers `action`, and the requests it saw."""
    seen: list[Any] = []

    async def callback(_context: Any, params: Any) -> ElicitResult:
        seen.append(params)
        content = {"confirm": confirm} if action == "accept" else None
        return ElicitResult(action=action, content=content)

    return callback, seen


@pytest.mark.parametrize("mode", MODES)
async def test_notes_are_resources_and_templates(
    moat_bin: Path, config: Path, mode: str, tmp_path: Path
) -> None:
    async with notebook(moat_bin, config, mode, tmp_path) as client:
        resources = (await client.list_resources()).resources
        assert [(r.uri, r.mime_type) for r in resources] == [("notebook://index", "text/plain")]
        templates = (await client.list_resource_templates()).resource_templates
        assert [(t.uri_template, t.mime_type) for t in templates] == [
            ("notebook://notes/{name}", "text/markdown")
        ]
        assert templates[0].description == "A note's Markdown."

        read = await client.read_resource("notebook://notes/first")
        [contents] = read.contents
        assert str(contents.uri) == "notebook://notes/first"
        assert contents.mime_type == "text/markdown"
        assert contents.text == "# First\nThe first note.\n"
        index = await client.read_resource("notebook://index")
        assert index.contents[0].text == "first"

        with pytest.raises(MCPError) as missing:
            await client.read_resource("notebook://notes/absent")
        assert missing.value.error.code == -32602
        assert missing.value.error.data == {"uri": "notebook://notes/absent"}
        # Another scheme is no plugin's: each plugin has its own.
        with pytest.raises(MCPError) as foreign:
            await client.read_resource("file:///etc/passwd")
        assert foreign.value.error.code == -32602


@pytest.mark.parametrize("mode", MODES)
async def test_a_prompt_embeds_the_note_and_completions_name_notes(
    moat_bin: Path, config: Path, notes: Path, mode: str, tmp_path: Path
) -> None:
    (notes / "second.md").write_text("Second.")
    async with notebook(moat_bin, config, mode, tmp_path) as client:
        [prompt] = (await client.list_prompts()).prompts
        assert prompt.name == "notebook_summarize"
        assert [(a.name, a.required) for a in prompt.arguments or []] == [("name", True)]

        got = await client.get_prompt("notebook_summarize", {"name": "first"})
        embedded, ask = got.messages
        assert embedded.role == "user" and embedded.content.type == "resource"
        assert str(embedded.content.resource.uri) == "notebook://notes/first"
        assert embedded.content.resource.text == "# First\nThe first note.\n"
        assert ask.content.type == "text" and "Summarize" in ask.content.text

        with pytest.raises(MCPError) as refused:
            await client.get_prompt("notebook_summarize", {"name": "absent"})
        assert 'no note "absent"' in refused.value.error.message

        completed = await client.complete(
            PromptReference(type="ref/prompt", name="notebook_summarize"), {"name": "name", "value": "s"}
        )
        assert completed.completion.values == ["second"]
        completed = await client.complete(
            ResourceTemplateReference(type="ref/resource", uri="notebook://notes/{name}"),
            {"name": "name", "value": ""},
        )
        assert completed.completion.values == ["first", "second"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_delete_asks_first_and_keeps_the_note_when_declined(
    moat_bin: Path, config: Path, notes: Path, mode: str, tmp_path: Path
) -> None:
    decline, declined = answering("decline")
    async with notebook(moat_bin, config, mode, tmp_path, elicitation_callback=decline) as client:
        result = await client.call_tool("notebook_delete_note", {"name": "first"})
        assert not result.is_error, result
        assert result.content[0].text == 'Kept note "first".'
    assert (notes / "first.md").exists()
    [asked] = declined
    assert asked.message == 'Delete the note "first"?'
    assert asked.requested_schema["properties"]["confirm"]["type"] == "boolean"

    accept, accepted = answering("accept")
    async with notebook(moat_bin, config, mode, tmp_path, elicitation_callback=accept) as client:
        result = await client.call_tool("notebook_delete_note", {"name": "first"})
        assert result.content[0].text == 'Deleted note "first".'
    assert not (notes / "first.md").exists()
    assert len(accepted) == 1


async def test_reads_and_prompts_are_audited_like_calls(
    moat_bin: Path, config: Path, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    async with notebook(moat_bin, config, MODERN, tmp_path, "--audit", str(audit)) as client:
        await client.read_resource("notebook://notes/first")
        await client.get_prompt("notebook_summarize", {"name": "first"})
        with pytest.raises(MCPError):
            await client.read_resource("notebook://notes/absent")
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    seen = [(r["method"], r["tool"], r["outcome"], r["plugin"]) for r in records]
    assert seen == [
        ("resources/read", "notebook://notes/first", "ok", "notebook"),
        ("prompts/get", "notebook_summarize", "ok", "notebook"),
        ("resources/read", "notebook://notes/absent", "tool_error", "notebook"),
    ]
    assert 'no note "absent"' in records[2]["error"]
    assert all(r["principal"] == "stdio" for r in records)


async def test_a_legacy_client_without_elicitation_gets_a_tool_error(
    moat_bin: Path, config: Path, notes: Path, tmp_path: Path
) -> None:
    async with notebook(moat_bin, config, LEGACY, tmp_path) as client:
        result = await client.call_tool("notebook_delete_note", {"name": "first"})
    assert result.is_error
    assert "did not declare the `elicitation` capability" in result.content[0].text
    assert (notes / "first.md").exists()


async def test_a_subscriber_hears_of_a_changed_note(
    moat_bin: Path, config: Path, tmp_path: Path
) -> None:
    updates: list[str] = []

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            updates.append(str(root.params.uri))

    async with notebook(moat_bin, config, LEGACY, tmp_path, message_handler=on_message) as client:
        await client.subscribe_resource("notebook://notes/first")
        await client.call_tool("notebook_write_note", {"name": "first", "text": "changed"})
        await client.call_tool("notebook_write_note", {"name": "other", "text": "not watched"})
        assert (await client.read_resource("notebook://notes/first")).contents[0].text == "changed"
        await client.unsubscribe_resource("notebook://notes/first")
        await client.call_tool("notebook_write_note", {"name": "first", "text": "again"})
        await client.list_tools()
    assert updates == ["notebook://notes/first"]


async def test_a_modern_subscription_hears_of_a_changed_note(
    moat_bin: Path, config: Path, tmp_path: Path
) -> None:
    async with notebook(moat_bin, config, MODERN, tmp_path) as client:
        async with client.listen(resource_subscriptions=["notebook://notes/first"]) as subscription:
            assert subscription.honored.resource_subscriptions == ["notebook://notes/first"]
            await client.call_tool("notebook_write_note", {"name": "other", "text": "not watched"})
            await client.call_tool("notebook_write_note", {"name": "first", "text": "changed"})
            event = await asyncio.wait_for(anext(subscription), 10)
    assert type(event).__name__ == "ResourceUpdated", event
    assert str(event.uri) == "notebook://notes/first"


@pytest.fixture
def http_notebook(
    moat_bin: Path, config: Path, tmp_path: Path
) -> Any:
    server = HttpServer(moat_bin, ["--config", str(config)], tmp_path / "moat-http.stderr")
    yield server
    server.stop()


def delete_call(request_id: int, name: str, **params: Any) -> dict[str, Any]:
    meta = dict(MODERN_META)
    meta["io.modelcontextprotocol/clientCapabilities"] = {"elicitation": {}}
    return request(
        request_id,
        "tools/call",
        {"name": "notebook_delete_note", "arguments": {"name": name}, "_meta": meta, **params},
    )


def post_delete(server: HttpServer, message: dict[str, Any]) -> Any:
    return server.post(message, modern_headers("tools/call", "notebook_delete_note"))


def test_a_modern_call_gets_the_question_and_a_sealed_state(
    http_notebook: HttpServer, notes: Path
) -> None:
    (notes / "second.md").write_text("Second.")
    first = post_delete(http_notebook, delete_call(1, "first")).message["result"]
    assert first["resultType"] == "input_required"
    question = first["inputRequests"]["confirm"]
    assert question["method"] == "elicitation/create"
    assert question["params"]["message"] == 'Delete the note "first"?'
    state = first["requestState"]
    answer = {"confirm": {"action": "accept", "content": {"confirm": True}}}

    # Altered, or sent with the call of another note, the state is refused and nothing deleted.
    tampered = state[:-2] + ("AA" if not state.endswith("AA") else "BB")
    reply = post_delete(http_notebook, delete_call(2, "first", inputResponses=answer, requestState=tampered))
    assert reply.message["error"]["code"] == -32602
    reply = post_delete(http_notebook, delete_call(3, "second", inputResponses=answer, requestState=state))
    assert reply.message["error"]["code"] == -32602
    assert "requestState" in reply.message["error"]["message"]
    assert (notes / "first.md").exists() and (notes / "second.md").exists()

    # Without the answer the question comes again; with it the call completes.
    again = post_delete(http_notebook, delete_call(4, "first", requestState=state)).message["result"]
    assert again["resultType"] == "input_required" and "confirm" in again["inputRequests"]
    done = post_delete(http_notebook, delete_call(5, "first", inputResponses=answer, requestState=state))
    assert done.message["result"]["content"][0]["text"] == 'Deleted note "first".'
    assert not (notes / "first.md").exists()


def test_a_modern_call_that_needs_an_undeclared_capability_is_refused(
    http_notebook: HttpServer, notes: Path
) -> None:
    message = request(
        1,
        "tools/call",
        {"name": "notebook_delete_note", "arguments": {"name": "first"}, "_meta": MODERN_META},
    )
    reply = post_delete(http_notebook, message)
    assert reply.status == 400
    error = reply.message["error"]
    assert error["code"] == -32021
    assert error["data"]["requiredCapabilities"] == {"elicitation": {}}
    assert (notes / "first.md").exists()


def test_moats_that_share_a_state_key_take_each_others_rounds(
    moat_bin: Path, plugin: Callable[[str], Path], notes: Path, tmp_path: Path
) -> None:
    def served(key: str, name: str) -> HttpServer:
        config = tmp_path / f"{name}.toml"
        config.write_text(
            f"[plugins.notebook]\npath = {json.dumps(str(plugin('notebook')))}\n"
            f'files = [{{ host = {json.dumps(str(notes))}, guest = "/notes", mode = "rw" }}]\n'
            f"[http]\nrequest_state_key = {json.dumps(key)}\n"
        )
        return HttpServer(moat_bin, ["--config", str(config)], tmp_path / f"{name}.stderr")

    shared = "a shared key of at least thirty-two bytes"
    first, second, other = served(shared, "first"), served(shared, "second"), served("x" * 40, "other")
    try:
        asked = post_delete(first, delete_call(1, "first")).message["result"]
        answer = {"confirm": {"action": "accept", "content": {"confirm": True}}}
        again = dict(inputResponses=answer, requestState=asked["requestState"])
        refused = post_delete(other, delete_call(2, "first", **again))
        assert refused.message["error"]["code"] == -32602
        assert (notes / "first.md").exists()
        done = post_delete(second, delete_call(3, "first", **again))
        assert done.message["result"]["content"][0]["text"] == 'Deleted note "first".'
    finally:
        for server in (first, second, other):
            server.stop()
