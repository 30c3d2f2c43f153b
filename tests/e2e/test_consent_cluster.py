"""A caller's consent across replicas that share a real `redis-server`: the caller's browser
comes back to another replica than the one whose call asked, and the call goes on; the tokens
then serve on every replica, are listed and revoked by `moat credentials` through Redis, and
reach Redis only sealed, each for its own principal.

Real parts as in test_consent.py (a second `oidc-provider` as the third party, headless Chromium
through Playwright, the Python `mcp` SDK), with `redis-server` and two `moat serve --http`.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import ElicitResult
from support import LEGACY, MODES, free_port, http_transport, stop, wait_for_port
from test_auth import AuthServer, node_tools, start_auth_server
from test_cluster import Redis, needs
from test_consent import Person, consent_config, get
from test_credentials import Upstream, serve_upstream

__all__ = ["node_tools"]  # the fixture, shared with test_auth

KEYS = {"ada": "moat_e2e_shared_ada_0123456789abcdefghijklmn",
        "bob": "moat_e2e_shared_bob_0123456789abcdefghijklmn",
        "dee": "moat_e2e_shared_dee_0123456789abcdefghijklmn",
        "cy": "moat_e2e_shared_cy_0123456789abcdefghijklmno"}


@dataclass
class Setup:
    third_party: AuthServer
    redis: Redis
    upstream: Upstream
    config: Path
    # Replica "a" takes the calls; the third party sends browsers back to replica "b".
    urls: dict[str, str] = field(default_factory=dict)
    processes: list[Any] = field(default_factory=list)

    def redis_cli(self, *args: str) -> bytes:
        done = subprocess.run([needs("redis-cli"), "-p", str(self.redis.port), "--raw", *args],
                              capture_output=True, timeout=30, check=True)
        return done.stdout


@pytest.fixture(scope="module")
def setup(
    moat_bin: Path, plugin: Callable[[str], Path], node_tools: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("consent-cluster")
    redis = Redis(free_port(), tmp / "redis.log")
    redis.start()
    ports = {"a": free_port(), "b": free_port()}
    upstream_port = free_port()
    audience = f"http://127.0.0.1:{upstream_port}"
    callback = f"http://127.0.0.1:{ports['b']}/oauth/callback/tracker"
    third_party = start_auth_server(
        node_tools, tmp, {audience: {"scopes": ["read"]}},
        [{"client_id": "moat", "client_secret": "moat-secret", "scope": "read",
          "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
          "redirect_uris": [callback], "access_token_ttl": 33}],
        # Access tokens live 33 s: moat refreshes them 30 s before they expire, so 3 s after.
        authorization_code=True, rotate_refresh_tokens=True,
    )
    upstream = Upstream(third_party.issuer, audience)
    upstream.server = serve_upstream(upstream, upstream_port)
    config = tmp / "moat.toml"
    store = 'credential_store = { key = "${secret:STORE_KEY}" }'
    config.write_text(consent_config(tmp, plugin("fetch"), upstream, third_party, callback, KEYS, store) + f"""
[cluster]
redis = "redis://127.0.0.1:{redis.port}/0"
replica = "${{env:MOAT_REPLICA}}"

[http]
request_state_key = "${{secret:STORE_KEY}}"
""")
    setup = Setup(third_party, redis, upstream, config)
    for name, port in ports.items():
        stderr = tmp / f"{name}.stderr"
        with stderr.open("w") as log:
            process = subprocess.Popen(
                [str(moat_bin), "serve", "--config", str(config), "--http", f"127.0.0.1:{port}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                env={**os.environ, "MOAT_REPLICA": name})
        setup.processes.append(process)
        wait_for_port(port, process, stderr)
        setup.urls[name] = f"http://127.0.0.1:{port}/mcp"
    yield setup
    for process in setup.processes:
        stop(process)
    stop(third_party.process)
    redis.stop()
    upstream.server.shutdown()


@dataclass
class Later(Person):
    """Someone whose client says yes as soon as it opened the page, and who consents a moment
    later: the call waits for tokens that arrive through another replica."""

    browsing: list[asyncio.Task[ElicitResult]] = field(default_factory=list)

    async def elicit(self, context: Any, params: Any) -> ElicitResult:
        async def later() -> ElicitResult:
            await asyncio.sleep(1)
            return await Person.elicit(self, context, params)

        self.browsing.append(asyncio.create_task(later()))
        return ElicitResult(action="accept")


async def whoami(setup: Setup, replica: str, caller: str, person: Person | None, mode: str) -> tuple[str, bool]:
    callback = person.elicit if person else None
    async with Client(http_transport(setup.urls[replica], {"Authorization": f"Bearer {KEYS[caller]}"}),
                      mode=mode, read_timeout_seconds=60, elicitation_callback=callback) as client:
        result = await client.call_tool("fetch_fetch", {"url": f"{setup.upstream.url}/whoami", "raw": True})
        return "\n".join(b.text for b in result.content if b.type == "text"), bool(result.is_error)


def token_key(principal: str) -> str:
    """Where Redis keeps `principal`'s tokens from "tracker" (cluster::consents::token_key)."""
    return "moat:consent-token:" + hashlib.sha256(f"tracker\0{principal}".encode()).hexdigest()[:32]


