"""What one caller of `moat serve --http` cannot step around: its call slots (whatever runs its
guest, and for as long as it runs), the cap on sessions, a session another caller opened, and a
configuration edit that takes its key away or changes its quota.

Two API-key callers, `alice` and `mallory`, each with one call at a time, against the echo,
chatty (which naps on request) and notebook (resources, prompts, completions) plugins.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import free_port, stop, wait_for_port
from test_http_protocol import ACCEPT, INITIALIZE, Reply, modern_headers, request
from test_protocol import MODERN, MODERN_META

ALICE = "moat_e2e_alice_key_0123456789abcdefghijklmnopqrstuv"
MALLORY = "moat_e2e_mallory_key_0123456789abcdefghijklmnopqrs"
LEGACY_VERSION = "2025-11-25"
# The quota's JSON-RPC code: "the server refuses for now".
RATE_LIMITED = -32000


def key_hash(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


@dataclass
class Service:
    port: int
    config: Path
    stderr: Path
    process: Any

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")

    def post(self, message: Any, key: str, headers: dict[str, str] | None = None,
             content_type: str = "application/json") -> Reply:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            head = {"content-type": content_type, "accept": ACCEPT,
                    "authorization": f"Bearer {key}", **(headers or {})}
            connection.request("POST", "/mcp", json.dumps(message), head)
            return Reply.read(connection.getresponse())
        finally:
            connection.close()

    def raw(self, method: str, key: str, headers: dict[str, str]) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, "/mcp", headers={"accept": ACCEPT,
                                                        "authorization": f"Bearer {key}", **headers})
            response = connection.getresponse()
            response.read()
            return response.status
        finally:
            connection.close()

    def reload(self, config: str) -> None:
        """Writes `config` and waits until moat has reloaded it (or refused to)."""
        before = self.log().count("reloading:")
        ended = self.log().count("plugins loaded") + self.log().count("reload failed")
        self.config.write_text(config)
        self.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while (self.log().count("reloading:") <= before
               or self.log().count("plugins loaded") + self.log().count("reload failed") <= ended):
            assert time.monotonic() < deadline, f"no reload:\n{self.log()}"
            time.sleep(0.05)


def config_text(plugin: Callable[[str], Path], notes: Path, keys: dict[str, str], extra: str = "") -> str:
    api_keys = ", ".join(f'{name} = "{key_hash(key)}"' for name, key in keys.items())
    return f"""
[plugins.echo]
path = {json.dumps(str(plugin("echo")))}
[plugins.chatty]
path = {json.dumps(str(plugin("chatty")))}
[plugins.conformance]
path = {json.dumps(str(plugin("conformance")))}
[plugins.notebook]
path = {json.dumps(str(plugin("notebook")))}
files = [{{ host = {json.dumps(str(notes))}, guest = "/notes", mode = "rw" }}]

[auth]
api_keys = {{ {api_keys} }}

[quotas]
concurrent_calls = 1

