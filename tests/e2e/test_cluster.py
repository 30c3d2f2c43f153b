"""Replicas of `moat serve --http` that share state through a real `redis-server`, alone and
behind the repository's own `deploy/haproxy/haproxy.cfg`: a principal's quota holds across them,
a legacy session goes on on another replica (for its owner only, with the log level and
subscriptions it set, hearing of resource updates raised on any replica), a task is polled, answered and
cancelled through replicas other than the one running it (and outlives that one), a replica told to stop drains
without a failed request, one killed loses only what was in flight on it, and Redis stopped and
started again mid-run changes what the README says and nothing else.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support import free_port, stop, wait_for_port
from test_access_http import CAPABILITIES, TASKS
from test_access_http import ACCEPT as CONFIRM
from test_http_protocol import ACCEPT, INITIALIZE, MODERN_META, Reply, modern_headers, request, sse_data
from test_limits_http import ALICE, LEGACY_VERSION, MALLORY, key_hash, modern, sleep_call

REPO = Path(__file__).resolve().parents[2]
RATE_LIMITED = -32000


def needs(program: str) -> str:
    path = shutil.which(program) or shutil.which(program, path="/usr/sbin:/usr/bin")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{program} is not installed (./dev test installs it)")
        pytest.skip(f"{program} is not installed")
    return path


@dataclass
class Redis:
    port: int
    log: Path
    process: Any = None

    def start(self) -> None:
        with self.log.open("a") as log:
            self.process = subprocess.Popen(
                [needs("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        wait_for_port(self.port, self.process, self.log)

    def stop(self) -> None:
        stop(self.process)


@dataclass
class Replica:
    name: str
    port: int
    stderr: Path
    audit: Path
    process: Any

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")

    def post(self, message: Any, key: str, headers: dict[str, str] | None = None) -> Reply:
        return post(self.port, message, key, headers)

    def metrics(self) -> str:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request("GET", "/metrics", headers={"authorization": f"Bearer {ALICE}"})
            return connection.getresponse().read().decode()
        finally:
            connection.close()


def post(port: int, message: Any, key: str, headers: dict[str, str] | None = None) -> Reply:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        head = {"content-type": "application/json", "accept": ACCEPT,
                "authorization": f"Bearer {key}", **(headers or {})}
        connection.request("POST", "/mcp", json.dumps(message), head)
        return Reply.read(connection.getresponse())
    finally:
        connection.close()


def echo_call(text: str = "hi") -> tuple[dict[str, Any], dict[str, str]]:
    return modern("tools/call", {"name": "echo_echo", "arguments": {"message": text}}, "echo_echo")


def echo(port: int, key: str) -> Reply:
    message, head = echo_call()
    return post(port, message, key, head)


@dataclass
class Cluster:
    moat_bin: Path
    tmp: Path
    redis: Redis
    config: Path
    replicas: list[Replica] = field(default_factory=list)

    def start(self, name: str, config: Path | None = None) -> Replica:
        port = free_port()
        # Two replicas may be given one name (a mistake moat tells of): each its own files.
        run = f"{name}-{len(self.replicas)}"
        stderr = self.tmp / f"{run}.stderr"
        audit = self.tmp / f"{run}.audit.jsonl"
        with stderr.open("w") as log:
            process = subprocess.Popen(
                [str(self.moat_bin), "serve", "--config", str(config or self.config), "--http",
                 f"127.0.0.1:{port}", "--audit", str(audit)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                env={**os.environ, "MOAT_REPLICA": name})
        wait_for_port(port, process, stderr)
        replica = Replica(name, port, stderr, audit, process)
        self.replicas.append(replica)
        return replica


# Replicas seal their task records, and a 2026-07-28 call's state, with the key they share.
STATE_KEY = 'request_state_key = "the request-state key every replica shares, 32+ bytes"\n'


def cluster_config(plugin: Callable[[str], Path], redis_port: int, notes: Path, extra: str) -> str:
    return f"""
[plugins.echo]
path = {json.dumps(str(plugin("echo")))}
[plugins.chatty]
path = {json.dumps(str(plugin("chatty")))}
[plugins.jobs]
path = {json.dumps(str(plugin("conformance")))}
[plugins.notebook]
path = {json.dumps(str(plugin("notebook")))}
files = [{{ host = {json.dumps(str(notes))}, guest = "/notes", mode = "rw" }}]

