"""A caller's consent at a third party, given in a real browser: the first call of a tool
whose upstream needs the caller's own account sends the caller (by a URL elicitation) to moat's
page naming them and the source, which they confirm (callers by API key, where the source opts
in), then to the third party's consent page; once they sign in and consent, moat's callback
keeps their tokens and the call goes on, in both protocol eras.

Real parts: a second `oidc-provider` (tests/npm/auth-server.mjs) is the third party's
authorization server (authorization code with PKCE, refresh tokens, its own login and consent
pages); headless Chromium, driven by Playwright, is the person's browser; the upstream checks
each token against the third party's keys and answers with the account it names; the Python
`mcp` SDK is the client, whose elicitation callback opens the page.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import ElicitResult
from playwright.async_api import async_playwright
from support import LEGACY, MODES, free_port, http_transport, stop
from test_auth import AuthServer, Moat, node_tools, start_auth_server, start_moat
from test_credentials import Upstream, serve_upstream

__all__ = ["node_tools"]  # the fixture, shared with test_auth

# The callers, by API key.
KEYS = {"ada": "moat_e2e_consent_ada_0123456789abcdefghijklmn",
        "bob": "moat_e2e_consent_bob_0123456789abcdefghijklmn",
        "cy": "moat_e2e_consent_cy_0123456789abcdefghijklmno"}


@dataclass
class Setup:
    third_party: AuthServer
    moat: Moat
    upstream: Upstream
    config: Path
    # A stdio moat's, which takes the browser back on a loopback listener of its own.
    stdio_config: Path
    stdio_callback: str


@pytest.fixture(scope="module")
def setup(
    moat_bin: Path, plugin: Callable[[str], Path], node_tools: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("consent")
    port = free_port()
    upstream_port = free_port()
    audience = f"http://127.0.0.1:{upstream_port}"
    callback = f"http://127.0.0.1:{port}/oauth/callback/tracker"
    stdio_callback = f"http://127.0.0.1:{free_port()}/oauth/callback/tracker"
    # Access tokens live 33 s: moat refreshes them 30 s before they expire, so 3 s after.
    third_party = start_auth_server(
        node_tools, tmp, {audience: {"scopes": ["read"]}},
        [{"client_id": "moat", "client_secret": "moat-secret", "scope": "read",
          "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
          "redirect_uris": [callback, stdio_callback], "access_token_ttl": 33}],
        authorization_code=True,
    )
    upstream = Upstream(third_party.issuer, audience)
    upstream.server = serve_upstream(upstream, upstream_port)
    store = 'credential_store = { path = "credentials.sealed", key = "${secret:STORE_KEY}" }'
    toml = consent_config(tmp, plugin("fetch"), upstream, third_party, callback, KEYS, store) + \
        '[audit]\npath = "audit.jsonl"\n'
    moat = start_moat(moat_bin, tmp, port, toml)
    stdio = tmp / "stdio"
    stdio.mkdir()
    (stdio / "moat.toml").write_text(
        consent_config(stdio, plugin("fetch"), upstream, third_party, stdio_callback, KEYS, ""))
    yield Setup(third_party, moat, upstream, tmp / "moat.toml", stdio / "moat.toml", stdio_callback)
    stop(moat.process)
    stop(third_party.process)
    upstream.server.shutdown()


def consent_config(tmp: Path, fetch: Path, upstream: Upstream, third_party: AuthServer, callback: str,
                   keys: dict[str, str], store: str, confirm_unproven: bool = True) -> str:
    """moat.toml's text (and the secrets file it reads, in `tmp`): the fetch plugin sending each
    caller's consented token from "tracker" to `upstream`, callers by API key (who connect by
    confirming moat's page, as `confirm_unproven` allows), and `store`."""
    secrets = tmp / "secrets.toml"
    secrets.write_text('TRACKER_CLIENT = "moat-secret"\nSTORE_KEY = "' + "k" * 40 + '"\n')
    secrets.chmod(0o600)
    hashes = ", ".join(f'{name} = "sha256:{hashlib.sha256(key.encode()).hexdigest()}"' for name, key in keys.items())
    return f"""
secrets = "secrets.toml"
{store}

[plugins.fetch]
path = {json.dumps(str(fetch))}
network = ["{upstream.url}"]
inject = [{{ host = "{upstream.url}", header = "Authorization", value = "Bearer ${{credential:tracker}}" }}]

[credentials.tracker]
hosts = ["{upstream.url}"]
consent = {{ authorization_endpoint = "{third_party.issuer}/auth", token_endpoint = "{third_party.issuer}/token", client_id = "moat", client_secret = "${{secret:TRACKER_CLIENT}}", redirect_uri = "{callback}", scope = "read", resource = "{upstream.audience}", issuer = "{third_party.issuer}", confirm_unproven = {json.dumps(confirm_unproven)} }}

[auth]
api_keys = {{ {hashes} }}
"""


