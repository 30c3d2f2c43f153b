"""A consent link connects only the person it was made for (the MCP specification's URL
elicitation security considerations; RFC 6749 §10.12 and RFC 9700 for the browser binding).

Each test is a hostile case that connected someone before moat bound its links: a link opened
by another person who is signed in at the third party, an answer from the third party carried to
another browser, a confirmation posted by another page, an API-key caller connected without
being asked, a link read out of moat's log or audit log.

Real parts: two `oidc-provider` servers (tests/npm/auth-server.mjs), the organisation's, whose
tokens moat accepts and where it signs browsers in, and the third party's, where people consent;
two loopback upstreams that check each token against the third party's keys and answer with the
account it names; headless Chromium through Playwright, one browser context for each person; the
Python `mcp` SDK as the client.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import ElicitResult
from playwright.async_api import Browser, Page, async_playwright
from support import MODERN, free_port, http_transport, stop
from test_auth import AuthServer, Moat, node_tools, start_auth_server, start_moat
from test_credentials import Upstream, serve_upstream

__all__ = ["node_tools"]  # the fixture, shared with test_auth

# Callers by API key: "tracker" connects none of them, "wiki" after they confirm moat's page.
KEYS = {"bob": "moat_e2e_binding_bob_0123456789abcdefghijklmn",
        "cy": "moat_e2e_binding_cy_0123456789abcdefghijklmno",
        "dan": "moat_e2e_binding_dan_0123456789abcdefghijklmn"}


@dataclass
class Setup:
    org: AuthServer
    third_party: AuthServer
    moat: Moat
    tracker: Upstream
    wiki: Upstream

    @property
    def base(self) -> str:
        return self.moat.url.removesuffix("/mcp")

    def oauth_token(self, sub: str) -> str:
        """An access token of the organisation's for moat, naming `sub`."""
        return self.org.sign(self.org.claims(self.moat.url, sub=sub, client_id="host"))


@pytest.fixture(scope="module")
def setup(
    moat_bin: Path, plugin: Callable[[str], Path], node_tools: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("binding")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    tracker_port, wiki_port = free_port(), free_port()
    tracker_audience, wiki_audience = f"http://127.0.0.1:{tracker_port}", f"http://127.0.0.1:{wiki_port}"
    for server in ("org", "third"):
        (tmp / server).mkdir()
    org = start_auth_server(
        node_tools, tmp / "org", {f"{base}/mcp": {"scopes": ["tools"]}},
        [{"client_id": "moat-sign-in", "client_secret": "sign-in-secret", "scope": "tools",
          "grant_types": ["authorization_code"], "response_types": ["code"],
          "redirect_uris": [f"{base}/oauth/signed-in"]}],
        authorization_code=True,
    )
    third_party = start_auth_server(
        node_tools, tmp / "third", {tracker_audience: {"scopes": ["read"]}, wiki_audience: {"scopes": ["read"]}},
        [{"client_id": "moat", "client_secret": "moat-secret", "scope": "read",
          "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
          "redirect_uris": [f"{base}/oauth/callback/tracker", f"{base}/oauth/callback/wiki"]}],
        authorization_code=True,
    )
    tracker, wiki = Upstream(third_party.issuer, tracker_audience), Upstream(third_party.issuer, wiki_audience)
    tracker.server = serve_upstream(tracker, tracker_port)
    wiki.server = serve_upstream(wiki, wiki_port)
    secrets = tmp / "secrets.toml"
    secrets.write_text('THIRD_PARTY = "moat-secret"\nSIGN_IN = "sign-in-secret"\n')
    secrets.chmod(0o600)
    hashes = ", ".join(f'{name} = "sha256:{hashlib.sha256(key.encode()).hexdigest()}"' for name, key in KEYS.items())

    def consent(name: str, upstream: Upstream, confirm: bool) -> str:
        return (f'{{ authorization_endpoint = "{third_party.issuer}/auth", '
                f'token_endpoint = "{third_party.issuer}/token", client_id = "moat", '
                f'client_secret = "${{secret:THIRD_PARTY}}", redirect_uri = "{base}/oauth/callback/{name}", '
                f'scope = "read", resource = "{upstream.audience}", issuer = "{third_party.issuer}", '
                f'confirm_unproven = {json.dumps(confirm)} }}')

    moat = start_moat(moat_bin, tmp, port, f"""
secrets = "secrets.toml"

[plugins.fetch]
path = {json.dumps(str(plugin("fetch")))}
network = ["{tracker.url}", "{wiki.url}"]
inject = [{{ host = "{tracker.url}", header = "Authorization", value = "Bearer ${{credential:tracker}}" }},
          {{ host = "{wiki.url}", header = "Authorization", value = "Bearer ${{credential:wiki}}" }}]

[credentials.tracker]
hosts = ["{tracker.url}"]
consent = {consent("tracker", tracker, False)}

[credentials.wiki]
hosts = ["{wiki.url}"]
consent = {consent("wiki", wiki, True)}

[audit]
path = "audit.jsonl"

[auth]
api_keys = {{ {hashes} }}
[auth.oauth]
issuer = "{org.issuer}"
scopes = ["tools"]
sign_in = {{ client_id = "moat-sign-in", client_secret = "${{secret:SIGN_IN}}" }}
""")
    yield Setup(org, third_party, moat, tracker, wiki)
    stop(moat.process)
    stop(org.process)
    stop(third_party.process)
    tracker.server.shutdown()
    wiki.server.shutdown()


async def call(setup: Setup, bearer: str, upstream: Upstream,
               elicit: Callable[[Any, Any], Awaitable[ElicitResult]] | None) -> tuple[str, bool]:
    """`fetch` of `upstream`'s /whoami by the caller `bearer` names, on the 2026-07-28 era."""
    async with Client(http_transport(setup.moat.url, {"Authorization": f"Bearer {bearer}"}), mode=MODERN,
                      read_timeout_seconds=60, elicitation_callback=elicit) as client:
        result = await client.call_tool("fetch_fetch", {"url": f"{upstream.url}/whoami", "raw": True})
        return "\n".join(b.text for b in result.content if b.type == "text"), bool(result.is_error)


async def sign_in(page: Page, account: str) -> None:
    """Signs in as `account` at an oidc-provider's development pages, and consents."""
    await page.fill("input[name=login]", account)
    await page.fill("input[name=password]", "any")
    await page.click("button[type=submit]")
    await page.click("button[type=submit]")  # the consent page's Continue


async def launch(playwright: Any) -> Browser:
    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing; `./dev test` installs it"
    return await playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])


