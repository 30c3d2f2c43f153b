"""Two callers of one tool, at once, each seen by the upstream as themselves: one signed in
with OAuth, whose token moat exchanges (RFC 8693), and one with an API key, who connects their
account in the browser (confirming moat's page, then authorization code with PKCE). One `[credentials.tracker]` serves both:
its `exchange` for the caller who brought a token, its `consent` for the one who did not.

Real parts: one `oidc-provider` (tests/npm/auth-server.mjs) is the organisation's server that
moat trusts, exchanges tokens and is also the upstream's own (as an enterprise's identity
provider is for its tools); the upstream checks every token against its keys; headless Chromium
through Playwright is the person; the Python `mcp` SDK is the client.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp import Client
from support import MODES, free_port, http_transport, stop
from test_auth import AuthServer, Moat, node_tools, start_auth_server, start_moat
from test_consent import Person
from test_credentials import Upstream, serve_upstream

__all__ = ["node_tools"]  # the fixture, shared with test_auth

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
# The API-key callers, one for each era: each connects their account once.
KEYS = {MODES[0]: ("ada", "moat_e2e_together_ada_0123456789abcdefghijklm"),
        MODES[1]: ("cy", "moat_e2e_together_cy_0123456789abcdefghijklmn")}


@dataclass
class Setup:
    auth: AuthServer
    moat: Moat
    upstream: Upstream


@pytest.fixture(scope="module")
def setup(
    moat_bin: Path, plugin: Callable[[str], Path], node_tools: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("together")
    port = free_port()
    upstream_port = free_port()
    audience = f"http://127.0.0.1:{upstream_port}"
    callback = f"http://127.0.0.1:{port}/oauth/callback/tracker"
    auth = start_auth_server(
        node_tools, tmp, {f"http://127.0.0.1:{port}/mcp": {"scopes": ["tools"]}, audience: {"scopes": ["read"]}},
        [{"client_id": "erin", "client_secret": "erin-secret", "scope": "tools"},
         {"client_id": "moat", "client_secret": "moat-secret",
          "grant_types": [TOKEN_EXCHANGE, "authorization_code", "refresh_token"], "response_types": ["code"],
          "redirect_uris": [callback, f"http://127.0.0.1:{port}/oauth/signed-in"]}],
        authorization_code=True, exchange_audiences=[audience],
    )
    upstream = Upstream(auth.issuer, audience)
    upstream.server = serve_upstream(upstream, upstream_port)
    secrets = tmp / "secrets.toml"
    secrets.write_text('MOAT_CLIENT = "moat-secret"\n')
    secrets.chmod(0o600)
    moat = start_moat(moat_bin, tmp, port, f"""
secrets = "secrets.toml"

[plugins.fetch]
path = {json.dumps(str(plugin("fetch")))}
network = ["{upstream.url}"]
inject = [{{ host = "{upstream.url}", header = "Authorization", value = "Bearer ${{credential:tracker}}" }}]

[credentials.tracker]
hosts = ["{upstream.url}"]
exchange = {{ token_endpoint = "{auth.issuer}/token", client_id = "moat", client_secret = "${{secret:MOAT_CLIENT}}", audience = "{audience}" }}
consent = {{ authorization_endpoint = "{auth.issuer}/auth", token_endpoint = "{auth.issuer}/token", client_id = "moat", client_secret = "${{secret:MOAT_CLIENT}}", redirect_uri = "{callback}", scope = "read", resource = "{audience}", confirm_unproven = true }}

[audit]
path = "audit.jsonl"

[auth]
api_keys = {{ {", ".join(f'{name} = "sha256:{hashlib.sha256(key.encode()).hexdigest()}"' for name, key in KEYS.values())} }}
[auth.oauth]
issuer = "{auth.issuer}"
scopes = ["tools"]
sign_in = {{ client_id = "moat", client_secret = "${{secret:MOAT_CLIENT}}" }}
""")
    yield Setup(auth, moat, upstream)
    stop(moat.process)
    stop(auth.process)
    upstream.server.shutdown()


async def whoami(setup: Setup, bearer: str, person: Person | None, mode: str) -> tuple[str, bool]:
    async with Client(http_transport(setup.moat.url, {"Authorization": f"Bearer {bearer}"}), mode=mode,
                      read_timeout_seconds=60, elicitation_callback=person.elicit if person else None) as client:
        result = await client.call_tool("fetch_fetch", {"url": f"{setup.upstream.url}/whoami", "raw": True})
        return "\n".join(b.text for b in result.content if b.type == "text"), bool(result.is_error)


@pytest.mark.parametrize("mode", MODES)
async def test_one_caller_by_exchange_and_one_by_consent_are_each_seen_as_themselves(
        setup: Setup, mode: str) -> None:
    erin = setup.auth.token("erin", setup.moat.url)
    name, key = KEYS[mode]
    ada = Person(account=f"{name}-account")
    erin_asked = Person(account="erin-must-not-be-asked")
    (erin_text, erin_error), (ada_text, ada_error) = await asyncio.gather(
        whoami(setup, erin, erin_asked, mode), whoami(setup, key, ada, mode))
    assert not erin_error and "you are erin (through moat)" in erin_text, erin_text
    assert not ada_error and f"you are {name}-account" in ada_text, ada_text
    assert erin_asked.asked == [] and len(ada.asked) == 1
    # Again, together: erin's exchanged token and ada's consented one are kept, no one is asked.
    (erin_text, _), (ada_text, _) = await asyncio.gather(
        whoami(setup, erin, erin_asked, mode), whoami(setup, key, ada, mode))
    assert "you are erin (through moat)" in erin_text and f"you are {name}-account" in ada_text
    assert len(ada.asked) == 1
    # No credential in what the callers read, in moat's log or in its audit log, which names the
    # source each call used.
    tokens = {s.removeprefix("Bearer ") for s in setup.upstream.seen if s}
    assert len(tokens) >= 2
    audit = setup.moat.audit.read_text()
    for token in tokens:
        assert token not in erin_text + ada_text and token not in setup.moat.log() and token not in audit
    used = {(r["principal"], tuple(r.get("credentials", []))) for r in map(json.loads, audit.splitlines())}
    assert (f"key:{name}", ("tracker",)) in used, used
    assert any(not p.startswith("key:") and c == ("tracker",) for p, c in used), used