@dataclass
class Person:
    """Someone at a browser who consents as `account` whenever asked, and what they saw: moat's
    page naming the principal (confirmed), the third party's login and consent pages."""

    account: str
    asked: list[Any] = field(default_factory=list)
    # Where the browser landed: moat's callback, with the state and code it was given.
    landed: list[str] = field(default_factory=list)
    # Whom moat's pages said the link was for, and the page that said it was connected.
    named: list[str] = field(default_factory=list)
    connected: list[str] = field(default_factory=list)
    # What the client heard besides answers: notifications, as moat sent them.
    heard: list[Any] = field(default_factory=list)

    async def hear(self, message: Any) -> None:
        self.heard.append(message)

    async def elicit(self, _context: Any, params: Any) -> ElicitResult:
        self.asked.append(params)
        assert params.mode == "url", params
        chromium = shutil.which("chromium")
        assert chromium, "chromium is missing; `./dev test` installs it"
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = await browser.new_page()
            await page.goto(params.url)
            if "/oauth/consent/" in params.url:
                # moat's own page: it names whom the link is for, and connects only once confirmed.
                self.named.append(await page.inner_text("#principal"))
                await page.click("#confirm")
            await page.fill("input[name=login]", self.account)
            await page.fill("input[name=password]", "any")
            await page.click("button[type=submit]")
            await page.click("button[type=submit]")  # the consent page's Continue
            await page.wait_for_url("**/oauth/callback/tracker?*")
            self.landed.append(page.url)
            self.connected.append(await page.inner_text("#message"))
            await browser.close()
        return ElicitResult(action="accept")


async def whoami(setup: Setup, caller: str, person: Person | None, mode: str) -> tuple[str, bool]:
    callback = person.elicit if person else None
    async with Client(http_transport(setup.moat.url, {"Authorization": f"Bearer {KEYS[caller]}"}), mode=mode,
                      read_timeout_seconds=60, elicitation_callback=callback,
                      message_handler=person.hear if person else None) as client:
        result = await client.call_tool("fetch_fetch", {"url": f"{setup.upstream.url}/whoami", "raw": True})
        return "\n".join(b.text for b in result.content if b.type == "text"), bool(result.is_error)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.parametrize("mode", MODES)
async def test_each_caller_consents_once_in_the_browser_and_is_seen_as_themselves(setup: Setup, mode: str) -> None:
    caller = "ada" if mode == LEGACY else "bob"
    person = Person(account=f"{caller}-{mode}")
    text, error = await whoami(setup, caller, person, mode)
    assert not error and f"you are {caller}-{mode}" in text, text
    assert len(person.asked) == 1
    # moat's page and the result name the principal and the source; so does the question.
    assert person.named == [f"key:{caller}"]
    assert person.connected == [f'Your account at "tracker" is connected for key:{caller}. You can close this '
                                "window and go back to your conversation."]
    assert f"This tool acts for key:{caller} at " in person.asked[0].message
    if mode == LEGACY:
        # The session is told the page is done, naming the elicitation that sent them there.
        completed = [m.params.elicitation_id for m in person.heard
                     if getattr(m, "method", None) == "notifications/elicitation/complete"]
        assert completed == [person.asked[0].elicitation_id], person.heard
    # The elicited page is moat's own; the browser came back from the third party with PKCE.
    assert person.asked[0].url.startswith(setup.moat.url.removesuffix("/mcp") + "/oauth/consent/")
    assert urllib.parse.urlparse(person.landed[0]).path == "/oauth/callback/tracker"
    # Again: the kept token, and no question.
    text, error = await whoami(setup, caller, person, mode)
    assert not error and f"you are {caller}-{mode}" in text, text
    assert len(person.asked) == 1
    # A link is good once: the browser's own callback, replayed, is refused.
    status, page = get(person.landed[0])
    assert status == 400 and "this link was used already, has expired, or was not made by this moat" in page