def post(url: str, form: dict[str, str], cookie: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST")
    if cookie:
        request.add_header("Cookie", cookie)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def test_a_link_made_for_an_oauth_caller_connects_only_once_they_sign_in_as_themselves(setup: Setup) -> None:
    pages: list[str] = []

    async def elicit(_context: Any, params: Any) -> ElicitResult:
        assert params.url.startswith(f"{setup.base}/oauth/consent/"), params.url
        async with async_playwright() as playwright:
            browser = await launch(playwright)
            # vic, signed in at the third party and sent ada's link, opens it: moat signs him in
            # and stops there, before the third party could answer for his account.
            vic = await browser.new_page()
            await vic.goto(params.url)
            assert vic.url.startswith(setup.org.issuer), vic.url
            await sign_in(vic, "vic")
            await vic.wait_for_url(f"{setup.base}/oauth/signed-in?*")
            pages.append(await vic.inner_text("#message"))
            # ada opens it in her own browser and signs in as herself: on to the third party.
            ada = await (await browser.new_context()).new_page()
            await ada.goto(params.url)
            await sign_in(ada, "ada")
            await ada.wait_for_url(f"{setup.third_party.issuer}/**")
            await sign_in(ada, "ada-at-tracker")
            await ada.wait_for_url(f"{setup.base}/oauth/callback/tracker?*")
            pages.append(await ada.inner_text("#message"))
            await browser.close()
        return ElicitResult(action="accept")

    seen_before = len(setup.tracker.seen)
    text, error = await call(setup, setup.oauth_token("ada"), setup.tracker, elicit)
    assert pages[0] == ("This link was made for ada, and you signed in as vic. Nothing was connected: only "
                        "ada can connect their account with it."), pages
    assert pages[1].startswith('Your account at "tracker" is connected for ada.'), pages
    assert not error and "you are ada-at-tracker" in text, text
    assert "vic" not in json.dumps(setup.tracker.seen[seen_before:])
    assert "a consent link was opened by someone else: nothing connected" in setup.moat.log()


async def test_an_answer_carried_to_another_browser_connects_no_one(setup: Setup) -> None:
    refused: list[str] = []

    async def elicit(_context: Any, params: Any) -> ElicitResult:
        async with async_playwright() as playwright:
            browser = await launch(playwright)
            bob = await browser.new_page()
            await bob.goto(params.url)
            assert await bob.inner_text("#principal") == "key:bob"
            # A confirmation posted without the page's own cookie and token changes nothing.
            status, page = post(params.url, {"token": "made-up"})
            assert status == 403 and "did not come from the page this browser was shown" in page
            answers: list[str] = []

            async def hold(route: Any) -> None:
                """Follows the third party's redirects in bob's context, and keeps the one that
                would take his browser back to moat instead of following it."""
                url, response = route.request.url, await route.fetch(max_redirects=0)
                while response.status in (302, 303) and not answers:
                    url = urllib.parse.urljoin(url, response.headers["location"])
                    if url.startswith(f"{setup.base}/oauth/callback/"):
                        answers.append(url)
                    else:
                        response = await bob.context.request.get(url, max_redirects=0)
                await route.fulfill(status=200, body="held")

            await bob.click("#confirm")
            await bob.fill("input[name=login]", "bob-at-wiki")
            await bob.fill("input[name=password]", "any")
            await bob.click("button[type=submit]")
            await bob.wait_for_selector("button:has-text('Continue')")
            # The third party's answer, kept from bob's browser and opened in another one.
            await bob.route(lambda url: url.startswith(setup.third_party.issuer), hold)
            await bob.click("button[type=submit]")
            for _ in range(100):
                if answers:
                    break
                await bob.wait_for_timeout(100)
            assert answers, "the third party never sent bob's browser back"
            other = await (await browser.new_context()).new_page()
            await other.goto(answers[0])
            refused.append(await other.inner_text("#message"))
            await browser.close()
        # bob saw his page held: he gives up, and the call says so.
        return ElicitResult(action="decline")

    seen_before = len(setup.wiki.seen)
    text, error = await call(setup, KEYS["bob"], setup.wiki, elicit)
    assert refused == ["this answer reached another browser than the one that began connecting, so it "
                       "connects no one."], refused
    assert error and "declined to connect their account" in text, text
    assert setup.wiki.seen[seen_before:] == []


async def test_a_caller_by_api_key_is_connected_only_where_the_source_opts_in(setup: Setup) -> None:
    asked: list[Any] = []

    async def elicit(_context: Any, params: Any) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action="decline")

    seen_before = len(setup.tracker.seen)
    text, error = await call(setup, KEYS["cy"], setup.tracker, elicit)
    assert error and 'principal "key:cy" signed in with an API key, which no browser can prove' in text, text
    assert asked == [] and setup.tracker.seen[seen_before:] == []