[http]
max_sessions = 3
{extra}
"""


@pytest.fixture
def service(moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path) -> Iterator[Service]:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "first.md").write_text("# First\n")
    config = tmp_path / "moat.toml"
    config.write_text(config_text(plugin, notes, {"alice": ALICE, "mallory": MALLORY}))
    port = free_port()
    stderr = tmp_path / "moat.stderr"
    with stderr.open("w") as log:
        process = subprocess.Popen(
            [str(moat_bin), "serve", "--config", str(config), "--http", f"127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    wait_for_port(port, process, stderr)
    yield Service(port, config, stderr, process)
    stop(process)


def modern(method: str, params: dict[str, Any], name: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    return request(1, method, {**params, "_meta": MODERN_META}), modern_headers(method, name)


def sleep_call(ms: int) -> tuple[dict[str, Any], dict[str, str]]:
    return modern("tools/call", {"name": "chatty_nap", "arguments": {"ms": ms}}, "chatty_nap")


def echo(service: Service, key: str, **headers: str) -> Reply:
    message, head = modern("tools/call", {"name": "echo_echo", "arguments": {"message": "hi"}}, "echo_echo")
    return service.post(message, key, {**head, **headers})


def in_background(call: Callable[[], Reply]) -> tuple[threading.Thread, list[Reply]]:
    replies: list[Reply] = []
    thread = threading.Thread(target=lambda: replies.append(call()))
    thread.start()
    return thread, replies


def wait_until_running(service: Service, key: str) -> None:
    """Waits until a chatty call runs (as the metrics say, read by `key`), without asking
    anything of the slot it holds."""
    deadline = time.monotonic() + 10
    while 'moat_calls_running{plugin="chatty"} 1' not in metrics(service, key):
        assert time.monotonic() < deadline, "the slow call never started"
        time.sleep(0.05)


def metrics(service: Service, key: str) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
    try:
        connection.request("GET", "/metrics", headers={"authorization": f"Bearer {key}"})
        return connection.getresponse().read().decode()
    finally:
        connection.close()


def assert_over_quota(reply: Reply, what: str) -> None:
    assert reply.status == 429, f"{what}: {reply.status} {reply.body}"
    assert reply.headers.get("retry-after") == "1"
    error = reply.message["error"]
    assert error["code"] == RATE_LIMITED
    assert "key:alice already has 1 calls running" in error["message"]


def test_a_capitalised_content_type_is_held_to_the_quota(service: Service) -> None:
    """The method is read whatever the media type's case: `Application/JSON` is no way past the
    call limit, and a POST moat cannot read never reaches the server behind it."""
    message, head = sleep_call(1500)
    slow, replies = in_background(lambda: service.post(message, ALICE, head))
    wait_until_running(service, MALLORY)
    call, head = modern("tools/call", {"name": "echo_echo", "arguments": {"message": "x"}}, "echo_echo")
    for content_type in ["Application/JSON", "APPLICATION/json; charset=utf-8"]:
        assert_over_quota(service.post(call, ALICE, head, content_type), content_type)
    odd = service.post(call, ALICE, head, "text/plain")
    assert odd.status == 415, odd.body
    slow.join()
    assert replies[0].status == 200, replies[0].body
    assert echo(service, ALICE).status == 200


@pytest.mark.parametrize("what", ["resources/read", "prompts/get", "completion/complete"])
def test_every_request_that_runs_a_guest_takes_a_call_slot(service: Service, what: str) -> None:
    requests = {
        "resources/read": modern("resources/read", {"uri": "notebook://notes/first"},
                                 "notebook://notes/first"),
        "prompts/get": modern("prompts/get", {"name": "notebook_summarize", "arguments": {"name": "first"}},
                              "notebook_summarize"),
        "completion/complete": modern("completion/complete", {
            "ref": {"type": "ref/prompt", "name": "notebook_summarize"},
            "argument": {"name": "name", "value": "f"}}),
    }
    message, head = requests[what]
    # Alone, it is served.
    assert service.post(message, ALICE, head).status == 200
    sleep, sleep_head = sleep_call(1500)
    slow, replies = in_background(lambda: service.post(sleep, ALICE, sleep_head))
    wait_until_running(service, MALLORY)
    assert_over_quota(service.post(message, ALICE, head), what)
    # Another caller's slot is its own.
    assert service.post(message, MALLORY, head).status == 200
    slow.join()
    assert replies[0].status == 200, replies[0].body


def open_session(service: Service, key: str) -> str:
    reply = service.post(INITIALIZE, key)
    assert reply.status == 200, reply.body
    session = reply.headers["mcp-session-id"]
    headers = {"mcp-session-id": session, "mcp-protocol-version": LEGACY_VERSION}
    assert service.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, key, headers).status == 202
    return session


def test_a_session_call_keeps_its_slot_after_its_connection_is_gone(service: Service) -> None:
    session = open_session(service, ALICE)
    body = json.dumps(request(5, "tools/call", {"name": "chatty_nap", "arguments": {"ms": 2000}})).encode()
    head = {"content-type": "application/json", "accept": ACCEPT, "authorization": f"Bearer {ALICE}",
            "mcp-session-id": session, "mcp-protocol-version": LEGACY_VERSION}
    lines = "".join(f"{name}: {value}\r\n" for name, value in head.items())
    stream = socket.create_connection(("127.0.0.1", service.port))
    stream.sendall(f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n{lines}content-length: {len(body)}\r\n\r\n"
                   .encode() + body)
    started = time.monotonic()
    wait_until_running(service, MALLORY)
    stream.close()  # the client walks away; the session's call sleeps on
    time.sleep(0.3)
    assert_over_quota(echo(service, ALICE), "a call while the abandoned one runs")
    # Once the guest has finished, the slot is free again.
    while time.monotonic() - started < 2.5:
        time.sleep(0.1)
    deadline = time.monotonic() + 5
    while (reply := echo(service, ALICE)).status != 200:
        assert time.monotonic() < deadline, reply.body
        time.sleep(0.1)


def test_sessions_beyond_the_cap_are_refused_and_a_closed_one_frees_its_place(service: Service) -> None:
    sessions = [open_session(service, ALICE) for _ in range(3)]
    refused = service.post(INITIALIZE, MALLORY)
    assert refused.status == 503, refused.body
    assert refused.headers.get("retry-after") == "30"
    assert "3 sessions open, as many as it allows" in refused.message["error"]["message"]
    headers = {"mcp-session-id": sessions[0], "mcp-protocol-version": LEGACY_VERSION}
    assert service.raw("DELETE", ALICE, headers) == 200
    assert service.post(INITIALIZE, MALLORY).status == 200


def test_another_callers_session_is_not_found(service: Service) -> None:
    session = open_session(service, ALICE)
    headers = {"mcp-session-id": session, "mcp-protocol-version": LEGACY_VERSION}
    call = request(2, "tools/call", {"name": "echo_echo", "arguments": {"message": "mine"}})
    # Mallory, holding Alice's session id, can neither post to it, nor read its stream, nor end it.
    stolen = service.post(call, MALLORY, headers)
    assert stolen.status == 404, stolen.body
    assert service.raw("GET", MALLORY, headers) == 404
    assert service.raw("DELETE", MALLORY, headers) == 404
    # The session is untouched, and Alice's still.
    reply = service.post(call, ALICE, headers)
    assert reply.status == 200, reply.body
    assert reply.message["result"]["content"][0]["text"] == "mine"
    assert session not in service.log(), "a session id is a bearer credential: not for the log"


def test_a_key_removed_by_a_reload_stops_working_at_once(
    service: Service, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    assert echo(service, MALLORY).status == 200
    service.reload(config_text(plugin, tmp_path / "notes", {"alice": ALICE}))
    assert "reload failed" not in service.log()
    refused = echo(service, MALLORY)
    assert refused.status == 401, refused.body
    assert echo(service, ALICE).status == 200
    # A key added is accepted as soon.
    service.reload(config_text(plugin, tmp_path / "notes", {"alice": ALICE, "mallory": MALLORY}))
    assert echo(service, MALLORY).status == 200


def test_a_quota_changed_by_a_reload_applies_to_the_next_request(
    service: Service, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    keys = {"alice": ALICE, "mallory": MALLORY}
    text = config_text(plugin, tmp_path / "notes", keys).replace(
        "concurrent_calls = 1", "concurrent_calls = 1\nrequests_per_minute = 2")
    service.reload(text)
    assert "reload failed" not in service.log()
    assert [echo(service, ALICE).status for _ in range(3)] == [200, 200, 429]


def test_a_reload_that_needs_a_restart_is_refused_whole(
    service: Service, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    """A change that cannot apply live is refused loudly, and the rest of the edit with it: the
    key it removes still works, as everything else does, until the edit is put right."""
    text = config_text(plugin, tmp_path / "notes", {"alice": ALICE},
                       extra='hosts = ["tools.example.com"]\n[audit]\npath = "audit.jsonl"')
    service.reload(text)
    failure = service.log().split("reload failed", 1)[1]
    assert "[audit], [http] hosts changed, which only a restart of moat applies" in failure
    assert echo(service, MALLORY).status == 200
    assert not (tmp_path / "audit.jsonl").exists()


def test_the_metrics_are_for_callers_who_see_every_tool(
    service: Service, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    """The metrics name every plugin and tool: a caller to whom rules hide some may not read them."""
    assert get(service.port, "/metrics", None) == 401
    assert get(service.port, "/metrics", MALLORY) == 200
    rules = '[[access]]\nkey = "alice"\nallow = ["*"]\n[[access]]\nkey = "mallory"\nallow = ["echo_*"]'
    service.reload(config_text(plugin, tmp_path / "notes", {"alice": ALICE, "mallory": MALLORY}, rules))
    assert "reload failed" not in service.log(), service.log()
    assert get(service.port, "/metrics", ALICE) == 200
    assert get(service.port, "/metrics", MALLORY) == 403


def get(port: int, path: str, key: str | None) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers={"authorization": f"Bearer {key}"} if key else {})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_a_hidden_tools_headers_tell_nothing(
    service: Service, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    """rmcp checks a call's `Mcp-Param` headers against the tool's schema before moat's handler
    runs: for a tool hidden from the caller it must answer as for no tool at all."""
    rules = ('[[access]]\nkey = "alice"\nallow = ["echo_*", "chatty_*"]\n'
             '[[access]]\nkey = "mallory"\nallow = ["*"]')
    service.reload(config_text(plugin, tmp_path / "notes", {"alice": ALICE, "mallory": MALLORY}, rules))
    assert "reload failed" not in service.log(), service.log()

    def answer(key: str, name: str) -> tuple[int, Any]:
        message, head = modern("tools/call", {"name": name, "arguments": {"region": "eu"}}, name)
        head["mcp-param-region"] = "dXM="  # base64 of "us": not what the body says
        reply = service.post(message, key, head)
        return reply.status, reply.message["error"]["code"]

    # To a caller who may see it, the tool's header is checked…
    assert answer(MALLORY, "conformance_custom_headers")[1] == -32020
    # …to one who may not, the tool is as absent as one nobody serves.
    assert answer(ALICE, "conformance_custom_headers") == answer(ALICE, "conformance_no_such_tool")


def test_a_session_follows_a_bounded_number_of_resources(service: Service) -> None:
    session = open_session(service, ALICE)
    headers = {"mcp-session-id": session, "mcp-protocol-version": LEGACY_VERSION}

    def subscribe(n: int) -> Reply:
        return service.post(request(n, "resources/subscribe", {"uri": f"notebook://notes/n{n}"}),
                            ALICE, headers)

    for n in range(256):
        reply = subscribe(n)
        assert "error" not in reply.message, reply.body
    refused = subscribe(256)
    assert "follows 256 resources, as many as it may" in refused.message["error"]["message"]
    # One already followed may be asked for again.
    assert "error" not in subscribe(0).message
