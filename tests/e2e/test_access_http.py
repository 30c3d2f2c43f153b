"""`[[access]]` over HTTP beyond tools: two callers, each with its own API key and its own set of
plugins, in both protocol eras. A caller neither lists, gets, reads nor completes another
plugin's prompts and resources, nor hears of its resources' changes; another caller's task is
as unknown to it as a task that never was; `/metrics` beside `/mcp` wants a credential. And the
sealed `requestState` of a 2026-07-28 call that asks the client something: one past its time,
one over its size or one altered is refused, each with its own reason.

The caller `a` has the `notebook` plugin (prompts, resources, a template, completions, a tool
that asks) and the conformance plugin, served as `jobs` (tools that go on as tasks); the
caller `b` has `jobs` but its `custom_headers` tool. Every refusal is compared with the refusal of something nobody
serves: a hidden thing is as unknown as a missing one.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import json
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import PromptReference, ResourceTemplateReference
from support import LEGACY, MODERN, MODES, http_transport
from test_http_protocol import MODERN_META, HttpServer, modern_headers, request

KEYS = {
    "a": "moat_e2e_access_a_0123456789abcdefghijklmnop",
    "b": "moat_e2e_access_b_0123456789abcdefghijklmnop",
}
# What seals request states; known here, so that the tests can seal states as moat does.
STATE_KEY = "the request-state key of the access tests, 32+ bytes"

CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
TASKS = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
ACCEPT = {"confirm": {"action": "accept", "content": {"confirm": True}}}


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


@pytest.fixture(scope="module")
def notes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("access") / "notes"
    folder.mkdir()
    (folder / "first.md").write_text("# First\n")
    (folder / "second.md").write_text("# Second\n")
    return folder


@pytest.fixture(scope="module")
def server(notes: Path, moat_bin: Path, plugin: Callable[[str], Path]) -> Iterator[HttpServer]:
    hashes = ", ".join(f'{n} = "sha256:{hashlib.sha256(k.encode()).hexdigest()}"' for n, k in KEYS.items())
    config = notes.parent / "moat.toml"
    config.write_text(
        f"[plugins.notebook]\npath = {json.dumps(str(plugin('notebook')))}\n"
        f'files = [{{ host = {json.dumps(str(notes))}, guest = "/notes", mode = "rw" }}]\n'
        f"[plugins.jobs]\npath = {json.dumps(str(plugin('conformance')))}\n"
        f"[auth]\napi_keys = {{ {hashes} }}\n"
        f"[http]\nrequest_state_key = {json.dumps(STATE_KEY)}\n"
        '[[access]]\nkey = "a"\nallow = ["plugin:notebook", "plugin:jobs"]\n'
        '[[access]]\nkey = "b"\nallow = ["plugin:jobs"]\ndeny = ["jobs_custom_headers"]\n'
    )
    served = HttpServer(moat_bin, ["--config", str(config)], notes.parent / "moat.stderr")
    yield served
    served.stop()


def client(server: HttpServer, who: str, mode: str, **options: Any) -> Client:
    url = f"http://127.0.0.1:{server.port}/mcp"
    return Client(http_transport(url, bearer(who)), mode=mode, read_timeout_seconds=30, **options)


def refusal(error: MCPError) -> dict[str, Any]:
    return {"code": error.error.code, "message": error.error.message, "data": error.error.data}


def renamed(error: dict[str, Any], name: str, to: str) -> dict[str, Any]:
    """`error` with every `name` in it read as `to`."""
    return json.loads(json.dumps(error).replace(name, to))


# --- Tools ------------------------------------------------------------------------------------


def test_a_hidden_tools_header_parameters_are_as_unknown_as_its_name(server: HttpServer) -> None:
    """A 2026-07-28 call carries a tool's `@header` parameters as `Mcp-Param-*` headers too, and a
    call without them is refused: only for a caller that has the tool, or a hidden one would show
    it exists, and the name of its parameter."""
    meta = {**MODERN_META, CAPABILITIES: {}}

    def call(who: str, tool: str) -> tuple[int, dict[str, Any]]:
        message = request(1, "tools/call", {"name": tool, "arguments": {"region": "eu"}, "_meta": meta})
        reply = server.post(message, {**bearer(who), **modern_headers("tools/call", tool)})
        return reply.status, reply.message.get("error")

    assert call("a", "jobs_custom_headers") == (
        400, {"code": -32020, "message": "missing Mcp-Param-Region header for `region`"}
    )
    hidden = call("b", "jobs_custom_headers")
    assert hidden == (200, {"code": -32602, "message": 'unknown tool "jobs_custom_headers"'})
    missing = call("b", "nobody_custom_headers")
    assert missing == (hidden[0], renamed(hidden[1], "jobs_custom_headers", "nobody_custom_headers"))


# --- Prompts, resources, completions, subscriptions -------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_each_caller_lists_only_its_plugins_prompts_and_resources(server: HttpServer, mode: str) -> None:
    listed = {}
    for who in KEYS:
        async with client(server, who, mode) as c:
            listed[who] = {
                "prompts": sorted(p.name for p in (await c.list_prompts()).prompts),
                "resources": sorted(str(r.uri) for r in (await c.list_resources()).resources),
                "templates": sorted(t.uri_template for t in (await c.list_resource_templates()).resource_templates),
            }
    a, b = listed["a"], listed["b"]
    assert "notebook_summarize" in a["prompts"] and "notebook://index" in a["resources"], a
    assert "notebook://notes/{name}" in a["templates"], a
    # b sees the jobs plugin's own, and nothing of the notebook's.
    assert "jobs_simple_prompt" in b["prompts"] and "jobs://static-text" in b["resources"], b
    assert "jobs://template/{id}/data" in b["templates"], b
    assert b == {kind: [n for n in names if not n.startswith("notebook")] for kind, names in a.items()}


@pytest.mark.parametrize("mode", MODES)
async def test_a_hidden_prompt_is_as_unknown_as_a_missing_one(server: HttpServer, mode: str) -> None:
    async with client(server, "a", mode) as a:
        got = await a.get_prompt("notebook_summarize", {"name": "first"})
        assert got.messages[0].content.resource.text == "# First\n"
    async with client(server, "b", mode) as b:
        with pytest.raises(MCPError) as hidden:
            await b.get_prompt("notebook_summarize", {"name": "first"})
        with pytest.raises(MCPError) as missing:
            await b.get_prompt("nobody_summarize", {"name": "first"})
        assert await b.get_prompt("jobs_simple_prompt")  # b's own prompt answers
    assert refusal(hidden.value) == {
        "code": -32602,
        "message": 'unknown prompt "notebook_summarize"',
        "data": {"name": "notebook_summarize"},
    }
    assert refusal(missing.value) == renamed(refusal(hidden.value), "notebook_summarize", "nobody_summarize")


@pytest.mark.parametrize("mode", MODES)
async def test_a_hidden_resource_is_as_unknown_as_a_missing_one(server: HttpServer, mode: str) -> None:
    async with client(server, "a", mode) as a:
        assert (await a.read_resource("notebook://notes/first")).contents[0].text == "# First\n"
        assert "first" in (await a.read_resource("notebook://index")).contents[0].text
    async with client(server, "b", mode) as b:
        refusals = {}
        for uri in ["notebook://notes/first", "notebook://index", "nobody://notes/first"]:
            with pytest.raises(MCPError) as refused:
                await b.read_resource(uri)
            refusals[uri] = refusal(refused.value)
        assert (await b.read_resource("jobs://static-text")).contents  # b's own resource reads
    for uri, refused in refusals.items():
        assert refused == {
            "code": -32602,
            "message": "resource not found: no plugin serves this URI",
            "data": {"uri": uri},
        }


@pytest.mark.parametrize("mode", MODES)
async def test_a_hidden_prompt_or_template_completes_nothing(server: HttpServer, mode: str) -> None:
    prompt = PromptReference(type="ref/prompt", name="notebook_summarize")
    template = ResourceTemplateReference(type="ref/resource", uri="notebook://notes/{name}")
    argument = {"name": "name", "value": "f"}
    async with client(server, "a", mode) as a:
        assert (await a.complete(prompt, argument)).completion.values == ["first"]
        assert (await a.complete(template, argument)).completion.values == ["first"]
    async with client(server, "b", mode) as b:
        refusals = {}
        for reference in [
            prompt,
            PromptReference(type="ref/prompt", name="nobody_summarize"),
            template,
            ResourceTemplateReference(type="ref/resource", uri="nobody://notes/{name}"),
        ]:
            with pytest.raises(MCPError) as refused:
                await b.complete(reference, argument)
            refusals[getattr(reference, "name", None) or reference.uri] = refusal(refused.value)
        # b's own prompt completes.
        own = PromptReference(type="ref/prompt", name="jobs_prompt_with_arguments")
        assert (await b.complete(own, {"name": "arg1", "value": "test"})).completion.values == [
            "test", "testing", "tested"
        ]
    unknown_prompt = {"code": -32602, "message": "unknown prompt", "data": None}
    unknown_template = {"code": -32602, "message": "unknown resource template", "data": None}
    assert refusals == {
        "notebook_summarize": unknown_prompt,
        "nobody_summarize": unknown_prompt,
        "notebook://notes/{name}": unknown_template,
        "nobody://notes/{name}": unknown_template,
    }


async def test_a_legacy_session_cannot_subscribe_to_a_hidden_resource(server: HttpServer) -> None:
    async with client(server, "b", LEGACY) as b:
        refusals = {}
        for uri in ["notebook://notes/first", "nobody://notes/first"]:
            with pytest.raises(MCPError) as refused:
                await b.subscribe_resource(uri)
            refusals[uri] = refusal(refused.value)
        await b.subscribe_resource("jobs://watched-resource")  # b's own
    for uri, refused in refusals.items():
        assert refused == {
            "code": -32602,
            "message": "resource not found: no plugin serves this URI",
            "data": {"uri": uri},
        }
    async with client(server, "a", LEGACY) as a:
        await a.subscribe_resource("notebook://notes/first")


async def test_a_subscription_stream_hears_nothing_of_a_hidden_resource(server: HttpServer) -> None:
    uri = "notebook://notes/watched"
    async with client(server, "a", MODERN) as a, client(server, "b", MODERN) as b:
        async with (
            a.listen(resource_subscriptions=[uri]) as heard_by_a,
            b.listen(resource_subscriptions=[uri]) as heard_by_b,
        ):
            await a.call_tool("notebook_write_note", {"name": "watched", "text": "changed"})
            event = await asyncio.wait_for(anext(heard_by_a), 10)
            assert type(event).__name__ == "ResourceUpdated" and str(event.uri) == uri, event
            # Both streams take the update from one broadcast: b's would have it by now.
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(anext(heard_by_b), 1.5)


# --- Tasks ------------------------------------------------------------------------------------


class Caller:
    """Raw JSON-RPC over HTTP as one API key, in one era: a legacy session (opened with
    `initialize`, declaring tasks) or stateless 2026-07-28 requests (declaring them in `_meta`)."""

    def __init__(self, server: HttpServer, who: str, era: str) -> None:
        self.server, self.who, self.era = server, who, era
        self.ids = itertools.count(1)
        self.headers = bearer(who)
        if era == LEGACY:
            params = {"protocolVersion": "2025-11-25", "capabilities": TASKS,
                      "clientInfo": {"name": "moat-e2e", "version": "0"}}
            reply = server.post(request(next(self.ids), "initialize", params), self.headers)
            assert reply.status == 200, reply.body
            self.headers |= {"mcp-session-id": reply.headers["mcp-session-id"],
                             "mcp-protocol-version": "2025-11-25"}
            done = server.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, self.headers)
            assert done.status == 202, done.body

    def send(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        headers = dict(self.headers)
        if self.era == MODERN:
            params = {**params, "_meta": {**MODERN_META, CAPABILITIES: TASKS}}
            name = params.get("name", params.get("taskId"))
            headers |= modern_headers(method, name)
        return self.server.post(request(next(self.ids), method, params), headers).message

    def result(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        message = self.send(method, params)
        assert "result" in message, message
        return message["result"]

    def error(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        message = self.send(method, params)
        assert "error" in message, message
        return message["error"]

    def task_once(self, task_id: str, status: str) -> dict[str, Any]:
        """The task once its status is `status` (it is `working` until then)."""
        deadline = time.monotonic() + 30
        while True:
            task = self.result("tasks/get", {"taskId": task_id})
            if task["status"] != "working" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert task["status"] == status, task
        return task


@pytest.mark.parametrize("era", MODES)
def test_another_callers_task_is_as_unknown_as_a_missing_one(server: HttpServer, era: str) -> None:
    owner, other = Caller(server, "a", era), Caller(server, "b", era)
    created = owner.result("tools/call", {"name": "jobs_confirm_delete", "arguments": {"filename": "plans.txt"}})
    task_id = created["taskId"]
    waiting = owner.task_once(task_id, "input_required")
    assert list(waiting["inputRequests"]) == ["confirm"], waiting

    made_up = "0123456789abcdef" * 2
    for method, extra in [("tasks/get", {}), ("tasks/update", {"inputResponses": ACCEPT}), ("tasks/cancel", {})]:
        hidden = other.error(method, {"taskId": task_id, **extra})
        assert hidden == {"code": -32602, "message": f'unknown task "{task_id}"', "data": {"taskId": task_id}}, method
        missing = other.error(method, {"taskId": made_up, **extra})
        assert missing == renamed(hidden, task_id, made_up), method

    # Neither answered nor cancelled: the task still waits for its owner's answer, and takes it.
    again = owner.result("tasks/get", {"taskId": task_id})
    assert again["status"] == "input_required" and list(again["inputRequests"]) == ["confirm"], again
    owner.result("tasks/update", {"taskId": task_id, "inputResponses": ACCEPT})
    done = owner.task_once(task_id, "completed")
    assert done["result"]["content"][0]["text"] == "Deleted plans.txt.", done


# --- /metrics ---------------------------------------------------------------------------------


def test_metrics_beside_mcp_want_a_credential(server: HttpServer) -> None:
    def get(headers: dict[str, str]) -> tuple[int, dict[str, str], str]:
        connection = server.connection()
        try:
            connection.request("GET", "/metrics", headers=headers)
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
        finally:
            connection.close()

    for headers in [{}, {"Authorization": "Bearer moat_e2e_not_a_key_0123456789abcdef"}]:
        status, answered, body = get(headers)
        assert status == 401, body
        assert answered["www-authenticate"].startswith("Bearer"), answered
        assert "moat_calls_total" not in body
    status, answered, body = get(bearer("a"))
    assert status == 200, body
    assert answered["content-type"].startswith("application/openmetrics-text"), answered
    assert "moat_plugins_loaded 2" in body and body.endswith("# EOF\n")


# --- The sealed request state -----------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def seal(rounds: list[Any], expires_ms: int, name: str, arguments: dict[str, Any], principal: str) -> str:
    """A state as a moat with STATE_KEY seals it: the rounds as JSON after their expiry (ms since
    the epoch), HMAC'd together with a digest of the request it is bound to."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256()
    for part in ["tools/call", name, canonical, principal]:
        digest.update(struct.pack(">Q", len(part.encode())) + part.encode())
    bound = digest.digest()
    body = struct.pack(">q", expires_ms) + json.dumps(rounds, separators=(",", ":")).encode()
    message = b"rmcp/mrtr/request-state/v1" + struct.pack(">Q", len(bound)) + bound + body
    tag = hmac.new(STATE_KEY.encode(), message, hashlib.sha256).digest()
    return f"rs1.{b64(body)}.{b64(tag)}"


