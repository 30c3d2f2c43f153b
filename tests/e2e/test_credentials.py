"""Tools that act for their caller: a plugin's requests to an upstream carry the calling
principal's own credential (`[credentials]`), which the guest never holds.

Real parts: `oidc-provider` (tests/npm/auth-server.mjs) issues the callers' access tokens and
exchanges them (RFC 8693) for tokens meant for the upstream; the upstream is a loopback HTTP API
that checks each token against the authorization server's keys, answers with the user it sees
and records every Authorization header it receives. The bundled `fetch` plugin is the tool, the
Python `mcp` SDK the client.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from support import MODES, free_port, http_transport, stop
from test_auth import API_KEY, CLIENTS, MONITOR_KEY, AuthServer, Moat, node_tools, start_auth_server, start_moat

__all__ = ["node_tools"]  # the fixture, shared with test_auth

# What the upstream accepts from the `ci` key's principal, and from the stdio user: fixed
# credentials from the secrets file, one per principal.
CI_UPSTREAM_KEY = "ci-upstream-key-0123456789"
STDIO_UPSTREAM_KEY = "stdio-upstream-key-0123456789"
FIXED_KEYS = {CI_UPSTREAM_KEY: "ci-bot", STDIO_UPSTREAM_KEY: "the-local-user"}


@dataclass
class Upstream:
    """A loopback API that says who it sees, and remembers every Authorization header."""

    issuer: str
    audience: str
    seen: list[str | None] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None
    # Tokens it takes no more (revoked on its side), though validly signed.
    revoked: set[str] = field(default_factory=set)

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def user(self, authorization: str | None) -> str | None:
        if not authorization or not authorization.startswith("Bearer "):
            return None
        token = authorization.removeprefix("Bearer ")
        if token in self.revoked:
            return None
        if token in FIXED_KEYS:
            return FIXED_KEYS[token]
        try:
            key = jwt.PyJWKClient(f"{self.issuer}/jwks").get_signing_key_from_jwt(token)
            claims = jwt.decode(token, key.key, algorithms=["RS256"], audience=self.audience,
                                issuer=self.issuer)
        except jwt.PyJWTError:
            return None
        # An exchanged token names the one who exchanged it (RFC 8693 `act`).
        actor = claims.get("act", {}).get("sub")
        return f"{claims['sub']} (through {actor})" if actor else claims["sub"]


def serve_upstream(upstream: Upstream, port: int = 0) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server API)
            authorization = self.headers.get("Authorization")
            upstream.seen.append(authorization)
            if self.path == "/echo":
                # A hostile or careless upstream: the request's headers, back to the caller.
                return self.answer(200, "".join(f"{k}: {v}\n" for k, v in self.headers.items()),
                                   {"X-Echo-Authorization": authorization or ""})
            if self.path.startswith("/redirect"):
                self.send_response(302)
                self.send_header("Location", self.path.split("to=", 1)[1])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            user = upstream.user(authorization)
            if user is None:
                return self.answer(401, "who are you?")
            return self.answer(200, f"you are {user}")

        def answer(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@dataclass
class Setup:
    auth: AuthServer
    moat: Moat
    upstream: Upstream
    # Another loopback server, granted to the plugin too, that no credential may reach.
    elsewhere: Upstream
    config: Path


@pytest.fixture(scope="module")
def setup(
    moat_bin: Path, plugin: Callable[[str], Path], node_tools: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("credentials")
    port = free_port()
    upstream_port = free_port()
    audience = f"http://127.0.0.1:{upstream_port}"
    clients = [{**c, "token_exchange": True} if c["client_id"] == "moat" else c for c in CLIENTS]
    # A caller no other test uses, whose exchanges are counted from zero.
    clients.append({"client_id": "erin", "client_secret": "erin-secret", "scope": "tools"})
    clients.append({"client_id": "frank", "client_secret": "frank-secret", "scope": "tools"})
    auth = start_auth_server(node_tools, tmp, {f"http://127.0.0.1:{port}/mcp": {"scopes": ["tools"]}},
                             clients, exchange_audiences=[audience])
    upstream = Upstream(auth.issuer, audience)
    upstream.server = serve_upstream(upstream, upstream_port)
    elsewhere = Upstream(auth.issuer, "nobody")
    elsewhere.server = serve_upstream(elsewhere)
    secrets = tmp / "secrets.toml"
    secrets.write_text(f'CI_TRACKER = "{CI_UPSTREAM_KEY}"\nSTDIO_TRACKER = "{STDIO_UPSTREAM_KEY}"\n'
                       'EXCHANGE = "moat-secret"\n')
    secrets.chmod(0o600)
    key_hash = hashlib.sha256(API_KEY.encode()).hexdigest()
    monitor_hash = hashlib.sha256(MONITOR_KEY.encode()).hexdigest()
    toml = f"""
