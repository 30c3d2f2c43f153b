"""moat as a shared HTTP service: every caller authenticated, each seeing its own tools, within
its own quota, every call in the audit log under its principal.

The authorization server is real: `oidc-provider` (tests/npm/auth-server.mjs) on loopback,
issuing JWT access tokens bound to moat's resource (RFC 8707) and opaque tokens moat checks by
introspection. The clients are real too: the `mcp` SDK (a bearer header, and its own OAuth
client-credentials flow, which starts from moat's 401), the MCP Inspector CLI and curl.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp.shared.exceptions import MCPError
from mcp.types import DiscoverResult, ToolListChangedNotification
from support import (
    ECHO_SUMMARY,
    INSTRUCTIONS_PREAMBLE,
    LEGACY,
    MODERN,
    MODES,
    assert_text_only,
    free_port,
    http_transport,
    stop,
    wait_for_port,
)
from test_http import INITIALIZE

API_KEY = "moat_e2e_ci_key_0123456789abcdefghijklmnopqrstu"
# A second key, without a quota of its own.
MONITOR_KEY = "moat_e2e_monitor_key_0123456789abcdefghijklmn"
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}

CLIENTS = [
    {"client_id": "alice", "client_secret": "alice-secret", "scope": "tools", "groups": ["eng"]},
    {"client_id": "bob", "client_secret": "bob-secret", "scope": "tools", "groups": ["ops"]},
    # Tokens without the scope moat requires.
    {"client_id": "carol", "client_secret": "carol-secret", "scope": "admin", "groups": ["eng"]},
    # Tokens that expire at once.
    {"client_id": "dave", "client_secret": "dave-secret", "scope": "tools", "groups": ["eng"],
     "access_token_ttl": 1},
    # moat itself, for introspection.
    {"client_id": "moat", "client_secret": "moat-secret"},
]


@dataclass
class AuthServer:
    issuer: str
    process: subprocess.Popen[bytes]
    clients: list[dict[str, Any]] = field(default_factory=lambda: CLIENTS)

    def token(self, client: str, resource: str | None, scope: str = "tools") -> str:
        secret = next(c["client_secret"] for c in self.clients if c["client_id"] == client)
        form = {"grant_type": "client_credentials", "scope": scope}
        if resource is not None:
            form["resource"] = resource
        request = urllib.request.Request(
            f"{self.issuer}/token", data=urllib.parse.urlencode(form).encode(), method="POST"
        )
        request.add_header("authorization", "Basic " + base64.b64encode(f"{client}:{secret}".encode()).decode())
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())["access_token"]

    def control(self, what: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.issuer}/_test/{what}", data=json.dumps(body or {}).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def sign(self, claims: dict[str, Any]) -> str:
        """A JWT of exactly `claims`, signed by the key this server signs its tokens with."""
        return self.control("sign", {"claims": claims})["token"]

    def claims(self, resource: str, **changes: Any) -> dict[str, Any]:
        """What a good token for `resource` says, with `changes`."""
        now = int(time.time())
        return {"iss": self.issuer, "aud": resource, "sub": "alice", "client_id": "alice",
                "iat": now, "exp": now + 300, "scope": "tools", "groups": ["eng"], **changes}

    def revoke(self, client: str, token: str) -> None:
        secret = next(c["client_secret"] for c in CLIENTS if c["client_id"] == client)
        form = urllib.parse.urlencode({"token": token, "client_id": client, "client_secret": secret})
        request = urllib.request.Request(f"{self.issuer}/token/revocation", data=form.encode(), method="POST")
        with urllib.request.urlopen(request, timeout=30):
            pass


def start_auth_server(node_tools: Path, tmp: Path, resources: dict[str, Any],
                      clients: list[dict[str, Any]] = CLIENTS, **settings: Any) -> AuthServer:
    """auth-server.mjs with `resources` and `clients` (and any other `settings` it reads)."""
    config = tmp / "auth-server.json"
    config.write_text(json.dumps({"port": 0, "access_token_ttl": 300, "resources": resources,
                                  "clients": clients, **settings}))
    script = Path(__file__).resolve().parents[1] / "npm" / "auth-server.mjs"
    log = (tmp / "auth-server.stderr").open("w")
    process = subprocess.Popen([str(node_tools / "node"), str(script), str(config)],
                               stdout=subprocess.PIPE, stderr=log)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        pytest.fail(f"the authorization server did not start:\n{(tmp / 'auth-server.stderr').read_text()}")
    return AuthServer(json.loads(line)["issuer"], process, clients)


@dataclass
class Moat:
    url: str
    audit: Path
    stderr: Path
    process: subprocess.Popen[bytes]

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")


def start_moat(moat_bin: Path, tmp: Path, port: int, toml: str) -> Moat:
    (tmp / "moat.toml").write_text(toml)
    stderr = tmp / "moat.stderr"
    with stderr.open("w") as errlog:
        process = subprocess.Popen(
            [str(moat_bin), "serve", "--config", str(tmp / "moat.toml"), "--http", f"127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errlog,
        )
    wait_for_port(port, process, stderr)
    return Moat(f"http://127.0.0.1:{port}/mcp", tmp / "audit.jsonl", stderr, process)



@pytest.fixture(scope="module")
def node_tools() -> Path:
    path = Path(os.environ.get("MOAT_NODE_TOOLS", Path(__file__).resolve().parents[1] / "npm/node_modules/.bin"))
    if not (path / "node").exists():
        pytest.fail(f"node is missing from {path}; `./dev test` installs it")
    return path.resolve()


@pytest.fixture(scope="module")
def setup(
    moat_bin: Path, plugin: Callable[[str], Path], node_tools: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[AuthServer, Moat]]:
    tmp = tmp_path_factory.mktemp("auth")
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    auth = start_auth_server(node_tools, tmp, {
        resource: {"scopes": ["tools", "admin"]},
        "http://127.0.0.1:1/elsewhere": {"scopes": ["tools"]},
    })
    key_hash = hashlib.sha256(API_KEY.encode()).hexdigest()
    monitor_hash = hashlib.sha256(MONITOR_KEY.encode()).hexdigest()
    moat = start_moat(moat_bin, tmp, port, f"""
