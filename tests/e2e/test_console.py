"""The operators' console (`[console]`, served at `/console/` beside `/mcp`): an operator signs
in at the organisation's issuer, sees what moat serves and why each grant stands, calls a tool
from a form made from its schema, watches other clients' calls as they run and cancels one,
revokes a caller's consented credential, reads a failed reload's error; a person who is not an
operator, and a form posted without its token, change nothing.

Real parts: two `oidc-provider` servers (tests/npm/auth-server.mjs), the organisation's, where
operators and callers sign in (its sub `alice` is an operator, `bob` is not), and a third
party's, where a caller by API key consents; a loopback upstream that checks each token against
the third party's keys and answers with the account it names; the `fetch`, `shapes` and `chatty`
plugins; headless Chromium through Playwright, one browser context for each person, every page's
console errors collected; the Python `mcp` SDK as the other clients. Every page is saved as a
screenshot in target/console-screenshots/.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError
from mcp.types import CallToolResult, Tool
from playwright.async_api import Browser, BrowserContext, Page, Response, async_playwright, expect
from support import MODERN, TOKEN_FILE, free_port, http_transport, stop
from test_auth import AuthServer, Moat, node_tools, start_auth_server, start_moat
from test_consent import Person, consent_config
from test_consent_binding import launch, sign_in
from test_credentials import Upstream, serve_upstream

__all__ = ["node_tools"]  # the fixture, shared with test_auth

# Callers by API key: "ci" makes the slow calls, "dan" connects his account at the third party.
KEYS = {"ci": "moat_e2e_console_ci_0123456789abcdefghijklmno",
        "dan": "moat_e2e_console_dan_0123456789abcdefghijklmn"}
# moat's client at the organisation's issuer; written into moat.toml as it is, so the config
# page has a secret to mask.
SIGN_IN_SECRET = "console-sign-in-secret-0123456789"
SHOTS = Path(__file__).resolve().parents[2] / "target" / "console-screenshots"
# Every page an operator reads, by the name of its screenshot.
PAGES = {"overview": "/console/", "plugins": "/console/plugins", "plugin": "/console/plugins/shapes",
         "tool": "/console/tools/shapes_echo_person", "callers": "/console/callers",
         "live": "/console/live", "audit": "/console/audit", "credentials": "/console/credentials",
         "config": "/console/config"}
# The cells of /console/live's rows, read in one go (the page changes them as events arrive).
LIVE_ROWS = """rows => rows.map(row => ({id: row.dataset.call,
    principal: row.querySelector('.principal')?.textContent.trim(),
    tool: row.querySelector('.tool')?.textContent.trim(),
    duration: row.querySelector('.duration')?.textContent.trim(),
    outcome: row.querySelector('.outcome')?.textContent.trim() ?? ''}))"""


@dataclass
class Setup:
    org: AuthServer
    third_party: AuthServer
    moat: Moat
    upstream: Upstream
    config: Path
    moat_bin: Path
    shapes: Path

    @property
    def base(self) -> str:
        return self.moat.url.removesuffix("/mcp")

    async def until(self, condition: Callable[[], bool], what: str, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not happen within {seconds}s\nmoat's log:\n{self.moat.log()}")
            await asyncio.sleep(0.1)


@pytest.fixture(scope="module")
def setup(
    moat_bin: Path, plugin: Callable[[str], Path], node_tools: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("console")
    port, upstream_port = free_port(), free_port()
    base, audience = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{upstream_port}"
    callback = f"{base}/oauth/callback/tracker"
    for folder in ("org", "third", "share"):
        (tmp / folder).mkdir()
    org = start_auth_server(
        node_tools, tmp / "org", {f"{base}/mcp": {"scopes": ["tools"]}},
        [{"client_id": "moat-sign-in", "client_secret": SIGN_IN_SECRET, "scope": "tools",
          "grant_types": ["authorization_code"], "response_types": ["code"],
          "redirect_uris": [f"{base}/console/signed-in", f"{base}/oauth/signed-in"]}],
        authorization_code=True,
    )
    third_party = start_auth_server(
        node_tools, tmp / "third", {audience: {"scopes": ["read"]}},
        [{"client_id": "moat", "client_secret": "moat-secret", "scope": "read",
          "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
          "redirect_uris": [callback]}],
        authorization_code=True,
    )
    upstream = Upstream(third_party.issuer, audience)
    upstream.server = serve_upstream(upstream, upstream_port)
    # fetch sends each caller's consented "tracker" token; API-key callers confirm moat's page.
    moat = start_moat(moat_bin, tmp, port, consent_config(
        tmp, plugin("fetch"), upstream, third_party, callback, KEYS, "") + f"""