def expiry_of(state: str) -> int:
    return struct.unpack(">q", unb64(state.split(".")[1])[:8])[0]


def delete(server: HttpServer, name: str, **params: Any) -> dict[str, Any]:
    """A 2026-07-28 call of `notebook_delete_note` by `a`, declaring elicitation."""
    meta = {**MODERN_META, CAPABILITIES: {"elicitation": {}}}
    message = request(1, "tools/call", {"name": "notebook_delete_note", "arguments": {"name": name},
                                        "_meta": meta, **params})
    headers = {**bearer("a"), **modern_headers("tools/call", "notebook_delete_note")}
    return server.post(message, headers).message


def first_state(server: HttpServer, name: str) -> str:
    asked = delete(server, name)["result"]
    assert asked["resultType"] == "input_required", asked
    return asked["requestState"]


def test_a_state_lives_ten_minutes_and_an_expired_one_is_refused(server: HttpServer, notes: Path) -> None:
    (notes / "expiring.md").write_text("soon gone")
    before = time.time() * 1000
    state = first_state(server, "expiring")
    expires = expiry_of(state)
    assert before + 600_000 <= expires <= time.time() * 1000 + 600_000
    # What seal() makes is what moat makes: only the expiry differs below.
    arguments = {"name": "expiring"}
    assert seal([], expires, "notebook_delete_note", arguments, "key:a") == state

    expired = seal([], int(time.time() * 1000) - 1, "notebook_delete_note", arguments, "key:a")
    refused = delete(server, "expiring", requestState=expired, inputResponses=ACCEPT)
    assert refused.get("error") == {
        "code": -32602,
        "message": "requestState was not issued for this request, was altered or has expired "
                   "(request state has expired)",
    }, refused
    assert (notes / "expiring.md").exists()

    fresh = seal([], int(time.time() * 1000) + 60_000, "notebook_delete_note", arguments, "key:a")
    done = delete(server, "expiring", requestState=fresh, inputResponses=ACCEPT)
    assert done["result"]["content"][0]["text"] == 'Deleted note "expiring".', done
    assert not (notes / "expiring.md").exists()