[plugins.echo]
path = {json.dumps(str(plugin("echo")))}
[plugins.chatty]
path = {json.dumps(str(plugin("chatty")))}

[audit]
path = "audit.jsonl"

[auth]
api_keys = {{ ci = "sha256:{key_hash}", monitor = "sha256:{monitor_hash}" }}
[auth.oauth]
issuer = "{auth.issuer}"
scopes = ["tools"]
leeway_seconds = 0
jwks_cooldown_seconds = 1

[[access]]
group = "eng"
allow = ["plugin:echo"]
[[access]]
group = "ops"
allow = ["plugin:chatty"]
deny = ["chatty_crash"]
[[access]]
key = "ci"
allow = ["echo_echo"]
[[access]]
key = "monitor"
allow = ["echo_echo"]

[quotas]
principals = {{ "key:ci" = {{ requests_per_minute = 20 }} }}
""")
    yield auth, moat
    stop(moat.process)
    stop(auth.process)


def curl(url: str, *args: str) -> tuple[int, dict[str, str], str]:
    """curl's status, headers (lower-case names) and body for one request."""
    done = subprocess.run(["curl", "-sS", "-D", "-", url, *args], capture_output=True,
                          timeout=60, check=True)
    head, _, body = done.stdout.decode().partition("\r\n\r\n")
    lines = head.split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def mcp_post(url: str, token: str | None, message: dict[str, Any] = INITIALIZE, *extra: str) -> tuple[int, dict[str, str], str]:
    args = ["-X", "POST", "-H", "content-type: application/json",
            "-H", "accept: application/json, text/event-stream", "--data", json.dumps(message), *extra]
    if token is not None:
        args += ["-H", f"authorization: Bearer {token}"]
    return curl(url, *args)


async def tool_names(url: str, token: str, mode: str) -> list[str]:
    async with Client(http_transport(url, {"Authorization": f"Bearer {token}"}), mode=mode,
                      read_timeout_seconds=30) as client:
        return sorted(tool.name for tool in (await client.list_tools()).tools)