def credentials(moat_bin: Path, setup: Setup, *args: str) -> subprocess.CompletedProcess[str]:
    # As an operator runs it on a replica's machine, whose environment names it.
    return subprocess.run([str(moat_bin), "credentials", *args, "--config", str(setup.config)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "MOAT_REPLICA": "a"})


@pytest.mark.parametrize("mode", MODES)
async def test_consent_ended_on_another_replica_serves_the_call_and_every_replica(setup: Setup, mode: str) -> None:
    caller = "ada" if mode == LEGACY else "bob"
    # On the legacy era the call waits on replica a while the browser ends at b: only b's word
    # through Redis wakes it. On 2026-07-28 the call is asked again once the page is done.
    person = Later(account=f"{caller}-shared") if mode == LEGACY else Person(account=f"{caller}-shared")
    text, error = await whoami(setup, "a", caller, person, mode)
    if isinstance(person, Later):
        await asyncio.gather(*person.browsing)
    assert not error and f"you are {caller}-shared" in text, text
    assert len(person.asked) == 1
    assert person.landed[0].startswith(setup.urls["b"].removesuffix("/mcp") + "/oauth/callback/tracker?")
    # Replica b serves the token replica a's call asked for, without asking.
    text, error = await whoami(setup, "b", caller, Person(account="not-asked"), mode)
    assert not error and f"you are {caller}-shared" in text, text
    # The link was good once, on every replica: b took it.
    for replica in ("a", "b"):
        status, page = get(setup.urls[replica].removesuffix("/mcp") + "/oauth/callback/tracker?"
                           + person.landed[0].split("?", 1)[1])
        assert status == 400 and "this link was used already" in page, page


async def test_replicas_refresh_a_token_once_for_a_server_that_takes_each_refresh_token_once(setup: Setup) -> None:
    text, error = await whoami(setup, "a", "dee", Person(account="dee-shared"), MODES[1])
    assert not error and "you are dee-shared" in text, text
    for _ in range(2):
        await asyncio.sleep(4)  # the access token is due for a refresh on every replica
        # Both replicas at once: one refreshes, the other waits for what it got. Were both to
        # refresh, the second would send a used refresh token and the server would revoke the
        # grant: dee would be asked to connect again.
        person = Person(account="dee-must-not-be-asked")
        answers = await asyncio.gather(*(whoami(setup, r, "dee", person, MODES[1]) for r in ("a", "b", "a", "b")))
        assert all(not error and "you are dee-shared" in text for text, error in answers), answers
        assert person.asked == []


async def test_redis_holds_tokens_only_sealed_and_each_for_its_own_principal(setup: Setup) -> None:
    text, error = await whoami(setup, "a", "ada", Person(account="ada-shared"), LEGACY)
    assert not error and "you are ada-shared" in text, text
    keys = setup.redis_cli("--scan").decode().split()
    assert token_key("key:ada") in keys, keys
    values = b"".join(setup.redis_cli("GET", key) for key in keys if not key.startswith("moat:alive"))
    for token in {s.removeprefix("Bearer ") for s in setup.upstream.seen if s}:
        assert token.encode() not in values
    # One who may write to Redis copies ada's sealed tokens under cy's key: they do not open
    # there, and cy, whose client cannot open a page, is told to connect their own account.
    assert setup.redis_cli("COPY", token_key("key:ada"), token_key("key:cy"), "REPLACE").strip() == b"1"
    before = len(setup.upstream.seen)
    text, error = await whoami(setup, "b", "cy", None, MODES[1])
    assert error and 'the credential "tracker" needs the caller to connect their account' in text, text
    assert len(setup.upstream.seen) == before


async def test_the_operator_lists_and_revokes_tokens_kept_in_redis(setup: Setup, moat_bin: Path) -> None:
    text, error = await whoami(setup, "b", "ada", Person(account="ada-shared"), LEGACY)
    assert not error and "you are ada-shared" in text, text
    listed = credentials(moat_bin, setup, "list")
    assert listed.returncode == 0, listed.stderr
    assert "key:ada\ttracker\tyes" in listed.stdout and "key:cy" not in listed.stdout, listed.stdout
    revoked = credentials(moat_bin, setup, "revoke", "key:ada", "tracker")
    assert revoked.returncode == 0, revoked.stderr
    assert "key:ada" not in credentials(moat_bin, setup, "list").stdout
    again = credentials(moat_bin, setup, "revoke", "key:ada", "tracker")
    assert again.returncode != 0 and 'holds no credential of principal "key:ada"' in again.stderr
    # Revoked through Redis: both replicas ask ada again.
    person = Person(account="ada-again")
    text, error = await whoami(setup, "a", "ada", person, MODES[1])
    assert not error and "you are ada-again" in text, text
    assert len(person.asked) == 1