async def test_the_link_reaches_the_caller_only_and_logs_hold_its_digest(setup: Setup) -> None:
    text, error = await call(setup, KEYS["dan"], setup.wiki, None)
    assert error, text
    start = text.index(f"open {setup.base}/oauth/consent/") + len("open ")
    link = text[start:].split(" ", 1)[0]
    digest = hashlib.sha256(link.encode()).hexdigest()[:12]
    secret = link.rsplit("/", 1)[1]
    time.sleep(0.5)  # the audit line is written as the call ends
    audit, log = setup.moat.audit.read_text(), setup.moat.log()
    assert secret not in audit and secret not in log
    assert f"the link given to the caller (sha256 {digest})" in audit
    # The link still works for the caller: moat's page names them.
    with urllib.request.urlopen(link, timeout=30) as response:
        assert "key:dan" in response.read().decode()


def test_an_address_that_hammers_the_pages_is_turned_away(setup: Setup) -> None:
    # Last in this file: its address (everyone's here, 127.0.0.1) waits a minute afterwards.
    statuses = []
    for n in range(70):
        try:
            with urllib.request.urlopen(f"{setup.base}/oauth/consent/made-up-{n}", timeout=30) as response:
                statuses.append(response.status)
        except urllib.error.HTTPError as error:
            statuses.append(error.code)
            if error.code == 429:
                assert int(error.headers["Retry-After"]) >= 1
                assert "Too many requests from this address" in error.read().decode()
    # The first ones are read (and refused as links moat never made), the rest turned away.
    assert statuses[0] == 400 and statuses[-1] == 429, statuses
    assert statuses.count(429) >= 10, statuses