[auth.oauth]
issuer = "{org.issuer}"
scopes = ["tools"]
sign_in = {{ client_id = "moat-sign-in", client_secret = "{SIGN_IN_SECRET}" }}

[plugins.shapes]
path = {json.dumps(str(plugin("shapes")))}
files = [{{ host = "./share", guest = "/share", mode = "ro" }}]
network = ["https://api.example.org"]

[plugins.chatty]
path = {json.dumps(str(plugin("chatty")))}

[audit]
path = "audit.jsonl"

[console]
admins = ["alice", "group:ops", "key:deploy"]
""")
    yield Setup(org, third_party, moat, upstream, tmp / "moat.toml", moat_bin, plugin("shapes"))
    stop(moat.process)
    stop(org.process)
    stop(third_party.process)
    upstream.server.shutdown()


@dataclass
class Operator:
    """A browser context signed in to the console, and what its page's console reported."""

    setup: Setup
    context: BrowserContext
    page: Page
    errors: list[str] = field(default_factory=list)
    responses: list[Response] = field(default_factory=list)

    async def open(self, path: str, shot: str | None = None) -> Response:
        """Opens `path` of the console, saving a screenshot as `shot`."""
        response = await self.page.goto(f"{self.setup.base}{path}")
        assert response is not None, path
        if shot:
            await screenshot(self.page, shot)
        return response

    async def submit(self, button: str) -> Response:
        """Clicks a form's `button` and returns the answer the browser navigated to."""
        async with self.page.expect_navigation() as navigation:
            await self.page.click(button)
        return await navigation.value


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await launch(playwright)
        try:
            yield browser
        finally:
            await browser.close()


async def screenshot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


async def enter(setup: Setup, context: BrowserContext, account: str, shot: str | None = None) -> Page:
    """Signs `account` in to the console from the page a browser without a session gets, at the
    organisation's issuer; returns the page, once moat's signed-in page has moved it on to the
    overview."""
    page = await context.new_page()
    visited: list[str] = []
    page.on("framenavigated", lambda frame: visited.append(frame.url) if frame == page.main_frame else None)
    response = await page.goto(f"{setup.base}/console/")
    assert response is not None and response.status == 401, "the console answers a browser without a session 401"
    href = urllib.parse.urljoin(page.url, await page.get_attribute("a#sign-in", "href") or "")
    assert href == f"{setup.base}/console/sign-in", href
    if shot:
        await screenshot(page, shot)
    await page.click("a#sign-in")
    await page.wait_for_url(lambda url: url.startswith(setup.org.issuer))
    await sign_in(page, account)
    await page.wait_for_url(f"{setup.base}/console/", timeout=15_000)
    assert any(url.startswith(f"{setup.base}/console/signed-in") for url in visited), visited
    return page