def test_the_protected_resource_metadata_names_the_issuer_and_scopes(setup: tuple[AuthServer, Moat]) -> None:
    auth, moat = setup
    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"]:
        status, _, body = curl(moat.url.removesuffix("/mcp") + path)
        assert status == 200, body
        document = json.loads(body)
        assert document["resource"] == moat.url
        assert document["authorization_servers"] == [auth.issuer]
        assert document["scopes_supported"] == ["tools"]


def test_no_token_gets_401_saying_where_to_get_one(setup: tuple[AuthServer, Moat]) -> None:
    _, moat = setup
    status, headers, body = mcp_post(moat.url, None)
    assert status == 401, body
    challenge = headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    metadata = moat.url.removesuffix("/mcp") + "/.well-known/oauth-protected-resource/mcp"
    assert f'resource_metadata="{metadata}"' in challenge
    assert 'scope="tools"' in challenge
    assert "error=" not in challenge  # RFC 6750: no error code when no credential was sent
    assert json.loads(body)["error"] == "unauthorized"


@pytest.mark.parametrize(
    ("credential", "reason"),
    [
        ("garbage", "not a JWT, and moat is not configured to introspect opaque tokens"),
        ("a.b.c", "not a well-formed JWT"),
        ("x" * 9000, "longer than 8192 bytes"),
    ],
)
def test_a_bad_credential_gets_401_invalid_token_and_is_logged_without_it(
    setup: tuple[AuthServer, Moat], credential: str, reason: str
) -> None:
    _, moat = setup
    status, headers, body = mcp_post(moat.url, credential)
    assert status == 401, body
    assert 'error="invalid_token"' in headers["www-authenticate"]
    assert reason in json.loads(body)["error_description"]
    assert credential not in moat.log()


def test_a_basic_credential_is_not_a_bearer_one(setup: tuple[AuthServer, Moat]) -> None:
    _, moat = setup
    status, _, body = mcp_post(moat.url, None, INITIALIZE, "-H", "authorization: Basic YWxpY2U6eA==")
    assert status == 401 and "not `Bearer TOKEN`" in json.loads(body)["error_description"]


def test_a_token_for_another_resource_is_refused(setup: tuple[AuthServer, Moat]) -> None:
    auth, moat = setup
    token = auth.token("alice", "http://127.0.0.1:1/elsewhere")
    status, headers, body = mcp_post(moat.url, token)
    assert status == 401, body
    assert "issued for another resource" in json.loads(body)["error_description"]
    assert token not in moat.log()


def test_a_token_without_the_scope_gets_403_insufficient_scope(setup: tuple[AuthServer, Moat]) -> None:
    auth, moat = setup
    token = auth.token("carol", moat.url, scope="admin")
    status, headers, body = mcp_post(moat.url, token)
    assert status == 403, body
    assert 'error="insufficient_scope"' in headers["www-authenticate"]
    assert 'scope="tools"' in headers["www-authenticate"]


def test_an_expired_token_is_refused(setup: tuple[AuthServer, Moat]) -> None:
    auth, moat = setup
    token = auth.token("dave", moat.url)
    assert mcp_post(moat.url, token)[0] == 200
    time.sleep(2.2)
    status, _, body = mcp_post(moat.url, token)
    assert status == 401 and "expired" in json.loads(body)["error_description"], body


def test_a_token_from_another_issuer_is_refused(setup: tuple[AuthServer, Moat]) -> None:
    """Signed by the very key moat trusts, so only `iss` can refuse it."""
    auth, moat = setup
    assert mcp_post(moat.url, auth.sign(auth.claims(moat.url)))[0] == 200
    for other in ["http://127.0.0.1:1", auth.issuer + "/", None]:
        claims = auth.claims(moat.url, iss=other)
        if other is None:
            del claims["iss"]
        status, _, body = mcp_post(moat.url, auth.sign(claims))
        assert status == 401, body
        assert ("another issuer (iss)" if other else "no `iss` claim") in json.loads(body)["error_description"]