secrets = "secrets.toml"

[plugins.fetch]
path = {json.dumps(str(plugin("fetch")))}
network = ["{upstream.url}", "{elsewhere.url}"]
inject = [{{ host = "{upstream.url}", header = "Authorization", value = "Bearer ${{credential:tracker}}" }}]

[plugins.wiki]
path = {json.dumps(str(plugin("fetch")))}
network = ["{upstream.url}"]
inject = [{{ host = "{upstream.url}", header = "Authorization", value = "Bearer ${{credential:wiki}}" }}]

[credentials.tracker]
hosts = ["{upstream.url}"]
principals = {{ "key:ci" = "${{secret:CI_TRACKER}}", stdio = "${{secret:STDIO_TRACKER}}" }}
exchange = {{ token_endpoint = "{auth.issuer}/token", client_id = "moat", client_secret = "${{secret:EXCHANGE}}", audience = "{audience}" }}

# An audience the authorization server refuses to issue tokens for.
[credentials.wiki]
hosts = ["{upstream.url}"]
exchange = {{ token_endpoint = "{auth.issuer}/token", client_id = "moat", client_secret = "${{secret:EXCHANGE}}", audience = "http://wiki.invalid" }}

[audit]
path = "audit.jsonl"

[auth]
api_keys = {{ ci = "sha256:{key_hash}", monitor = "sha256:{monitor_hash}" }}
[auth.oauth]
issuer = "{auth.issuer}"
scopes = ["tools"]
jwks_cooldown_seconds = 1
"""
    moat = start_moat(moat_bin, tmp, port, toml)
    yield Setup(auth, moat, upstream, elsewhere, tmp / "moat.toml")
    stop(moat.process)
    stop(auth.process)
    upstream.server.shutdown()
    elsewhere.server.shutdown()


async def fetch(setup: Setup, bearer: str, path: str, mode: str = MODES[1], tool: str = "fetch_fetch") -> tuple[str, bool]:
    """The text `tool` answers for `path` on the upstream, called with `bearer`, and whether it
    is a tool error."""
    async with Client(http_transport(setup.moat.url, {"Authorization": f"Bearer {bearer}"}), mode=mode,
                      read_timeout_seconds=30) as client:
        result = await client.call_tool(tool, {"url": f"{setup.upstream.url}{path}", "raw": True})
        text = "\n".join(block.text for block in result.content if block.type == "text")
        return text, bool(result.is_error)


def exchanges(auth: AuthServer) -> dict[str, int]:
    return auth.control("exchanges")["by_subject"]


@pytest.mark.parametrize("mode", MODES)
async def test_the_upstream_sees_each_caller_as_themselves(setup: Setup, mode: str) -> None:
    alice = setup.auth.token("alice", setup.moat.url)
    bob = setup.auth.token("bob", setup.moat.url)
    # At once: each call's requests carry its own caller's token, and no one else's.
    answers = await asyncio.gather(
        *(fetch(setup, token, "/whoami", mode) for token in [alice, bob, alice, bob, API_KEY])
    )
    texts = [text for text, _ in answers]
    assert all(not error for _, error in answers), texts
    assert "you are alice (through moat)" in texts[0] and "you are alice (through moat)" in texts[2]
    assert "you are bob (through moat)" in texts[1] and "you are bob (through moat)" in texts[3]
    assert "you are ci-bot" in texts[4]


async def test_an_exchanged_token_is_kept_until_shortly_before_it_expires(setup: Setup) -> None:
    erin = setup.auth.token("erin", setup.moat.url)
    for _ in range(3):
        text, error = await fetch(setup, erin, "/whoami")
        assert not error and "you are erin (through moat)" in text, text
    assert exchanges(setup.auth).get("erin") == 1


async def test_a_caller_without_a_credential_gets_a_reason_and_sends_nothing(setup: Setup) -> None:
    before = len(setup.upstream.seen)
    text, error = await fetch(setup, MONITOR_KEY, "/whoami")
    assert error
    assert ('network access to 127.0.0.1:' in text and 'denied: the credential source "tracker" exchanges '
            'the caller\'s OAuth access token, and principal "key:monitor" signed in without one') in text, text
    assert len(setup.upstream.seen) == before
    # An exchange the authorization server refuses: its reason, and again no request.
    alice = setup.auth.token("alice", setup.moat.url)
    text, error = await fetch(setup, alice, "/whoami", tool="wiki_fetch")
    assert error and "was refused: invalid_target" in text, text
    assert len(setup.upstream.seen) == before


async def test_an_upstream_that_echoes_the_credential_hands_back_only_redacted(setup: Setup) -> None:
    alice = setup.auth.token("alice", setup.moat.url)
    text, error = await fetch(setup, alice, "/echo")
    assert not error, text
    sent = setup.upstream.seen[-1]
    assert sent is not None and sent.startswith("Bearer ey"), sent
    token = sent.removeprefix("Bearer ")
    assert token not in text
    assert "authorization: bearer [redacted]" in text.lower(), text
    # A fixed credential from the secrets file too.
    text, error = await fetch(setup, API_KEY, "/echo")
    assert not error and CI_UPSTREAM_KEY not in text and "[redacted]" in text, text


async def test_a_redirect_elsewhere_carries_no_credential(setup: Setup) -> None:
    alice = setup.auth.token("alice", setup.moat.url)
    await fetch(setup, alice, f"/redirect?to={setup.elsewhere.url}/whoami")
    assert setup.upstream.seen[-1] is not None  # the first request carried it
    assert setup.elsewhere.seen == [None], setup.elsewhere.seen


async def test_no_credential_reaches_the_audit_log_or_moats_log(setup: Setup) -> None:
    alice = setup.auth.token("alice", setup.moat.url)
    await fetch(setup, alice, "/whoami")
    records = [json.loads(line) for line in setup.moat.audit.read_text().splitlines()]
    used = [r for r in records if r.get("credentials")]
    assert used and all(r["credentials"] == ["tracker"] for r in used)
    assert any(r["principal"] == "key:ci" for r in used)
    audit = setup.moat.audit.read_text()
    log = setup.moat.log()
    tokens = {s.removeprefix("Bearer ") for s in setup.upstream.seen if s}
    assert CI_UPSTREAM_KEY in tokens and len(tokens) > 2
    for token in tokens:
        assert token not in audit and token not in log


async def test_the_stdio_user_is_the_principal(setup: Setup, moat_bin: Path) -> None:
    params = StdioServerParameters(command=str(moat_bin), args=["serve", "--config", str(setup.config)])
    async with Client(stdio_client(params), mode=MODES[0], read_timeout_seconds=30) as client:
        result = await client.call_tool("fetch_fetch", {"url": f"{setup.upstream.url}/whoami", "raw": True})
        text = "\n".join(block.text for block in result.content if block.type == "text")
    assert not result.is_error and "you are the-local-user" in text, text


@pytest.mark.parametrize(("policy", "refusal"), [
    ('credential_sources = ["wiki"]',
     'does not allow the credential source "tracker" (its credential_sources are wiki)'),
    ("require_token_exchange = true",
     'requires token exchange for callers\' upstream credentials, and the credential source "tracker" '
     "also gives them by `principals`"),
])
def test_the_policy_decides_which_sources_may_serve(setup: Setup, moat_bin: Path, tmp_path: Path,
                                                    policy: str, refusal: str) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(f'{policy}\n[[allow]]\nname = "*"\n')
    done = subprocess.run([str(moat_bin), "serve", "--config", str(setup.config), "--policy", str(path)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert refusal in done.stderr, done.stderr


# Last: it rotates the authorization server's keys, which ends every token signed before.
async def test_a_token_the_upstream_refuses_is_dropped_and_exchanged_anew(setup: Setup) -> None:
    frank = setup.auth.token("frank", setup.moat.url)
    text, error = await fetch(setup, frank, "/whoami")
    assert not error and "you are frank (through moat)" in text, text
    # The upstream revokes the token moat keeps for frank: its next call is refused once.
    kept = setup.upstream.seen[-1]
    assert kept is not None
    setup.upstream.revoked.add(kept.removeprefix("Bearer "))
    text, _ = await fetch(setup, frank, "/whoami")
    assert "answered HTTP 401" in text, text
    assert exchanges(setup.auth)["frank"] == 1
    text, error = await fetch(setup, frank, "/whoami")
    assert not error and "you are frank (through moat)" in text, text
    assert exchanges(setup.auth)["frank"] == 2
    # Signed in again, frank's new token is exchanged anew: the kept one served only the old.
    frank = setup.auth.token("frank", setup.moat.url)
    text, error = await fetch(setup, frank, "/whoami")
    assert not error and "you are frank (through moat)" in text, text
    assert exchanges(setup.auth)["frank"] == 3