def test_a_state_over_its_size_is_refused_though_sealed_right(server: HttpServer, notes: Path) -> None:
    (notes / "large.md").write_text("kept")
    # One round answering the question the delete asks, padded past the 512 KiB a state may be.
    answer = {"action": "accept", "content": {"confirm": True}, "_meta": {"padding": "x" * 400_000}}
    expires = int(time.time() * 1000) + 60_000
    large = seal([[["confirm", answer]]], expires, "notebook_delete_note", {"name": "large"}, "key:a")
    assert len(large) > 512 * 1024
    refused = delete(server, "large", requestState=large)
    assert refused.get("error") == {"code": -32602, "message": "requestState is too large"}, refused
    assert (notes / "large.md").exists()


def test_answers_too_large_to_seal_end_the_call(server: HttpServer) -> None:
    """The first of two rounds answered with more than a state may keep: the second round
    cannot be handed out."""
    meta = {**MODERN_META, CAPABILITIES: {"elicitation": {}}}
    tool = "jobs_input_required_result_multi_round"
    answer = {"step1": {"action": "accept", "content": {"name": "n" * 300_000}}}
    message = request(1, "tools/call", {"name": tool, "arguments": {}, "_meta": meta, "inputResponses": answer})
    reply = server.post(message, {**bearer("b"), **modern_headers("tools/call", tool)}).message
    assert reply["error"] == {
        "code": -32603,
        "message": "the client's answers are more than the 262144 bytes a call may keep",
    }, reply