[auth]
api_keys = {{ alice = "{key_hash(ALICE)}", mallory = "{key_hash(MALLORY)}" }}

[cluster]
redis = "redis://127.0.0.1:{redis_port}/0"
replica = "${{env:MOAT_REPLICA}}"

[http]
drain_seconds = 3
{"" if "request_state_key" in extra else STATE_KEY}{extra}
"""


@pytest.fixture
def make_cluster(moat_bin: Path, plugin: Callable[[str], Path],
                 tmp_path: Path) -> Iterator[Callable[[str], Cluster]]:
    made: list[Cluster] = []

    def make(extra: str = "") -> Cluster:
        redis = Redis(free_port(), tmp_path / "redis.log")
        redis.start()
        config = tmp_path / "moat.toml"
        notes = tmp_path / "notes"
        notes.mkdir(exist_ok=True)
        config.write_text(cluster_config(plugin, redis.port, notes, extra))
        cluster = Cluster(moat_bin, tmp_path, redis, config)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        for replica in cluster.replicas:
            if replica.process.poll() is None:
                stop(replica.process)
        if cluster.redis.process.poll() is None:
            cluster.redis.stop()


def test_the_one_machine_recipe_runs_as_written(moat_bin: Path, tmp_path: Path) -> None:
    """deploy/README.md's "One machine" blocks, run as written from the checkout (HOME a fresh
    folder, moat on PATH): Redis, three replicas of the shipped moat.toml and haproxy, which then
    serves the key the recipe made."""
    for port in (6379, 18080, 18081, 18082, 18083):
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, f"port {port}, which the recipe uses, is taken"
    needs("redis-server")
    needs("haproxy")
    section = (REPO / "deploy/README.md").read_text().split("## One machine", 1)[1]
    blocks = [part.split("```", 1)[0] for part in section.split("```sh\n")[1:3]]
    # A fresh HOME for the recipe's folder; the Rust toolchain `./dev` uses stays where it is.
    env = {**os.environ, "HOME": str(tmp_path),
           "RUSTUP_HOME": os.environ.get("RUSTUP_HOME", str(Path.home() / ".rustup")),
           "CARGO_HOME": os.environ.get("CARGO_HOME", str(Path.home() / ".cargo")),
           "PATH": f"{moat_bin.parent}:/usr/sbin:{os.environ['PATH']}"}
    log = tmp_path / "recipe.log"
    with log.open("w") as out:
        recipe = subprocess.Popen(["bash", "-euo", "pipefail", "-c", "\n".join(blocks)], cwd=REPO,
                                  env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                  start_new_session=True)
    try:
        key_file = tmp_path / "moat-replicas" / "ci.key"
        deadline = time.monotonic() + 180  # `./dev plugins` may build them first
        listed = None
        while listed is None or listed.status != 200:
            assert recipe.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
            if not key_file.exists():
                continue
            try:
                message, head = modern("tools/list", {})
                listed = post(18080, message, key_file.read_text().strip(), head)
            except (OSError, http.client.HTTPException):
                listed = None
        names = {tool["name"] for tool in listed.message["result"]["tools"]}
        assert {name.split("_", 1)[0] for name in names} == {"echo", "text", "time"}, names
        message, head = echo_call("through the recipe")
        answered = post(18080, message, key_file.read_text().strip(), head)
        assert answered.message["result"]["content"][0]["text"] == "through the recipe"
        assert "shares its state through Redis" in log.read_text()
    finally:
        os.killpg(recipe.pid, signal.SIGTERM)
        recipe.wait(timeout=30)


def test_a_principal_s_rate_holds_across_replicas(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster("[quotas]\nrequests_per_minute = 30\n")
    replicas = [cluster.start(f"r{i}") for i in range(3)]
    statuses = [echo(replicas[i % 3].port, ALICE).status for i in range(45)]
    accepted = statuses.count(200)
    # A minute's worth (30) at once, and at most one more refilled while the 45 ran.
    assert 30 <= accepted <= 31, statuses
    assert set(statuses) == {200, 429}, statuses
    # Another principal has a bucket of its own.
    assert echo(replicas[0].port, MALLORY).status == 200
    served_by = {json.loads(line)["replica"] for r in replicas
                 for line in r.audit.read_text().splitlines()}
    assert served_by == {"r0", "r1", "r2"}


def test_a_principal_at_60_a_minute_gets_60_in_a_minute_through_three_replicas(
        make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster("[quotas]\nrequests_per_minute = 60\n")
    replicas = [cluster.start(f"r{i}") for i in range(3)]
    # The bucket starts full: a minute's worth at once.
    burst = [echo(replicas[i % 3].port, ALICE).status for i in range(70)]
    assert 60 <= burst.count(200) <= 61, burst
    # Then a minute of asking four times a second, spread over the three: what is accepted is
    # what refills, one a second, however many replicas are asked.
    began, statuses = time.monotonic(), []
    while time.monotonic() - began < 60:
        statuses.append(echo(replicas[len(statuses) % 3].port, ALICE).status)
        time.sleep(max(0.0, began + len(statuses) * 0.25 - time.monotonic()))
    accepted = statuses.count(200)
    print(f"60/min through 3 replicas: {accepted} accepted of {len(statuses)} in 60 s")
    assert 58 <= accepted <= 62, (accepted, len(statuses))
    assert set(statuses) == {200, 429}


def test_a_reload_that_changes_the_shared_store_or_the_drain_is_refused_whole(
        make_cluster: Callable[..., Cluster]) -> None:
    """Another Redis (or replica name) and another drain take a restart: a reload that changes
    them is refused, naming them, and the replica goes on sharing through the Redis it has."""
    cluster = make_cluster("[quotas]\nrequests_per_minute = 600\n")
    replica = cluster.start("r0")
    text = cluster.config.read_text()
    edited = text.replace(f"127.0.0.1:{cluster.redis.port}/0", f"127.0.0.1:{cluster.redis.port}/1") \
        .replace("drain_seconds = 3", "drain_seconds = 9") \
        .replace("requests_per_minute = 600", "requests_per_minute = 1")
    assert f"{cluster.redis.port}/1" in edited and "drain_seconds = 9" in edited
    cluster.config.write_text(edited)
    replica.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while "reload failed" not in replica.log():
        assert time.monotonic() < deadline, replica.log()
        time.sleep(0.05)
    failure = replica.log().split("reload failed", 1)[1]
    assert "[cluster], [http] drain_seconds changed, which only a restart of moat applies" in failure
    # Nothing of the edit applies, its quota neither: the old rate, shared in database 0.
    assert [echo(replica.port, ALICE).status for _ in range(3)] == [200, 200, 200]
    keys = subprocess.run([needs("redis-cli"), "-p", str(cluster.redis.port), "-n", "0", "--scan",
                           "--pattern", "moat:quota:rate:*"], capture_output=True, text=True, check=True)
    assert len(keys.stdout.split()) == 1, keys.stdout


def test_the_two_rounds_of_a_call_that_asks_are_answered_by_different_replicas(
        make_cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    """A 2026-07-28 call's state is sealed in the request with the key the replicas share:
    whichever replica takes the answer carries the call on."""
    cluster = make_cluster('request_state_key = "the request-state key every replica shares, 32+ bytes"\n')
    r0, r1 = cluster.start("r0"), cluster.start("r1")
    (tmp_path / "notes" / "plan.md").write_text("gone soon")

    def delete(replica: Replica, **params: Any) -> dict[str, Any]:
        meta = {**MODERN_META, CAPABILITIES: {"elicitation": {}}}
        message = request(1, "tools/call", {"name": "notebook_delete_note", "arguments": {"name": "plan"},
                                            "_meta": meta, **params})
        reply = replica.post(message, ALICE, modern_headers("tools/call", "notebook_delete_note"))
        assert reply.status == 200, reply.body
        return reply.message

    asked = delete(r0)["result"]
    assert asked["resultType"] == "input_required", asked
    done = delete(r1, requestState=asked["requestState"], inputResponses=CONFIRM)
    assert done["result"]["content"][0]["text"] == 'Deleted note "plan".', done
    assert not (tmp_path / "notes" / "plan.md").exists()


def test_concurrent_calls_hold_across_replicas(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster("[quotas]\nconcurrent_calls = 1\n")
    first, second = cluster.start("r0"), cluster.start("r1")
    nap, head = modern("tools/call", {"name": "chatty_nap", "arguments": {"ms": 2000}}, "chatty_nap")
    replies: list[Reply] = []
    slow = threading.Thread(target=lambda: replies.append(first.post(nap, ALICE, head)))
    slow.start()
    deadline = time.monotonic() + 10
    while 'moat_calls_running{plugin="chatty"} 1' not in first.metrics():
        assert time.monotonic() < deadline, "the nap never started"
        time.sleep(0.05)
    assert 'moat_cluster_leases 1' in first.metrics()
    refused = echo(second.port, ALICE)
    assert refused.status == 429, refused.body
    assert "already has 1 calls running" in refused.message["error"]["message"]
    assert echo(second.port, MALLORY).status == 200
    slow.join()
    assert replies[0].status == 200, replies[0].body
    assert echo(second.port, ALICE).status == 200


def open_session(port: int, key: str) -> str:
    reply = post(port, INITIALIZE, key)
    assert reply.status == 200, reply.body
    session = reply.headers["mcp-session-id"]
    headers = {"mcp-session-id": session, "mcp-protocol-version": LEGACY_VERSION}
    assert post(port, {"jsonrpc": "2.0", "method": "notifications/initialized"}, key, headers).status == 202
    return session


def session_echo(port: int, key: str, session: str, text: str) -> Reply:
    headers = {"mcp-session-id": session, "mcp-protocol-version": LEGACY_VERSION}
    return post(port, request(7, "tools/call", {"name": "echo_echo", "arguments": {"message": text}}),
                key, headers)


def test_a_legacy_session_goes_on_on_another_replica_for_its_owner_only(
        make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster()
    opener, other, third = (cluster.start(f"r{i}") for i in range(3))
    session = open_session(opener.port, ALICE)
    # Another principal holding the id is answered as for no session, wherever it asks.
    for replica in (other, third, opener):
        assert session_echo(replica.port, MALLORY, session, "x").status == 404
    reply = session_echo(other.port, ALICE, session, "elsewhere")
    assert reply.status == 200, reply.body
    assert reply.message["result"]["content"][0]["text"] == "elsewhere"
    assert "moat_cluster_restored_sessions_total 1" in other.metrics()
    # The replica that opened it dies: the session goes on, without a new initialize.
    opener.process.kill()
    opener.process.wait()
    reply = session_echo(third.port, ALICE, session, "after")
    assert reply.status == 200, reply.body
    assert session_echo(third.port, MALLORY, session, "x").status == 404
    assert session_echo(other.port, ALICE, session, "again").status == 200


def test_a_session_outlives_a_restart_of_a_store_that_keeps_nothing(
        make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster()
    opener, other = cluster.start("r0"), cluster.start("r1")
    session = open_session(opener.port, ALICE)
    assert session_echo(opener.port, ALICE, session, "before").status == 200
    # Restarted without persistence (as the bundled Redis and Valkey configs run): no record.
    cluster.redis.stop()
    cluster.redis.start()
    until_in_log(opener, "no longer holds this replica's keys")
    assert session_echo(opener.port, ALICE, session, "after the restart").status == 200
    until_in_log(opener, "written again from this replica")
    # (Until the other replica hears from the store again, it would send the session back.)
    until_in_log(other, "no longer holds this replica's keys")
    # The replica that opened it goes: another restores it, for its owner only.
    opener.process.kill()
    opener.process.wait()
    reply = session_echo(other.port, ALICE, session, "elsewhere")
    assert reply.status == 200, reply.body
    assert reply.message["result"]["content"][0]["text"] == "elsewhere"
    assert session_echo(other.port, MALLORY, session, "x").status == 404


def test_two_replicas_of_one_name_are_told_of_each_other(
        make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster()
    first = cluster.start("twin")
    other = cluster.start("other")
    second = cluster.start("twin")
    for replica in (first, second):
        until_in_log(replica, 'is also named "twin"')
    assert "also named" not in other.log()


def in_session(replica: Replica, session: str, method: str, params: dict[str, Any]) -> Reply:
    headers = {"mcp-session-id": session, "mcp-protocol-version": LEGACY_VERSION}
    reply = replica.post(request(9, method, params), ALICE, headers)
    assert reply.status == 200, reply.body
    return reply


def session_stream(replica: Replica, session: str) -> tuple[http.client.HTTPConnection, Any]:
    """The GET stream of a legacy session on `replica`, attached (its connection, its response)."""
    connection = http.client.HTTPConnection("127.0.0.1", replica.port, timeout=10)
    connection.request("GET", "/mcp", headers={
        "accept": "text/event-stream", "authorization": f"Bearer {ALICE}",
        "mcp-session-id": session, "mcp-protocol-version": LEGACY_VERSION})
    stream = connection.getresponse()
    assert stream.status == 200, stream.read()
    time.sleep(0.5)  # attached before anything is sent on it
    return connection, stream


def heard_until(stream: Any, method: str, replica: Replica) -> list[dict[str, Any]]:
    """The notifications on `stream` up to the first `method`, failing after 10 s of silence."""
    heard: list[dict[str, Any]] = []
    while not heard or heard[-1].get("method") != method:
        try:
            line = stream.fp.readline().decode()
        except TimeoutError:
            raise AssertionError(f"no {method} within 10 s: {heard}\n{replica.log()}") from None
        assert line, f"the stream ended before {method} came: {heard}"
        heard += [m for m in map(json.loads, sse_data([line])) if "method" in m]
    return heard


def test_a_restored_session_keeps_its_log_level_and_subscriptions_and_hears_any_replica(
        make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster()
    r0, r1, r2 = (cluster.start(f"r{i}") for i in range(3))
    session = open_session(r0.port, ALICE)
    watched = "notebook://index"
    assert "result" in in_session(r0, session, "logging/setLevel", {"level": "error"}).message
    assert "result" in in_session(r0, session, "resources/subscribe", {"uri": watched}).message
    r0.process.kill()
    r0.process.wait()

    # Restored on r1 (by its first request there), and its stream opened there.
    assert "result" in in_session(r1, session, "tools/list", {}).message
    connection, stream = session_stream(r1, session)
    try:
        # The level it set on r0 holds: of the five messages logged, only the error comes...
        logged = {"name": "chatty_log_levels", "arguments": {"message": "m"}}
        assert in_session(r1, session, "tools/call", logged).message["result"]["content"][0]["text"] == "5"
        # ...and its subscription: a note written through r2 updates the index, and r1's
        # stream hears of it.
        write, head = modern("tools/call", {"name": "notebook_write_note",
                                            "arguments": {"name": "n", "text": "t"}}, "notebook_write_note")
        assert r2.post(write, MALLORY, head).status == 200
        heard = heard_until(stream, "notifications/resources/updated", r1)
        levels = [m["params"]["level"] for m in heard if m["method"] == "notifications/message"]
        assert levels == ["error"], heard
        assert heard[-1]["params"]["uri"] == watched, heard
    finally:
        connection.close()


def test_a_tool_list_changed_on_one_replica_reaches_the_sessions_of_the_others(
        make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster()
    r0 = cluster.start("r0")
    own = cluster.config.with_name("r1.toml")
    own.write_text(cluster.config.read_text())
    r1 = cluster.start("r1", config=own)
    session = open_session(r0.port, ALICE)
    connection, stream = session_stream(r0, session)
    try:
        # r1's configuration loses a plugin; r1 reloads and tells the others.
        without = re.sub(r"\[plugins\.notebook\]\n(.*\n){2}", "", own.read_text())
        assert "notebook" not in without
        own.write_text(without)
        r1.process.send_signal(signal.SIGHUP)
        heard = heard_until(stream, "notifications/tools/list_changed", r0)
        assert heard[-1]["method"] == "notifications/tools/list_changed"
    finally:
        connection.close()


def ask(replica: Replica, method: str, params: dict[str, Any], key: str = ALICE) -> dict[str, Any]:
    """A 2026-07-28 request of a client that follows tasks, to `replica`: its result or error."""
    params = {**params, "_meta": {**MODERN_META, CAPABILITIES: TASKS}}
    headers = modern_headers(method, params.get("name", params.get("taskId")))
    reply = replica.post(request(1, method, params), key, headers)
    assert reply.status == 200, reply.body
    return reply.message


def task_of(replica: Replica, task_id: str, key: str = ALICE) -> dict[str, Any]:
    answer = ask(replica, "tasks/get", {"taskId": task_id}, key)
    assert "result" in answer, answer
    return answer["result"]


def started(replica: Replica, tool: str, arguments: dict[str, Any]) -> str:
    answer = ask(replica, "tools/call", {"name": tool, "arguments": arguments})
    return answer["result"]["taskId"]


def until_status(replica: Replica, task_id: str, status: str, within: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while (task := task_of(replica, task_id))["status"] != status:
        assert time.monotonic() < deadline, task
        time.sleep(0.1)
    return task


def until_napping(replica: Replica, count: int) -> None:
    deadline = time.monotonic() + 10
    while f'moat_calls_running{{plugin="chatty"}} {count}' not in replica.metrics():
        assert time.monotonic() < deadline, f"chatty never ran {count} calls on {replica.name}"
        time.sleep(0.05)


def test_a_task_is_answered_and_cancelled_through_any_replica_and_outlives_its_own(
        make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster()
    r0, r1, r2 = (cluster.start(f"r{i}") for i in range(3))

    # Asked about through one replica, answered through another, its result read on a third.
    task_id = started(r0, "jobs_confirm_delete", {"filename": "plans.txt"})
    waiting = until_status(r1, task_id, "input_required")
    assert list(waiting["inputRequests"]) == ["confirm"], waiting
    assert "error" in ask(r2, "tasks/get", {"taskId": task_id}, MALLORY), "another principal's"
    ask(r2, "tasks/update", {"taskId": task_id, "inputResponses": CONFIRM})
    done = until_status(r0, task_id, "completed")
    assert done["result"]["content"][0]["text"] == "Deleted plans.txt.", done

    # Cancelled through another replica: the guest running on r0 stops.
    task_id = started(r0, "chatty_nap_once_as_task", {"ms": 20000})
    until_napping(r0, 1)
    assert "result" in ask(r1, "tasks/cancel", {"taskId": task_id})
    until_napping(r0, 0)
    assert task_of(r2, task_id)["status"] == "cancelled"

    # Its replica killed while it runs: a tool that must not run twice fails, with the reason.
    once = started(r0, "chatty_nap_once_as_task", {"ms": 20000})
    twice = started(r0, "chatty_nap_as_task", {"ms": 3000})
    until_napping(r0, 2)
    r0.process.kill()
    r0.process.wait()
    failed = until_status(r1, once, "failed")
    assert "replica running this task (r0) stopped" in failed["error"]["message"], failed
    assert "not marked @idempotent" in failed["error"]["message"], failed
    # ...and an @idempotent one runs again on the replica it is next asked about through.
    done = until_status(r2, twice, "completed")
    assert done["result"]["content"][0]["text"] == "3000", done
    assert "running its @idempotent tool again here" in (r1.log() + r2.log())


@dataclass
class Load:
    """Callers that call echo through `port` until stopped, counting every answer and noting,
    for each failure, when its request was sent."""
    port: int
    callers: int
    send: Callable[[int], Reply] = lambda port: echo(port, MALLORY)
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    failed_sent_at: list[float] = field(default_factory=list)
    running: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        for _ in range(self.callers):
            thread = threading.Thread(target=self.run)
            thread.start()
            self.threads.append(thread)
        return self

    def run(self) -> None:
        while self.running:
            sent_at = time.monotonic()
            try:
                status = self.send(self.port).status
                outcome = None if status == 200 else f"HTTP {status}"
            except (OSError, http.client.HTTPException) as error:
                outcome = repr(error)
            with self.lock:
                if outcome is None:
                    self.ok += 1
                else:
                    self.failed.append(outcome)
                    self.failed_sent_at.append(sent_at)

    def counts(self) -> tuple[int, int]:
        with self.lock:
            return self.ok, len(self.failed)

    def stop(self) -> None:
        self.running = False
        for thread in self.threads:
            thread.join()


@pytest.fixture
def haproxy(tmp_path: Path) -> Iterator[Callable[[list[Replica]], int]]:
    started: list[Any] = []

    def start(replicas: list[Replica]) -> int:
        port = free_port()
        env = {**os.environ, "MOAT_FRONTEND": f"127.0.0.1:{port}"}
        for i, replica in enumerate(replicas, 1):
            env[f"MOAT_REPLICA_{i}"] = f"127.0.0.1:{replica.port}"
        log = tmp_path / "haproxy.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                [needs("haproxy"), "-f", str(REPO / "deploy/haproxy/haproxy.cfg")],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env)
        started.append(process)
        wait_for_port(port, process, log)
        deadline = time.monotonic() + 15
        # Every replica up (rise 2 at 1 s) before the load starts.
        while not all(echo(port, MALLORY).status == 200 for _ in range(6)):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(2.5)
        return port

    yield start
    for process in started:
        stop(process)


def test_behind_haproxy_a_drained_replica_fails_nothing_and_a_killed_one_only_what_ran_on_it(
        make_cluster: Callable[..., Cluster], haproxy: Callable[[list[Replica]], int]) -> None:
    cluster = make_cluster()
    replicas = [cluster.start(f"r{i}") for i in range(3)]
    port = haproxy(replicas)
    callers = 16
    load = Load(port, callers).start()
    try:
        time.sleep(1.5)
        drained = replicas[0]
        drained.process.send_signal(signal.SIGTERM)
        assert drained.process.wait(timeout=30) == 0
        time.sleep(1.5)
        ok, failed = load.counts()
        assert failed == 0, load.failed
        assert ok > 0
        log = drained.log()
        assert "SIGTERM: shutting down" in log and "draining:" in log and "stopped" in log, log
        # SIGKILL: only what was sent to it before it died fails (in flight, or waiting in its
        # listen backlog); a request sent after finds its port closed and haproxy sends it on.
        replicas[1].process.kill()
        replicas[1].process.wait()
        died_at = time.monotonic()
        time.sleep(4)  # haproxy marks it down (fall 2 at 1 s)
        with load.lock:
            late = [at - died_at for at in load.failed_sent_at if at > died_at]
        assert not late, f"failed though sent {late} s after the kill: {load.failed}"
        before = load.counts()
        time.sleep(2)
        after = load.counts()
        assert after[1] == before[1], load.failed[before[1]:]
        assert after[0] > before[0]
    finally:
        load.stop()
    print(f"through haproxy: {load.ok} calls ok; drain failed 0; kill failed {len(load.failed)} "
          f"({sorted(set(load.failed))}) "
          f"of {callers} callers")


def call_in_background(replica: Replica, ms: int) -> tuple[threading.Thread, list[Reply]]:
    """A call of chatty_nap for `ms` on `replica`, in a thread; its reply lands in the list."""
    replies: list[Reply] = []
    message, head = sleep_call(ms)
    thread = threading.Thread(target=lambda: replies.append(replica.post(message, ALICE, head)))
    thread.start()
    return thread, replies


def until_running(replica: Replica, calls: int) -> None:
    deadline = time.monotonic() + 10
    while not re.search(rf"^moat_calls_running\S* {calls}$", replica.metrics(), re.M):
        assert time.monotonic() < deadline, replica.metrics()
        time.sleep(0.05)


def until_in_log(replica: Replica, text: str, within: float = 10) -> None:
    deadline = time.monotonic() + within
    while text not in replica.log():
        assert time.monotonic() < deadline, f"{text!r} not in the log:\n{replica.log()}"
        time.sleep(0.05)


def test_a_drain_finishes_the_calls_running_and_refuses_new_work_as_not_processed(
        make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster()  # drain_seconds = 3
    replica = cluster.start("r0")
    # A call that outlasts the notice period: it began before the stop, so it finishes.
    thread, replies = call_in_background(replica, 6000)
    until_running(replica, 1)
    replica.process.send_signal(signal.SIGTERM)
    until_in_log(replica, "taking no new work")
    # New work once the notice is over: refused, and said not to have run.
    refused = echo(replica.port, ALICE)
    assert refused.status == 503, refused.body
    assert "did not process the request" in refused.message["error"]["message"]
    assert refused.headers["retry-after"] == "1"
    thread.join(timeout=30)
    assert replies and replies[0].status == 200, replies and replies[0].body
    assert replies[0].message["result"]["content"][0]["text"] == "6000", replies[0].body
    assert replica.process.wait(timeout=30) == 0
    log = replica.log()
    assert "waiting up to 30 s for the 1 call(s) running" in log, log
    assert "every call running has finished" in log, log
    assert "call cancelled" not in log, log


def test_a_clean_stop_logs_no_error_or_warning(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster()
    replica = cluster.start("r0")
    session = open_session(replica.port, ALICE)
    connection, stream = session_stream(replica, session)
    assert echo(replica.port, ALICE).status == 200
    # A legacy session's call running as the stop begins: it finishes on its POST stream.
    headers = {"mcp-session-id": session, "mcp-protocol-version": LEGACY_VERSION}
    nap = request(8, "tools/call", {"name": "chatty_nap", "arguments": {"ms": 4000}})
    replies: list[Reply] = []
    thread = threading.Thread(target=lambda: replies.append(replica.post(nap, ALICE, headers)))
    thread.start()
    until_running(replica, 1)
    replica.process.send_signal(signal.SIGTERM)
    assert replica.process.wait(timeout=30) == 0
    thread.join(timeout=10)
    assert replies and replies[0].message["result"]["content"][0]["text"] == "4000", replies
    connection.close()
    stopping = replica.log().split("SIGTERM: shutting down", 1)[1]
    noisy = [line for line in stopping.splitlines() if " ERROR " in line or " WARN " in line]
    assert noisy == [], stopping


def test_a_drain_stops_what_outlasts_drain_finish_seconds(
        make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster("drain_finish_seconds = 1\n")
    replica = cluster.start("r0")
    thread, replies = call_in_background(replica, 20000)
    until_running(replica, 1)
    stopped_at = time.monotonic()
    replica.process.send_signal(signal.SIGTERM)
    assert replica.process.wait(timeout=15) == 0
    # Notice (3 s) and finish (1 s), then stopped: not the call's 20 s.
    assert time.monotonic() - stopped_at < 10
    thread.join(timeout=30)
    assert not replies or replies[0].status != 200 or "error" in replies[0].body
    log = replica.log()
    assert "still running after 1 s ([http] drain_finish_seconds): stopping them" in log, log
    assert "call stopped: moat is shutting down" in log, log
    assert "cancelled by the client" not in log, log


def test_behind_haproxy_new_sessions_open_while_a_replica_drains(
        make_cluster: Callable[..., Cluster], haproxy: Callable[[list[Replica]], int]) -> None:
    cluster = make_cluster()
    replicas = [cluster.start(f"r{i}") for i in range(3)]
    port = haproxy(replicas)
    # Each caller opens a new legacy session after another: the drained replica answers some
    # with 503 (before haproxy's checks take it out), which haproxy sends on to another.
    load = Load(port, 8, send=lambda port: post(port, INITIALIZE, MALLORY)).start()
    try:
        time.sleep(1)
        replicas[0].process.send_signal(signal.SIGTERM)
        assert replicas[0].process.wait(timeout=30) == 0
        time.sleep(1)
    finally:
        load.stop()
    assert load.failed == [], load.failed
    assert load.ok > 0
    print(f"through haproxy: {load.ok} sessions opened while a replica drained, none failed")


def test_redis_stopped_and_started_again_changes_only_what_is_shared(
        make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster("[quotas]\nrequests_per_minute = 600\n")
    replica = cluster.start("r0")
    assert echo(replica.port, ALICE).status == 200
    assert "moat_cluster_up 1" in replica.metrics()
    cluster.redis.stop()
    # Calls go on, each replica counting alone, and the log and metrics say so.
    for _ in range(5):
        assert echo(replica.port, ALICE).status == 200
    deadline = time.monotonic() + 10
    while "moat_cluster_up 0" not in replica.metrics():
        assert time.monotonic() < deadline, replica.log()
        time.sleep(0.2)
    assert "is unreachable" in replica.log() and "quotas hold per replica" in replica.log()
    assert echo(replica.port, ALICE).status == 200
    # A new task is refused, saying to come back: no replica could answer for it.
    refused = ask(replica, "tools/call", {"name": "chatty_nap_as_task", "arguments": {"ms": 1}})
    assert "does not answer now: try again" in refused["error"]["message"], refused
    assert refused["error"]["data"] == {"retryable": True}, refused
    cluster.redis.start()
    deadline = time.monotonic() + 10
    while "moat_cluster_up 1" not in replica.metrics():
        assert time.monotonic() < deadline, replica.log()
        time.sleep(0.2)
    assert "answers again" in replica.log()
    assert echo(replica.port, ALICE).status == 200
    task_id = started(replica, "chatty_nap_as_task", {"ms": 1})
    assert until_status(replica, task_id, "completed")["result"]["content"][0]["text"] == "1"
    # Shared again: the call was counted in the restarted (empty) Redis.
    keys = subprocess.run([needs("redis-cli"), "-p", str(cluster.redis.port), "--scan",
                           "--pattern", "moat:quota:rate:*"], capture_output=True, text=True, check=True)
    assert len(keys.stdout.split()) == 1, keys.stdout