def test_a_token_signed_by_another_servers_key_is_refused(
    setup: tuple[AuthServer, Moat], node_tools: Path, tmp_path: Path
) -> None:
    _, moat = setup
    other = start_auth_server(node_tools, tmp_path, {moat.url: {"scopes": ["tools"]}})
    try:
        token = other.token("alice", moat.url)
    finally:
        stop(other.process)
    status, _, body = mcp_post(moat.url, token)
    assert status == 401, body
    assert "does not publish" in json.loads(body)["error_description"]


@pytest.mark.parametrize("sub", ["key:ci", "local"])
async def test_a_token_whose_sub_names_an_api_key_or_the_local_token_is_neither(
    setup: tuple[AuthServer, Moat], sub: str
) -> None:
    """Its holder gets neither their tools nor their quota."""
    auth, moat = setup
    token = auth.sign(auth.claims(moat.url, sub=sub, client_id="mallory", groups=[]))
    assert await tool_names(moat.url, token, LEGACY) == []
    # The CI key has 20 requests a minute; this token is not the CI key.
    assert [mcp_post(moat.url, token)[0] for _ in range(25)] == [200] * 25


async def test_one_group_string_is_one_group(setup: tuple[AuthServer, Moat]) -> None:
    """`"groups": "Finance eng"` names the group `Finance eng`, not `eng`."""
    auth, moat = setup
    assert await tool_names(moat.url, auth.sign(auth.claims(moat.url, groups="Finance eng")), LEGACY) == []
    assert "echo_echo" in await tool_names(moat.url, auth.sign(auth.claims(moat.url, groups="eng")), LEGACY)


@pytest.mark.parametrize("mode", MODES)
async def test_each_caller_sees_and_calls_only_its_tools(setup: tuple[AuthServer, Moat], mode: str) -> None:
    auth, moat = setup
    alice = auth.token("alice", moat.url)
    bob = auth.token("bob", moat.url)
    alice_tools = await tool_names(moat.url, alice, mode)
    assert alice_tools and all(name.startswith("echo_") for name in alice_tools)
    bob_tools = await tool_names(moat.url, bob, mode)
    assert bob_tools and all(name.startswith("chatty_") for name in bob_tools)
    assert "chatty_crash" not in bob_tools  # the ops rule denies it
    assert await tool_names(moat.url, API_KEY, mode) == ["echo_echo"]

    async with Client(http_transport(moat.url, {"Authorization": f"Bearer {alice}"}), mode=mode,
                      read_timeout_seconds=30) as client:
        result = await client.call_tool("echo_echo", {"message": f"alice {mode}"})
        assert_text_only(result, f"alice {mode}")
        # The instructions speak of the plugins the caller may use, and of no other.
        if mode == LEGACY:
            instructions = client.instructions
        else:
            raw = await client.session.send_discover(MODERN)
            instructions = DiscoverResult.model_validate(raw).instructions
        assert instructions == f"{INSTRUCTIONS_PREAMBLE}\n\necho: {ECHO_SUMMARY}"
        # Another caller's tool is as unknown as a tool nobody serves.
        with pytest.raises(MCPError) as hidden:
            await client.call_tool("chatty_count", {"message": "x"})
        with pytest.raises(MCPError) as missing:
            await client.call_tool("nobody_serves_this", {})
        assert str(hidden.value).replace("chatty_count", "X") == str(missing.value).replace("nobody_serves_this", "X")


async def test_the_audit_log_names_each_calls_principal(setup: tuple[AuthServer, Moat]) -> None:
    auth, moat = setup
    bob = auth.token("bob", moat.url)
    async with Client(http_transport(moat.url, {"Authorization": f"Bearer {bob}"}), mode=MODES[1],
                      read_timeout_seconds=30) as client:
        await client.call_tool("chatty_count", {"message": "audited"})
    async with Client(http_transport(moat.url, {"Authorization": f"Bearer {API_KEY}"}), mode=MODES[1],
                      read_timeout_seconds=30) as client:
        await client.call_tool("echo_echo", {"message": "by key"})
    records = [json.loads(line) for line in moat.audit.read_text().splitlines()]
    by_bob = [r for r in records if r["tool"] == "chatty_count"][-1]
    assert (by_bob["principal"], by_bob["authenticated_by"], by_bob["client_id"]) == ("bob", "jwt", "bob")
    assert by_bob["remote"] == "127.0.0.1"
    by_key = [r for r in records if r["tool"] == "echo_echo" and r["principal"] == "key:ci"][-1]
    assert by_key["authenticated_by"] == "api-key"


