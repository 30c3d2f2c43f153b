"""The operators' console across replicas: two `moat serve --http` replicas sharing a real
`redis-server`, both with `[console]`. An operator signed in on replica A watches, on A's
`/console/live/events`, the calls a client makes on replica B as they start and end, finds them
on A's `/console/live` page, and cancels one of B's calls through A: the cancel travels over
Redis to B, which stops the guest, answers its client with an error and audits the call as
cancelled by an operator.

Plain HTTP (no browser): the sign-in is `moat console`'s one-time link, and the event stream is
read in a thread. The client on B is the Python `mcp` SDK.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from mcp import Client, MCPError
from support import MODERN, http_transport
from test_cluster import Cluster, Replica, make_cluster
from test_limits_http import key_hash

__all__ = ["make_cluster"]  # the fixture, shared with test_cluster

# "ops" is the operator, "ci" the client whose calls are watched.
OPS = "moat_e2e_cluster_console_ops_0123456789abcdefghijk"
CI = "moat_e2e_cluster_console_ci_0123456789abcdefghijklm"
SESSION = "__Host-moat-console"


def console_cluster(make_cluster: Callable[..., Cluster]) -> Cluster:
    """The cluster of test_cluster, its API keys joined by ops and ci, and ops an operator."""
    cluster = make_cluster('[console]\nadmins = ["key:ops"]\n')
    text = cluster.config.read_text()
    keys = f'api_keys = {{ ops = "{key_hash(OPS)}", ci = "{key_hash(CI)}", '
    assert text.count("api_keys = { ") == 1, text
    cluster.config.write_text(text.replace("api_keys = { ", keys))
    return cluster


def fetch(replica: Replica, method: str, path: str, headers: dict[str, str] | None = None,
         body: str | None = None) -> tuple[int, dict[str, str], list[str], str]:
    """One request to `replica`: its status, headers (lowercased), Set-Cookie values and body."""
    connection = http.client.HTTPConnection("127.0.0.1", replica.port, timeout=30)
    try:
        connection.request(method, path, body, headers or {})
        response = connection.getresponse()
        cookies = response.headers.get_all("set-cookie") or []
        head = {name.lower(): value for name, value in response.getheaders()}
        return response.status, head, cookies, response.read().decode(errors="replace")
    finally:
        connection.close()


def sign_in(replica: Replica, key: str) -> str:
    """The session cookie ("NAME=VALUE") of the principal of API key `key`, signed in on
    `replica` by a one-time link."""
    status, _, _, body = fetch(replica, "POST", "/console/link", {"authorization": f"Bearer {key}"})
    assert status == 200, f"POST /console/link answered {status}: {body}"
    url = urllib.parse.urlsplit(json.loads(body)["url"])
    assert url.path.startswith("/console/enter/"), body
    status, _, cookies, body = fetch(replica, "GET", url.path)
    assert status == 200, f"GET {url.path} answered {status}: {body}"
    session = [c.split(";", 1)[0] for c in cookies if c.startswith(f"{SESSION}=")]
    assert len(session) == 1 and session[0] != f"{SESSION}=", f"no session cookie set: {cookies}"
    return session[0]


@dataclass
class Events:
    """`/console/live/events` of a replica, read in a thread: every `call` event, in order."""

    replica: Replica
    cookie: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    other: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    connection: http.client.HTTPConnection | None = None
    reader: threading.Thread | None = None

    def open(self) -> Events:
        self.connection = http.client.HTTPConnection("127.0.0.1", self.replica.port, timeout=60)
        self.connection.request("GET", "/console/live/events",
                                headers={"cookie": self.cookie, "accept": "text/event-stream"})
        response = self.connection.getresponse()
        assert response.status == 200, f"/console/live/events answered {response.status}: {response.read()!r}"
        assert response.getheader("content-type", "").startswith("text/event-stream"), response.getheaders()
        self.reader = threading.Thread(target=self._read, args=(response,), daemon=True)
        self.reader.start()
        return self

    def _read(self, response: Any) -> None:
        kind, data = "message", []
        try:
            while line := response.readline():
                line = line.decode().rstrip("\r\n")
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                elif not line:
                    if data:
                        with self.lock:
                            if kind == "call":
                                self.calls.append(json.loads("\n".join(data)))
                            else:
                                self.other.append((kind, "\n".join(data)))
                    kind, data = "message", []
        except (OSError, ValueError, http.client.HTTPException):
            pass  # closed at the end of the test

    def close(self) -> None:
        """Ends the stream: its socket shut, its reader done, then its connection closed."""
        if self.connection is None:
            return
        if self.connection.sock is not None:
            self.connection.sock.shutdown(socket.SHUT_RDWR)
        if self.reader is not None:
            self.reader.join(timeout=10)
        self.connection.close()

    async def until(self, match: Callable[[dict[str, Any]], bool], what: str,
                    seconds: float = 15) -> dict[str, Any]:
        """The first call event `match` takes, waiting up to `seconds` for it."""
        deadline = time.monotonic() + seconds
        while True:
            with self.lock:
                found = next((event for event in self.calls if match(event)), None)
                seen = list(self.calls)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not on {self.replica.name}'s /console/live/events within {seconds}s; "
                            f"its call events: {seen}; other events: {self.other}")
            await asyncio.sleep(0.02)


def client(replica: Replica, key: str) -> Client:
    return Client(http_transport(f"http://127.0.0.1:{replica.port}/mcp", {"Authorization": f"Bearer {key}"}),
                  mode=MODERN, read_timeout_seconds=60)


async def nap(replica: Replica, ms: int) -> str:
    """What the client `ci` heard of `chatty_nap` for `ms` on `replica`: a result or an error."""
    async with client(replica, CI) as session:
        try:
            result = await session.call_tool("chatty_nap", {"ms": ms})
        except MCPError as error:
            return f"an error: {error}"
        texts = [block.text for block in result.content if block.type == "text"]
        return f"a result, isError {result.is_error}: {' '.join(texts)}"


def live_rows(html: str) -> list[dict[str, str]]:
    """The rows of /console/live's table: each one's attributes and cells, as the page has them."""
    rows = []
    for opening, inner in re.findall(r"<tr (data-call=[^>]*)>(.*?)</tr>", html, re.S):
        row = dict(re.findall(r'data-([a-z]+)="([^"]*)"', opening))
        outcome = re.search(r'class="outcome"(?: data-outcome="([^"]*)")?>([^<]*)', inner)
        row["outcome"] = outcome.group(1) or "" if outcome else "(no outcome cell)"
        row["outcome_text"] = outcome.group(2) if outcome else ""
        duration = re.search(r'class="duration">([^<]*)<', inner)
        row["duration"] = duration.group(1) if duration else ""
        row["cancel_replica"] = next(iter(re.findall(r'name="replica" value="([^"]*)"', inner)), "")
        rows.append(row)
    return rows


def audited(replica: Replica) -> list[dict[str, Any]]:
    if not replica.audit.exists():
        return []
    return [json.loads(line) for line in replica.audit.read_text().splitlines() if line.strip()]


async def test_an_operator_on_one_replica_watches_and_cancels_a_call_on_another(
        make_cluster: Callable[..., Cluster]) -> None:
    cluster = console_cluster(make_cluster)
    a, b = cluster.start("a"), cluster.start("b")
    cookie = sign_in(a, OPS)
    events = Events(a, cookie).open()
    try:
        # A's own replica, as its calls name it: a quick call on A.
        assert "a result, isError False: 5" == await nap(a, 5)
        own = (await events.until(lambda e: e["tool"] == "chatty_nap" and e["principal"] == "key:ci",
                                  "the start of ci's call on A"))["replica"]

        # A call on B: A's stream shows it start, as B's and ci's, then end as ok.
        slow = asyncio.create_task(nap(b, 1500))
        started = await events.until(lambda e: e["replica"] != own and e.get("ended") is None,
                                     "the start of ci's 1.5 s nap on B")
        assert (started["principal"], started["tool"]) == ("key:ci", "chatty_nap"), started
        elsewhere, first = started["replica"], started["id"]
        status, _, _, page = fetch(a, "GET", "/console/live", {"cookie": cookie})
        assert status == 200, page
        row = [r for r in live_rows(page) if (r["replica"], r["call"]) == (elsewhere, str(first))]
        assert len(row) == 1 and row[0]["duration"] == "running" and row[0]["cancel_replica"] == elsewhere, \
            f"A's /console/live should list B's call {first} running, with its cancel form: {live_rows(page)}"
        assert await asyncio.wait_for(slow, 30) == "a result, isError False: 1500"
        ended = await events.until(lambda e: (e["replica"], e["id"]) == (elsewhere, first) and e.get("ended"),
                                   f"the end of B's call {first}")
        assert ended["ended"]["outcome"] == "ok" and ended["ended"]["duration_ms"] >= 1500, ended
        status, _, _, page = fetch(a, "GET", "/console/live", {"cookie": cookie})
        row = [r for r in live_rows(page) if (r["replica"], r["call"]) == (elsewhere, str(first))]
        assert len(row) == 1 and row[0]["outcome"] == "ok", \
            f"A's /console/live should list B's finished call {first} as ok: {live_rows(page)}"
        csrf = re.search(r'<table id="live-calls" data-csrf="([^"]+)"', page)
        assert csrf, f"no CSRF token on /console/live: {page}"

        # A second nap on B, cancelled through A: B stops it, and its client hears so at once.
        slow = asyncio.create_task(nap(b, 20000))
        started = await events.until(lambda e: e["replica"] == elsewhere and e["id"] != first
                                     and e.get("ended") is None, "the start of ci's 20 s nap on B")
        second = started["id"]
        form = urllib.parse.urlencode({"csrf": csrf.group(1), "replica": elsewhere, "id": second})
        cancelled_at = time.monotonic()
        status, head, _, body = fetch(a, "POST", "/console/live/cancel", {
            "cookie": cookie, "content-type": "application/x-www-form-urlencoded"}, form)
        assert (status, head.get("location")) == (303, "/console/live"), \
            f"POST /console/live/cancel {form} answered {status} {head}: {body}"
        try:
            answer = await asyncio.wait_for(slow, 15)
        except TimeoutError:
            pytest.fail(f"B's call {second} went on 15 s after A answered the cancel {status}; B's log:\n{b.log()}")
        assert answer.startswith("an error:") and "cancelled" in answer, answer
        assert time.monotonic() - cancelled_at < 10, f"the cancel took {time.monotonic() - cancelled_at:.1f} s"
        ended = await events.until(lambda e: (e["replica"], e["id"]) == (elsewhere, second) and e.get("ended"),
                                   f"the end of B's call {second}")
        assert ended["ended"]["outcome"] == "cancelled", ended
        assert ended["ended"].get("error") == "the call was cancelled by an operator", ended
        assert ended["ended"]["duration_ms"] < 10000, f"B's call {second} ran on after the cancel: {ended}"
        status, _, _, page = fetch(a, "GET", "/console/live", {"cookie": cookie})
        row = [r for r in live_rows(page) if (r["replica"], r["call"]) == (elsewhere, str(second))]
        assert len(row) == 1 and row[0]["outcome"] == "cancelled" and row[0]["cancel_replica"] == "", \
            f"A's /console/live should list B's call {second} as cancelled, with no cancel form: {live_rows(page)}"
        # An ended call is no longer there to cancel.
        status, _, _, body = fetch(a, "POST", "/console/live/cancel", {
            "cookie": cookie, "content-type": "application/x-www-form-urlencoded"}, form)
        assert status == 409, f"cancelling B's ended call {second} again answered {status}: {body}"

        # B audited it, cancelled by an operator; A audited the operator's cancel, not a call.
        deadline = time.monotonic() + 10
        while not [r for r in audited(b) if r.get("outcome") == "cancelled"]:
            assert time.monotonic() < deadline, f"no cancelled call in B's audit log: {audited(b)}"
            await asyncio.sleep(0.05)
        lines = [r for r in audited(b) if r.get("outcome") == "cancelled"]
        assert [(r["principal"], r["tool"], r["replica"], r.get("error")) for r in lines] == \
               [("key:ci", "chatty_nap", "b", "the call was cancelled by an operator")], lines
        assert not [r for r in audited(a) if r.get("tool") == "chatty_nap" and r.get("outcome") == "cancelled"], \
            audited(a)
        actions = [(r["principal"], r.get("action"), r.get("target")) for r in audited(a) if r.get("method") == "console"]
        assert actions == [("key:ops", "cancel", f"call {second} of {elsewhere}")], \
            f"A's audit log should have ops's one cancel of B's call: {audited(a)}"
        assert "call cancelled by an operator" in b.log(), b.log()
        assert "call cancelled by an operator" not in a.log(), a.log()
    finally:
        events.close()