def test_an_altered_state_or_another_callers_is_refused(server: HttpServer, notes: Path) -> None:
    (notes / "altered.md").write_text("kept")
    state = first_state(server, "altered")
    version, body, tag = state.split(".")
    # The same rounds, with a later expiry, under the old tag.
    later = b64(struct.pack(">q", expiry_of(state) + 3_600_000) + unb64(body)[8:])
    refused = delete(server, "altered", requestState=f"{version}.{later}.{tag}", inputResponses=ACCEPT)
    integrity = {
        "code": -32602,
        "message": "requestState was not issued for this request, was altered or has expired "
                   "(request state failed integrity verification)",
    }
    assert refused.get("error") == integrity, refused
    assert (notes / "altered.md").exists()

    # b's state for b's own call, presented by a for the very same call.
    tool = "jobs_input_required_result_tampered_state"
    meta = {**MODERN_META, CAPABILITIES: {"elicitation": {}}}

    def call(who: str, **params: Any) -> dict[str, Any]:
        message = request(1, "tools/call", {"name": tool, "arguments": {}, "_meta": meta, **params})
        return server.post(message, {**bearer(who), **modern_headers("tools/call", tool)}).message

    asked = call("b")["result"]
    confirmed = {"confirm": {"action": "accept", "content": {"ok": True}}}
    again = {"requestState": asked["requestState"], "inputResponses": confirmed}
    assert call("a", **again)["error"] == integrity
    assert call("b", **again)["result"]["content"][0]["text"] == "Confirmed."