async def test_the_sdks_own_oauth_client_finds_its_way_from_the_401(setup: tuple[AuthServer, Moat]) -> None:
    """The `mcp` SDK's client-credentials provider starts from moat's 401, reads the Protected
    Resource Metadata, the issuer's metadata, asks for a token for moat's resource and calls."""
    auth, moat = setup

    class Memory:
        def __init__(self) -> None:
            self.tokens: OAuthToken | None = None
            self.client: OAuthClientInformationFull | None = None

        async def get_tokens(self) -> OAuthToken | None:
            return self.tokens

        async def set_tokens(self, tokens: OAuthToken) -> None:
            self.tokens = tokens

        async def get_client_info(self) -> OAuthClientInformationFull | None:
            return self.client

        async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
            self.client = client_info

    storage = Memory()
    provider = ClientCredentialsOAuthProvider(
        server_url=moat.url, storage=storage, client_id="alice", client_secret="alice-secret",
        scope="tools", issuer=auth.issuer,
    )
    transport = streamable_http_client(moat.url, http_client=create_mcp_http_client(auth=provider))
    async with Client(transport, mode=MODES[1], read_timeout_seconds=30) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert names and all(name.startswith("echo_") for name in names)
    assert storage.tokens is not None


def test_a_caller_over_its_rate_gets_429_and_others_carry_on(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    # A moat of its own, so that no other test has drawn on the bucket: it holds a minute's
    # worth, 3 requests, and refills one every 20 s, far longer than the requests below take.
    key_hash = hashlib.sha256(API_KEY.encode()).hexdigest()
    monitor_hash = hashlib.sha256(MONITOR_KEY.encode()).hexdigest()
    moat = start_moat(moat_bin, tmp_path, free_port(), f"""
[plugins.echo]
path = {json.dumps(str(plugin("echo")))}

[auth]
api_keys = {{ ci = "sha256:{key_hash}", monitor = "sha256:{monitor_hash}" }}

[quotas]
principals = {{ "key:ci" = {{ requests_per_minute = 3 }} }}
""")
    try:
        statuses = [mcp_post(moat.url, API_KEY)[0] for _ in range(3)]
        assert statuses == [200, 200, 200], statuses
        status, headers, body = mcp_post(moat.url, API_KEY)
        assert status == 429, body
        assert 15 <= int(headers["retry-after"]) <= 20, headers
        error = json.loads(body)
        assert error["error"]["code"] == -32000 and "key:ci is over its request rate" in error["error"]["message"]
        # Refused requests draw nothing: still refused, while a caller without a quota carries on.
        assert mcp_post(moat.url, API_KEY)[0] == 429
        assert [mcp_post(moat.url, MONITOR_KEY)[0] for _ in range(5)] == [200] * 5
    finally:
        stop(moat.process)


def test_the_inspector_cli_calls_with_a_bearer_header(
    setup: tuple[AuthServer, Moat], node_tools: Path, tmp_path: Path
) -> None:
    auth, moat = setup
    token = auth.token("alice", moat.url)
    env = dict(os.environ, PATH=f"{node_tools}{os.pathsep}{os.environ['PATH']}", HOME=str(tmp_path))
    done = subprocess.run(
        [str(node_tools / "mcp-inspector"), "--cli", "--format", "json", moat.url,
         "--header", f"Authorization: Bearer {token}", "--method", "tools/call",
         "--tool-name", "echo_echo", "--tool-args-json", json.dumps({"message": "inspected"})],
        capture_output=True, env=env, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert "inspected" in done.stdout.decode()


def test_rotated_keys_are_fetched_and_dropped_ones_refused(setup: tuple[AuthServer, Moat]) -> None:
    auth, moat = setup
    before = auth.token("alice", moat.url)
    assert mcp_post(moat.url, before)[0] == 200
    rotated = auth.control("rotate", {"keep_old": False})
    time.sleep(1.1)  # the least time between two fetches of the keys
    after = auth.token("alice", moat.url)
    header = json.loads(base64.urlsafe_b64decode(after.split(".")[0] + "=="))
    assert header["kid"] == rotated["kid"]
    # An unknown kid: moat fetches the keys again.
    assert mcp_post(moat.url, after)[0] == 200
    status, _, body = mcp_post(moat.url, before)
    assert status == 401 and "does not publish" in json.loads(body)["error_description"], body


def test_an_unreachable_or_slow_jwks_delays_no_one_else(setup: tuple[AuthServer, Moat]) -> None:
    auth, moat = setup
    known = auth.token("alice", moat.url)
    assert mcp_post(moat.url, known)[0] == 200
    auth.control("down")
    try:
        auth.control("rotate", {"keep_old": True})
        time.sleep(1.1)
        unknown = auth.token("alice", moat.url)
        status, headers, body = mcp_post(moat.url, unknown)
        assert status == 503, body
        assert "could not be fetched" in json.loads(body)["error_description"]
        assert headers["retry-after"] == "5"
        # Tokens signed by keys moat already has, and API keys, go on working.
        assert mcp_post(moat.url, known)[0] == 200
        assert mcp_post(moat.url, MONITOR_KEY)[0] == 200
    finally:
        auth.control("up")

    # A JWKS that answers slowly holds up only the request that needs it, and only once.
    time.sleep(1.1)  # the least time between two fetches of the keys
    auth.control("slow", {"ms": 8000})
    try:
        auth.control("rotate", {"keep_old": True})
        slow = auth.token("alice", moat.url)
        outcome: dict[str, Any] = {}

        def ask_with_the_new_key() -> None:
            started = time.monotonic()
            outcome["status"] = mcp_post(moat.url, slow)[0]
            outcome["took"] = time.monotonic() - started

        waiting = threading.Thread(target=ask_with_the_new_key)
        waiting.start()
        time.sleep(0.5)
        started = time.monotonic()
        assert mcp_post(moat.url, known)[0] == 200
        assert mcp_post(moat.url, MONITOR_KEY)[0] == 200
        assert time.monotonic() - started < 2.0
        waiting.join()
        assert outcome["status"] == 503 and 4.0 < outcome["took"] < 7.5, outcome
    finally:
        auth.control("slow", {"ms": 0})


def test_opaque_tokens_are_introspected_and_a_revoked_one_refused(
    moat_bin: Path, plugin: Callable[[str], Path], node_tools: Path, tmp_path: Path
) -> None:
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    auth = start_auth_server(node_tools, tmp_path, {resource: {"scopes": ["tools"], "format": "opaque"}})
    moat = None
    try:
        moat = start_moat(moat_bin, tmp_path, port, f"""
[plugins.echo]
path = {json.dumps(str(plugin("echo")))}
[auth.oauth]
issuer = "{auth.issuer}"
scopes = ["tools"]
introspection = {{ client_id = "moat", client_secret = "moat-secret", cache_seconds = 0 }}
""")
        token = auth.token("alice", resource)
        assert token.count(".") != 2, "an opaque token, not a JWT"
        status, _, body = mcp_post(moat.url, token)
        assert status == 200, body
        # Not bound to moat: refused, though the issuer says it is active.
        unbound = auth.token("alice", None)
        status, _, body = mcp_post(moat.url, unbound)
        assert status == 401 and "not issued for this resource" in json.loads(body)["error_description"]
        auth.revoke("alice", token)
        status, _, body = mcp_post(moat.url, token)
        assert status == 401 and "not active" in json.loads(body)["error_description"], body
    finally:
        if moat is not None:
            stop(moat.process)
        stop(auth.process)


def test_the_local_token_is_made_on_first_use_and_put_in_the_hosts_snippet(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MOAT_TOKEN_FILE"}
    env["HOME"] = str(tmp_path)
    env.pop("XDG_CONFIG_HOME", None)
    port = free_port()
    stderr = tmp_path / "moat.stderr"
    with stderr.open("w") as errlog:
        process = subprocess.Popen(
            [str(moat_bin), "serve", str(plugin("echo")), "--http", f"127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errlog, env=env,
        )
    try:
        wait_for_port(port, process, stderr)
        token_file = tmp_path / ".config" / "moat" / "http-token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert (tmp_path / ".config" / "moat").stat().st_mode & 0o777 == 0o700
        token = token_file.read_text().strip()
        url = f"http://127.0.0.1:{port}/mcp"
        status, headers, _ = mcp_post(url, None)
        assert status == 401 and headers["www-authenticate"].startswith("Bearer")
        assert "resource_metadata" not in headers["www-authenticate"]  # no OAuth configured
        assert mcp_post(url, "moat_not_the_token_at_all")[0] == 401
        assert mcp_post(url, token)[0] == 200
        assert token not in stderr.read_text()
        snippet = subprocess.run(
            [str(moat_bin), "config", "cursor", "--http", f"127.0.0.1:{port}"],
            capture_output=True, text=True, env=env, check=True,
        ).stdout
        assert json.loads(snippet)["mcpServers"]["moat"] == {
            "url": url, "headers": {"Authorization": f"Bearer {token}"},
        }
    finally:
        stop(process)


def test_turning_auth_off_is_loopback_only_loud_and_a_policy_may_forbid_it(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    def serve(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(moat_bin), "serve", str(plugin("echo")), *args],
                              capture_output=True, text=True, timeout=60, check=False)

    wide = serve("--http", f"0.0.0.0:{free_port()}", "--no-auth")
    assert wide.returncode != 0 and "allowed on loopback addresses only" in wide.stderr
    policy = tmp_path / "policy.toml"
    policy.write_text('http_require_auth = true\n[[allow]]\nname = "*"\n')
    policy.chmod(0o644)
    forbidden = serve("--policy", str(policy), "--http", f"127.0.0.1:{free_port()}", "--no-auth")
    assert forbidden.returncode != 0 and "requires authentication on HTTP" in forbidden.stderr

    port = free_port()
    stderr = tmp_path / "open.stderr"
    with stderr.open("w") as errlog:
        process = subprocess.Popen(
            [str(moat_bin), "serve", str(plugin("echo")), "--http", f"127.0.0.1:{port}", "--no-auth"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errlog,
        )
    try:
        wait_for_port(port, process, stderr)
        assert mcp_post(f"http://127.0.0.1:{port}/mcp", None)[0] == 200
        assert "AUTHENTICATION IS OFF" in stderr.read_text()
    finally:
        stop(process)


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_list_change_reaches_only_the_callers_whose_tools_changed(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path, mode: str
) -> None:
    keys = {"a": "moat_e2e_caller_a_0123456789abcdefghij", "b": "moat_e2e_caller_b_0123456789abcdefghij"}
    hashes = ", ".join(f'{n} = "sha256:{hashlib.sha256(k.encode()).hexdigest()}"' for n, k in keys.items())

    def config(b_allows: str) -> str:
        return (f'[plugins.echo]\npath = {json.dumps(str(plugin("echo")))}\n'
                f'[plugins.chatty]\npath = {json.dumps(str(plugin("chatty")))}\n'
                f"[auth]\napi_keys = {{ {hashes} }}\n"
                '[[access]]\nkey = "a"\nallow = ["plugin:echo"]\n'
                f'[[access]]\nkey = "b"\nallow = [{b_allows}]\n')

    port = free_port()
    moat = start_moat(moat_bin, tmp_path, port, config('"plugin:chatty"'))
    heard: dict[str, int] = {"a": 0, "b": 0}

    def counting(name: str) -> Callable[[Any], Any]:
        async def on_message(message: Any) -> None:
            if isinstance(message, ToolListChangedNotification):
                heard[name] += 1
        return on_message

    try:
        async with AsyncExitStack() as stack:
            a, b = [
                await stack.enter_async_context(
                    Client(http_transport(moat.url, {"Authorization": f"Bearer {keys[name]}"}), mode=mode,
                           message_handler=counting(name), read_timeout_seconds=30))
                for name in ("a", "b")
            ]
            if mode != LEGACY:
                # A 2026-07-28 client hears of changes only on a subscription it asks for.
                for client in (a, b):
                    await stack.enter_async_context(client.listen(tools_list_changed=True))
            before_a = sorted(t.name for t in (await a.list_tools()).tools)
            assert "echo_echo" not in [t.name for t in (await b.list_tools()).tools]
            (tmp_path / "moat.toml").write_text(config('"plugin:chatty", "echo_echo"'))
            deadline = time.monotonic() + 60
            while heard["b"] == 0:
                assert time.monotonic() < deadline, moat.log()
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.5)  # time enough for a notification that should not come
            assert heard["a"] == 0
            assert "echo_echo" in [t.name for t in (await b.list_tools(cache_mode="refresh")).tools]
            assert sorted(t.name for t in (await a.list_tools(cache_mode="refresh")).tools) == before_a
    finally:
        stop(moat.process)


def test_a_token_whose_issuer_is_not_the_configured_one_is_refused(
    moat_bin: Path, plugin: Callable[[str], Path], node_tools: Path, tmp_path: Path
) -> None:
    """The issuer's own key signed it, but moat was told to trust another issuer through those
    keys: the signature verifies, `iss` does not."""
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    auth = start_auth_server(node_tools, tmp_path, {resource: {"scopes": ["tools"]}})
    moat = None
    try:
        moat = start_moat(moat_bin, tmp_path, port, f"""
[plugins.echo]
path = {json.dumps(str(plugin("echo")))}
[auth.oauth]
issuer = "https://id.example.com"
jwks_uri = "{auth.issuer}/jwks"
""")
        status, _, body = mcp_post(moat.url, auth.token("alice", resource))
        assert status == 401, body
        assert "issued by another issuer (iss)" in json.loads(body)["error_description"]
    finally:
        if moat is not None:
            stop(moat.process)
        stop(auth.process)


def test_an_oversized_header_is_refused_and_others_carry_on(
    setup: tuple[AuthServer, Moat], tmp_path: Path
) -> None:
    auth, moat = setup
    header = tmp_path / "header"
    header.write_text(f"authorization: Bearer {'x' * 200_000}\n")
    status, _, body = curl(moat.url, "-X", "POST", "-H", f"@{header}", "--data", "{}")
    assert status == 401 and "longer than 8192 bytes" in json.loads(body)["error_description"]
    # Past what the HTTP parser buffers at all: refused before moat sees it.
    header.write_text(f"x-padding: {'x' * 2_000_000}\n")
    done = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", moat.url,
                           "-H", f"@{header}", "--data", "{}"], capture_output=True, text=True, timeout=60)
    assert done.stdout in ("431", "000"), done
    assert mcp_post(moat.url, auth.token("alice", moat.url))[0] == 200


async def test_stdio_has_the_same_tool_sets_under_the_policys_cap(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    (tmp_path / "moat.toml").write_text(
        f'[plugins.echo]\npath = {json.dumps(str(plugin("echo")))}\n'
        f'[plugins.chatty]\npath = {json.dumps(str(plugin("chatty")))}\n'
        '[auth]\nstdio_principal = "me"\n'
        '[[access]]\nprincipal = "me"\nallow = ["plugin:echo", "chatty_count"]\n'
    )
    policy = tmp_path / "policy.toml"
    policy.write_text('deny_tools = ["echo_echo"]\n[[allow]]\nname = "*"\n')
    policy.chmod(0o644)
    params = StdioServerParameters(
        command=str(moat_bin),
        args=["serve", "--config", str(tmp_path / "moat.toml"), "--policy", str(policy)],
    )
    with (tmp_path / "stderr").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=LEGACY) as client:
            names = sorted(tool.name for tool in (await client.list_tools()).tools)
            assert "chatty_count" in names and "echo_repeat" in names
            assert "echo_echo" not in names, "the policy takes it from everyone"
            assert not [n for n in names if n.startswith("chatty_") and n != "chatty_count"]
            with pytest.raises(MCPError):
                await client.call_tool("echo_echo", {"message": "denied"})