async def test_a_made_up_state_or_an_error_connects_no_one(setup: Setup) -> None:
    callback = setup.moat.url.removesuffix("/mcp") + "/oauth/callback/tracker"
    status, page = get(f"{callback}?state=made-up&code=whatever")
    assert status == 400 and "was not made by this moat" in page
    status, page = get(f"{callback}?error=access_denied&error_description=no%20thanks")
    assert status == 400 and "The authorization server said: no thanks" in page


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_that_cannot_open_a_page_is_told_where_to_go(setup: Setup, mode: str) -> None:
    before = len(setup.upstream.seen)
    text, error = await whoami(setup, "cy", None, mode)
    assert error
    assert 'the credential "tracker" needs the caller to connect their account' in text, text
    assert f"open {setup.moat.url.removesuffix('/mcp')}/oauth/consent/" in text, text
    assert len(setup.upstream.seen) == before


async def test_an_expired_token_is_refreshed_without_asking(setup: Setup) -> None:
    # ada connected in the first test, with a token that lives 33 s and is refreshed after 3.
    await asyncio.sleep(4)
    seen_before = {s for s in setup.upstream.seen if s}
    person = Person(account="not-asked")
    text, error = await whoami(setup, "ada", person, LEGACY)
    assert not error and "you are ada-legacy" in text, text
    assert person.asked == []
    assert setup.upstream.seen[-1] not in seen_before, "the refreshed token is a new one"


@pytest.mark.parametrize("mode", MODES)
async def test_a_stdio_user_consents_through_moat_s_own_loopback_listener(
        setup: Setup, moat_bin: Path, mode: str, tmp_path: Path) -> None:
    person = Person(account=f"me-{mode}")
    params = StdioServerParameters(command=str(moat_bin), args=["serve", "--config", str(setup.stdio_config)])
    with (tmp_path / "stderr").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=60,
                          elicitation_callback=person.elicit) as client:
            for _ in range(2):
                result = await client.call_tool("fetch_fetch", {"url": f"{setup.upstream.url}/whoami", "raw": True})
                text = "\n".join(b.text for b in result.content if b.type == "text")
                assert not result.is_error and f"you are me-{mode}" in text, text
    # Asked once, and the browser came back to the stdio moat itself.
    assert len(person.asked) == 1
    assert person.landed[0].startswith(setup.stdio_callback + "?"), person.landed
    assert f"listening on {setup.stdio_callback} for consent callbacks" in (
        tmp_path / "stderr").read_text()


def credentials(moat_bin: Path, setup: Setup, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(moat_bin), "credentials", *args, "--config", str(setup.config)],
                          capture_output=True, text=True, timeout=60)


async def test_the_operator_lists_and_revokes_consented_credentials(setup: Setup, moat_bin: Path) -> None:
    listed = credentials(moat_bin, setup, "list")
    assert listed.returncode == 0, listed.stderr
    assert "key:ada\ttracker\tyes" in listed.stdout and "key:bob\ttracker\tyes" in listed.stdout, listed.stdout
    assert "key:cy" not in listed.stdout
    # The store holds no token in clear, nor does the listing.
    sealed = (setup.config.parent / "credentials.sealed").read_bytes()
    for token in {s.removeprefix("Bearer ") for s in setup.upstream.seen if s}:
        assert token.encode() not in sealed and token not in listed.stdout
    revoked = credentials(moat_bin, setup, "revoke", "key:bob", "tracker")
    assert revoked.returncode == 0, revoked.stderr
    assert "key:bob" not in credentials(moat_bin, setup, "list").stdout
    again = credentials(moat_bin, setup, "revoke", "key:bob", "tracker")
    assert again.returncode != 0 and 'holds no credential of principal "key:bob" from "tracker"' in again.stderr
    # The running moat reads the store again: bob is asked to connect once more.
    person = Person(account="bob-again")
    text, error = await whoami(setup, "bob", person, MODES[1])
    assert not error and "you are bob-again" in text, text
    assert len(person.asked) == 1