async def operator(setup: Setup, browser: Browser, account: str = "alice") -> Operator:
    """A new browser context in which `account` signed in, with a fresh page whose console
    errors are collected (the sign-in's own pages, a 401 among them, are left out)."""
    context = await browser.new_context()
    await (await enter(setup, context, account)).close()
    page = await context.new_page()
    signed_in = Operator(setup, context, page)
    page.on("console", lambda m: signed_in.errors.append(f"{page.url}: {m.location.get('url')}: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda error: signed_in.errors.append(f"{page.url}: {error}"))
    page.on("response", lambda response: signed_in.responses.append(response))
    return signed_in


def client(setup: Setup, key: str, person: Person | None = None) -> Client:
    """An `mcp` client on the 2026-07-28 era, calling with the API key `key` names."""
    return Client(http_transport(setup.moat.url, {"Authorization": f"Bearer {KEYS[key]}"}), mode=MODERN,
                  read_timeout_seconds=60, elicitation_callback=person.elicit if person else None)


async def call(setup: Setup, key: str, tool: str, arguments: dict[str, Any],
               person: Person | None = None) -> CallToolResult:
    async with client(setup, key, person) as session:
        return await session.call_tool(tool, arguments)


async def heard(setup: Setup, key: str, tool: str, arguments: dict[str, Any]) -> str:
    """What the client heard of a call of `tool`: a result or an error."""
    async with client(setup, key) as session:
        try:
            result = await session.call_tool(tool, arguments)
        except MCPError as error:
            return f"an error: {error}"
        return f"a result, isError {result.is_error}: {text(result)}"


def text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


async def listed(setup: Setup) -> list[Tool]:
    """Every tool an MCP client lists, every page."""
    async with client(setup, "ci") as session:
        tools: list[Tool] = []
        cursor = None
        while True:
            page = await session.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools


async def running(page: Page, tool: str, principal: str, known: set[str]) -> str:
    """The id of a call of `tool` by `principal` that /console/live shows running, besides `known`."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        for row in await page.eval_on_selector_all("#live-calls tr[data-call]", LIVE_ROWS):
            if (row["tool"], row["principal"], row["outcome"]) == (tool, principal, "") and row["id"] not in known:
                return str(row["id"])
        await asyncio.sleep(0.1)
    rows = await page.eval_on_selector_all("#live-calls tr[data-call]", LIVE_ROWS)
    pytest.fail(f"/console/live showed no running call of {tool} by {principal} within 15s: {rows}")


def audited(setup: Setup) -> list[dict[str, Any]]:
    return [json.loads(line) for line in setup.moat.audit.read_text().splitlines()]


async def test_an_operator_signs_in_at_the_issuer_and_sees_each_plugin_and_why_its_grants_stand(
        setup: Setup) -> None:
    """The console sends a browser without a session to the issuer; back from it, alice holds a
    strict, HTTP-only session cookie and sees the overview, the plugins, and a plugin's digest, its
    grants with why they stand, and its tools."""
    tools = await listed(setup)
    version = subprocess.run([str(setup.moat_bin), "--version"], capture_output=True, text=True,
                             timeout=30).stdout.split()[1]
    async with chromium() as browser:
        context = await browser.new_context()
        page = await enter(setup, context, "alice", shot="signed-out")
        cookie = next((c for c in await context.cookies() if c["name"] == "__Host-moat-console"), None)
        assert cookie is not None, await context.cookies()
        assert (cookie["httpOnly"], cookie["secure"], cookie["sameSite"]) == (True, True, "Strict"), cookie
        assert await page.inner_text("#signed-in-as") == "alice"
        assert version in await page.inner_text("#version"), version
        assert (await page.inner_text("#uptime")).strip(), "the overview shows no uptime"
        assert (await page.inner_text("#plugin-count")).strip() == "3"
        assert (await page.inner_text("#tool-count")).strip() == str(len(tools)), [t.name for t in tools]
        assert await page.locator("svg#calls-chart").count() == 1

        await page.goto(f"{setup.base}/console/plugins")
        for name in ("fetch", "shapes", "chatty"):
            assert await page.locator(f'a[href$="/console/plugins/{name}"]').count() >= 1, f"no link to {name}"
        async with page.expect_navigation():
            await page.locator('a[href$="/console/plugins/shapes"]').first.click()
        digest = "sha256:" + hashlib.sha256(setup.shapes.read_bytes()).hexdigest()
        assert (await page.inner_text("#digest")).strip() == digest
        assert "shapes.wasm" in await page.inner_text("#source")
        assert await page.locator("#publisher").count() == 1
        assert "no policy is in force" in await page.inner_text("#allowed-by")
        links = await page.locator("ul#tools a").evaluate_all("links => links.map(a => a.href)")
        assert sorted(links) == sorted(f"{setup.base}/console/tools/{t.name}" for t in tools
                                       if t.name.startswith("shapes_")), links
        # One row per grant, with its fate and why: shapes has no manifest, so both stand.
        grants = [" ".join((await row.inner_text()).split()) for row in await page.locator("table#grants tr").all()]
        share = [row for row in grants if "/share" in row]
        network = [row for row in grants if "api.example.org" in row]
        no_manifest = "the plugin has no manifest, so the operator's grant stands"
        assert len(share) == 1 and "granted" in share[0] and no_manifest in share[0], grants
        assert len(network) == 1 and "granted" in network[0] and no_manifest in network[0], grants


async def test_an_operator_calls_a_tool_from_the_form_its_schema_makes_and_is_audited(setup: Setup) -> None:
    """The tool page shows the schemas MCP clients get and a form made from the input schema
    (a nested field, an enum with an empty choice, a number, a list one item a line); its answer
    is the CallToolResult of exactly what was filled in, and the call is audited as alice."""
    tool = next(t for t in await listed(setup) if t.name == "shapes_echo_person")
    sent = {"name": "Ada Lovelace", "age": 36, "favourite": "green", "tags": ["maths", "engines"]}
    async with chromium() as browser:
        alice = await operator(setup, browser)
        page = alice.page
        await alice.open(PAGES["tool"])
        assert "unchanged" in await page.inner_text("#description")
        assert json.loads(await page.text_content("pre#input-schema") or "") == tool.input_schema
        assert json.loads(await page.text_content("pre#output-schema") or "") == tool.output_schema
        form = page.locator("form#call-form")
        assert (await form.get_attribute("method") or "").lower() == "post"
        assert await form.locator('input[type=hidden][name="csrf"]').count() == 1
        await form.locator('input[name="arguments.p.name"]').fill(sent["name"])
        age = form.locator('input[name="arguments.p.age"]')
        assert await age.get_attribute("type") == "number"
        await age.fill("36")
        favourite = form.locator('select[name="arguments.p.favourite"]')
        choices = await favourite.locator("option").evaluate_all("options => options.map(o => o.value)")
        assert choices == ["", "red", "green", "blue"], "an optional enum: an empty choice, then its cases"
        await favourite.select_option("green")
        await form.locator('textarea[name="arguments.p.tags"]').fill("maths\nengines")
        await screenshot(page, "tool-form")
        response = await alice.submit("#call")
        assert response.status == 200, await page.content()
        assert "default-src 'none'" in (await response.all_headers()).get("content-security-policy", "")
        result = json.loads(await page.inner_text("pre#result"))
        await screenshot(page, "tool-result")
        assert result.get("isError") is False, result
        assert result.get("structuredContent") == sent, result
        assert result.get("content"), result

        await setup.until(lambda: any(r.get("principal") == "alice" and r.get("tool") == tool.name
                                      for r in audited(setup)), "the audit line of alice's call")
        assert [r["outcome"] for r in audited(setup) if r.get("principal") == "alice" and r.get("tool")] == ["ok"]
        query = urllib.parse.urlencode({"principal": "alice", "tool": tool.name, "outcome": ""})
        await alice.open(f"/console/audit?{query}", shot="audit-filtered")
        lines = page.locator("table#audit tr.audit-line")
        assert await lines.count() == 1, await page.inner_text("table#audit")
        cells = [(await lines.first.locator(f".{cell}").inner_text()).strip()
                 for cell in ("principal", "tool", "outcome")]
        assert cells == ["alice", tool.name, "ok"], cells
        # alice is a caller like any other now.
        await alice.open("/console/callers")
        assert await page.locator('table#callers tr[data-principal="alice"]').count() == 1
        assert alice.errors == []


async def test_other_clients_calls_are_seen_as_they_run_and_an_operator_cancels_one(setup: Setup) -> None:
    """Another client's call appears in /console/live while it runs and ends there as `ok`
    without reloading the page; a second one, cancelled from its row, ends at once with an error
    for its client, `cancelled` on the page and in the audit log."""
    async with chromium() as browser:
        alice = await operator(setup, browser)
        page = alice.page
        await alice.open(PAGES["live"])
        nap = asyncio.create_task(call(setup, "ci", "chatty_nap", {"ms": 3000}))
        first = await running(page, "chatty_nap", "key:ci", set())
        await screenshot(page, "live-running")
        row = page.locator(f'#live-calls tr[data-call="{first}"]')
        assert await row.locator(".cancel").count() == 1, "a running call has its cancel button"
        result = await asyncio.wait_for(nap, 30)
        assert not result.is_error and "3000" in text(result), result
        await expect(row.locator(".outcome")).to_have_text("ok", timeout=10_000)
        assert (await row.locator(".duration").inner_text()).strip(), "an ended call shows its duration"

        slow = asyncio.create_task(heard(setup, "ci", "chatty_nap", {"ms": 20000}))
        second = await running(page, "chatty_nap", "key:ci", {first})
        started = time.monotonic()
        response = await alice.submit(f'#live-calls tr[data-call="{second}"] .cancel')
        assert response.status < 400, await page.content()
        answer = await asyncio.wait_for(slow, 15)
        assert answer.startswith("an error:") and "cancelled" in answer, answer
        assert time.monotonic() - started < 15, answer
        await alice.open(PAGES["live"])
        # The outcome, and why it came to be.
        await expect(page.locator(f'#live-calls tr[data-call="{second}"] .outcome')).to_have_text(
            re.compile(r"^cancelled\b"), timeout=10_000)
        await setup.until(lambda: any(r.get("principal") == "key:ci" and r.get("outcome") == "cancelled"
                                      for r in audited(setup)), "the audit line of the cancelled call", 10)

        await alice.open("/console/callers")
        assert await page.locator('table#callers tr[data-principal="key:ci"]').count() == 1
        query = urllib.parse.urlencode({"principal": "key:ci", "outcome": "cancelled"})
        await alice.open(f"/console/audit?{query}")
        tools = await page.locator("table#audit tr.audit-line .tool").all_inner_texts()
        assert [t.strip() for t in tools] == ["chatty_nap"], tools
        assert alice.errors == []


async def test_a_revoked_credential_makes_its_caller_consent_again(setup: Setup) -> None:
    """A caller's credential, connected through moat's consent page, is listed in the console;
    revoked there, the caller's next call asks them to connect again."""
    whoami = {"url": f"{setup.upstream.url}/whoami", "raw": True}
    person = Person(account="dan-at-tracker")
    result = await call(setup, "dan", "fetch_fetch", whoami, person)
    assert not result.is_error and "you are dan-at-tracker" in text(result), text(result)
    assert person.named == ["key:dan"] and len(person.asked) == 1
    async with chromium() as browser:
        alice = await operator(setup, browser)
        page = alice.page
        await alice.open("/console/credentials")
        row = 'tr[data-principal="key:dan"][data-source="tracker"]'
        assert await page.locator(row).count() == 1, await page.inner_text("body")
        response = await alice.submit(f"{row} .revoke")
        assert response.status < 400, await page.content()
        await alice.open("/console/credentials")
        assert await page.locator(row).count() == 0, "the revoked credential is still listed"
        assert alice.errors == []
    # The next call has no credential to send: dan is asked to connect again.
    again = Person(account="dan-again")
    seen = len(setup.upstream.seen)
    result = await call(setup, "dan", "fetch_fetch", whoami, again)
    assert len(again.asked) == 1, "the caller whose credential was revoked is asked to consent again"
    assert not result.is_error and "you are dan-again" in text(result), text(result)
    assert setup.upstream.seen[seen:] and None not in setup.upstream.seen[seen:]


async def test_a_failed_reload_is_shown_with_its_caret_until_a_good_one(setup: Setup) -> None:
    """A moat.toml that does not parse: the overview shows the reload's error as moat logged it,
    caret and all, until a good reload; the config page masks the file's secret; its reload button
    reloads."""
    good = setup.config.read_text()
    failed, loaded = setup.moat.log().count("reload failed"), setup.moat.log().count("plugins loaded")
    setup.config.write_text(good + "\n[plugins.broken\npath = 1\n")
    try:
        await setup.until(lambda: setup.moat.log().count("reload failed") > failed, "the failed reload in the log")
        async with chromium() as browser:
            alice = await operator(setup, browser)
            await alice.open("/console/", shot="overview-reload-error")
            error = await alice.page.inner_text("#last-reload pre.reload-error")
            assert "^" in error and "[plugins.broken" in error, error
            # moat's log keeps each record on one line, its newlines written as \n.
            logged = error.strip("\n").replace("\n", "\\n")
            assert logged in setup.moat.log(), f"the page's error {logged!r} is not the one moat logged"
    finally:
        setup.config.write_text(good)
    await setup.until(lambda: setup.moat.log().count("plugins loaded") > loaded, "the reload of the fixed config")
    async with chromium() as browser:
        alice = await operator(setup, browser)
        page = alice.page
        await alice.open("/console/")
        assert await page.locator("#last-reload pre.reload-error").count() == 0, await page.inner_text("#last-reload")
        # The config page shows the file with its secret masked and its references as written.
        await alice.open(PAGES["config"])
        shown = await page.inner_text("pre#config")
        assert SIGN_IN_SECRET not in shown and "********" in shown, shown
        assert "${secret:TRACKER_CLIENT}" in shown and "group:ops" in shown, shown
        # Its reload button, with the form's token, reloads.
        loaded = setup.moat.log().count("plugins loaded")
        response = await alice.submit("#reload")
        assert response.status < 400, await page.content()
        await setup.until(lambda: setup.moat.log().count("plugins loaded") > loaded, "the operator's reload", 30)
        assert alice.errors == []


async def test_a_non_operator_is_refused_and_a_post_without_its_token_does_nothing(setup: Setup) -> None:
    """bob, signed in at the same issuer but no operator, gets 403 on every page; alice's own
    browser posting the reload form without its token, or with a made-up one, gets 403 and
    reloads nothing."""
    async with chromium() as browser:
        # bob signs in at the same issuer, and is no operator.
        bob = await enter(setup, await browser.new_context(), "bob")
        await screenshot(bob, "not-an-operator")
        for path in PAGES.values():
            response = await bob.goto(f"{setup.base}{path}")
            assert response is not None, path
            assert response.status == 403, f"{path} answered bob, who is no operator, {response.status}"
            assert "not an operator" in await bob.inner_text("body"), path
            assert "default-src 'none'" in (await response.all_headers()).get("content-security-policy", ""), path
        # alice's own form, its token taken out or made up: refused, and nothing reloads.
        alice = await operator(setup, browser)
        page = alice.page
        reloads = setup.moat.log().count("plugins loaded")
        token = "document.querySelector('#reload').form.querySelector('input[name=csrf]')"
        for forged in (f"{token}.remove()", f"{token}.value = 'made-up'"):
            await alice.open(PAGES["config"])
            await page.evaluate(forged)
            response = await alice.submit("#reload")
            assert response.status == 403, f"POST /console/reload after {forged} answered {response.status}"
        await asyncio.sleep(2)
        assert setup.moat.log().count("plugins loaded") == reloads, "a forged POST reloaded moat"


async def test_every_page_has_its_headers_and_no_console_error(setup: Setup) -> None:
    """Every page answers with its CSP, nosniff and no-store, shows its navigation and whom it is
    signed in as, and makes the browser report no error (a CSP violation would be one)."""
    async with chromium() as browser:
        alice = await operator(setup, browser)
        for name, path in PAGES.items():
            response = await alice.open(path)
            assert response.status == 200, f"{path} answered {response.status}"
            if name == "live":
                await alice.page.wait_for_timeout(1500)  # its script subscribes to the events
            await screenshot(alice.page, name)
            headers = await response.all_headers()
            csp = headers.get("content-security-policy", "")
            for directive in ("default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"):
                assert directive in csp, f"{path}: {directive} missing from {csp!r}"
            assert headers.get("x-content-type-options") == "nosniff", (path, headers)
            assert "no-store" in headers.get("cache-control", ""), (path, headers)
            assert await alice.page.locator("nav a").count() >= len(PAGES) - 2, f"{path}: the nav links"
            assert await alice.page.locator("h1").count() == 1, path
            assert await alice.page.inner_text("#signed-in-as") == "alice", path
        scripts = [r for r in alice.responses if r.url.endswith("/console/assets/console.js")]
        assert scripts and scripts[0].status == 200, [r.url for r in alice.responses]
        headers = await scripts[0].all_headers()
        assert "javascript" in headers.get("content-type", "") and headers.get("x-content-type-options") == "nosniff"
        assert alice.errors == [], alice.errors


async def test_moat_console_prints_a_link_that_signs_the_local_user_in_once(
        moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path) -> None:
    """`moat console` on the machine of a moat that takes the local token, with the default
    admins (`local`), prints a link that signs one browser in as `local`, once."""
    port = free_port()
    moat = start_moat(moat_bin, tmp_path, port, f"[plugins.echo]\npath = {json.dumps(str(plugin('echo')))}\n\n"
                      "[console]\n")
    base = f"http://127.0.0.1:{port}"
    try:
        done = subprocess.run([str(moat_bin), "console", "--url", base, "--token-file", str(TOKEN_FILE), "--no-open"],
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        link = next((word for word in done.stdout.split() if "/console/enter/" in word), "")
        assert link.startswith(f"{base}/console/enter/"), done.stdout
        async with chromium() as browser:
            page = await (await browser.new_context()).new_page()
            await page.goto(link)
            await page.wait_for_url(f"{base}/console/")
            assert await page.inner_text("#signed-in-as") == "local"
            again = await (await browser.new_context()).new_page()
            response = await again.goto(link)
            assert response is not None and response.status >= 400, "a used link signs in no one"
            assert await again.locator("#signed-in-as").count() == 0
    finally:
        stop(moat.process)


def test_the_console_may_share_the_metrics_listener(moat_bin: Path, plugin: Callable[[str], Path],
                                                     tmp_path: Path) -> None:
    """`[console] address` naming the metrics listener's address serves the console there, beside
    `/metrics` (which still answers), and not beside `/mcp`."""
    port, metrics = free_port(), free_port()
    moat = start_moat(moat_bin, tmp_path, port, f"[plugins.echo]\npath = {json.dumps(str(plugin('echo')))}\n\n"
                      f'[http]\nmetrics = "127.0.0.1:{metrics}"\n\n[console]\naddress = "127.0.0.1:{metrics}"\n')
    there = f"http://127.0.0.1:{metrics}"
    try:
        done = subprocess.run([str(moat_bin), "console", "--url", there, "--token-file", str(TOKEN_FILE), "--no-open"],
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        link = done.stdout.strip()
        assert link.startswith(f"{there}/console/enter/"), done.stdout
        with urllib.request.urlopen(link, timeout=10) as entered:
            cookie = entered.headers["set-cookie"].split(";")[0]
        request = urllib.request.Request(f"{there}/console/", headers={"Cookie": cookie})
        with urllib.request.urlopen(request, timeout=10) as overview:
            assert 'id="signed-in-as">local<' in overview.read().decode()
        with urllib.request.urlopen(f"{there}/metrics", timeout=10) as scraped:
            assert "moat_calls" in scraped.read().decode()
        with pytest.raises(urllib.error.HTTPError) as beside_mcp:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/console/enter/x", timeout=10)
        assert "console" not in beside_mcp.value.read().decode().lower(), "no console beside /mcp"
    finally:
        stop(moat.process)
