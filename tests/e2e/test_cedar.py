"""Policies in Cedar over a shared HTTP moat, with real clients in both protocol eras: tokens
from a real issuer (`oidc-provider`) carry the groups the policies read; the `fetch` plugin's
requests go to two counting upstreams on loopback, one of which contractors' calls may reach.

What is checked: a call decided on its arguments and on the tool's annotations, for each
caller's groups; an enterprise `forbid` beating moat.toml's `permit`; each caller's tools/list;
`reach` narrowing one plugin's requests per caller (the upstream counts what it got); the audit
naming the deciding policies; a typo refused at start and at reload (the old policies kept);
`moat policy test` failing on a wrong expectation.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from support import LEGACY, MODES, free_port, http_transport, stop, wait_for_port
from test_auth import AuthServer, node_tools, start_auth_server  # noqa: F401 (node_tools: a fixture)

CLIENTS = [
    {"client_id": "alice", "client_secret": "alice-secret", "scope": "tools", "groups": ["eng"]},
    {"client_id": "bob", "client_secret": "bob-secret", "scope": "tools", "groups": ["contractors"]},
    {"client_id": "moat", "client_secret": "moat-secret"},
]


@dataclass
class Upstream:
    """A loopback HTTP server that answers every GET and counts the paths it was asked."""

    server: ThreadingHTTPServer
    seen: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.server.server_address[1]


def serve_upstream(name: str) -> Upstream:
    upstream: Upstream

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            upstream.seen.append(self.path)
            body = f"{name} page {self.path}".encode()
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    upstream = Upstream(ThreadingHTTPServer(("127.0.0.1", 0), Handler))
    threading.Thread(target=upstream.server.serve_forever, daemon=True).start()
    return upstream


ENTERPRISE = """
@id("no-secrets-echoed")
@reason("the enterprise forbids echoing anything that looks like a secret")
forbid (principal, action == Moat::Action::"call_tool:echo_echo", resource)
when { context.arguments.message like "*secret*" };
"""


def team_policies(wiki: Upstream) -> str:
    return f"""
@id("engineers-everything")
permit (principal in Moat::Group::"eng", action, resource);

@id("contractors-read-only")
@reason("contractors may call only read-only tools")
forbid (principal in Moat::Group::"contractors", action in Moat::Action::"call_tool", resource)
unless {{ resource.annotations.read_only }};

@id("contractors-echo")
permit (principal in Moat::Group::"contractors", action == Moat::Action::"call_tool:echo_echo", resource);

@id("contractors-wiki-pages-only")
permit (principal in Moat::Group::"contractors", action == Moat::Action::"call_tool:fetch_fetch", resource)
when {{ context.arguments.url like "http://127.0.0.1:*/wiki/*" }};

@id("contractors-reach-the-wiki")
permit (principal in Moat::Group::"contractors", action == Moat::Action::"reach", resource in Moat::Plugin::"fetch")
when {{ resource.port == {wiki.port} && context.method == "GET" }};

@id("research-echoes")
permit (principal, action == Moat::Action::"call_tool:echo_echo", resource)
when {{ principal.claims has department && principal.claims.department == "research" }};
"""


@dataclass
class Setup:
    auth: AuthServer
    url: str
    folder: Path
    process: subprocess.Popen[bytes]
    wiki: Upstream
    git: Upstream

    def stderr(self) -> str:
        return (self.folder / "moat.stderr").read_text(errors="replace")

    def audit(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (self.folder / "audit.jsonl").read_text().splitlines()]

    def token(self, who: str) -> str:
        return self.auth.token(who, self.url)


def write_config(folder: Path, plugin: Callable[[str], Path], auth: AuthServer, wiki: Upstream,
                 git: Upstream) -> None:
    (folder / "team.cedar").write_text(team_policies(wiki))
    (folder / "enterprise.cedar").write_text(ENTERPRISE)
    (folder / "policy.toml").write_text('cedar = ["enterprise.cedar"]\n[[allow]]\nname = "*"\n')
    (folder / "moat.toml").write_text(f"""
[plugins.echo]
path = {json.dumps(str(plugin("echo")))}
[plugins.chatty]
path = {json.dumps(str(plugin("chatty")))}
[plugins.fetch]
path = {json.dumps(str(plugin("fetch")))}
network = ["http://127.0.0.1:{wiki.port}", "http://127.0.0.1:{git.port}"]

[audit]
path = "audit.jsonl"

[auth.oauth]
issuer = "{auth.issuer}"
scopes = ["tools"]

[policy]
cedar = ["team.cedar"]
claims = {{ department = "String" }}
""")


def serve(moat_bin: Path, folder: Path, port: int) -> subprocess.Popen[bytes]:
    with (folder / "moat.stderr").open("w") as errlog:
        return subprocess.Popen(
            [str(moat_bin), "serve", "--config", str(folder / "moat.toml"), "--policy",
             str(folder / "policy.toml"), "--http", f"127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errlog,
        )


@pytest.fixture(scope="module")
def setup(moat_bin: Path, plugin: Callable[[str], Path], node_tools: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    folder = tmp_path_factory.mktemp("cedar")
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    auth = start_auth_server(node_tools, folder, {url: {"scopes": ["tools"]}}, clients=CLIENTS)
    wiki, git = serve_upstream("wiki"), serve_upstream("git")
    write_config(folder, plugin, auth, wiki, git)
    process = serve(moat_bin, folder, port)
    wait_for_port(port, process, folder / "moat.stderr")
    yield Setup(auth, url, folder, process, wiki, git)
    stop(process)
    stop(auth.process)
    wiki.server.shutdown()
    git.server.shutdown()


async def call(setup: Setup, token: str, mode: str, tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    """Whether the call's result is an error, and its text."""
    async with Client(http_transport(setup.url, {"Authorization": f"Bearer {token}"}), mode=mode,
                      read_timeout_seconds=30) as client:
        result = await client.call_tool(tool, arguments)
    text = "\n".join(block.text for block in result.content if block.type == "text")
    return bool(result.is_error), text


async def tool_names(setup: Setup, token: str, mode: str) -> list[str]:
    async with Client(http_transport(setup.url, {"Authorization": f"Bearer {token}"}), mode=mode,
                      read_timeout_seconds=30) as client:
        return sorted(tool.name for tool in (await client.list_tools()).tools)


@pytest.mark.parametrize("mode", MODES)
async def test_a_call_is_decided_on_its_arguments_for_the_callers_group(setup: Setup, mode: str) -> None:
    bob = setup.token("bob")
    wiki = f"http://127.0.0.1:{setup.wiki.port}"
    failed, text = await call(setup, bob, mode, "fetch_fetch", {"url": f"{wiki}/wiki/home-{mode}"})
    assert not failed, text
    assert f"wiki page /wiki/home-{mode}" in text
    failed, text = await call(setup, bob, mode, "fetch_fetch", {"url": f"{wiki}/admin-{mode}"})
    assert failed
    assert text == "denied: no policy permits bob to call tool `fetch_fetch` with these arguments"
    assert f"/admin-{mode}" not in setup.wiki.seen
    # The same call is an engineer's to make.
    failed, text = await call(setup, setup.token("alice"), mode, "fetch_fetch", {"url": f"{wiki}/admin-{mode}"})
    assert not failed, text


@pytest.mark.parametrize("mode", MODES)
async def test_a_tools_annotations_decide_for_contractors(setup: Setup, mode: str) -> None:
    failed, text = await call(setup, setup.token("bob"), mode, "chatty_count", {"steps": 1, "pause": 0})
    assert failed
    assert text == "denied by policy `contractors-read-only`: contractors may call only read-only tools"
    failed, text = await call(setup, setup.token("alice"), mode, "chatty_count", {"steps": 1, "pause": 0})
    assert not failed, text


@pytest.mark.parametrize("mode", MODES)
async def test_the_enterprises_forbid_beats_moat_tomls_permit(setup: Setup, mode: str) -> None:
    alice = setup.token("alice")
    failed, text = await call(setup, alice, mode, "echo_echo", {"message": "my secret is 42"})
    assert failed
    assert text == ("denied by policy `no-secrets-echoed`: the enterprise forbids echoing anything "
                    "that looks like a secret")
    assert await call(setup, alice, mode, "echo_echo", {"message": "hello"}) == (False, "hello")


@pytest.mark.parametrize("mode", MODES)
async def test_each_caller_lists_what_some_arguments_could_be_allowed(setup: Setup, mode: str) -> None:
    alice = await tool_names(setup, setup.token("alice"), mode)
    assert "chatty_count" in alice and "fetch_fetch" in alice and "echo_echo" in alice
    bob = await tool_names(setup, setup.token("bob"), mode)
    # fetch_fetch is bob's for some URLs; echo_repeat no policy permits him; chatty's tools are
    # not read-only.
    assert bob == ["echo_echo", "fetch_fetch"]


@pytest.mark.parametrize("mode", MODES)
async def test_reach_narrows_one_plugins_requests_per_caller(setup: Setup, mode: str) -> None:
    git = f"http://127.0.0.1:{setup.git.port}/wiki/repo-{mode}"
    # The call itself is bob's (a /wiki/ URL), but its request to the git host is not.
    failed, text = await call(setup, setup.token("bob"), mode, "fetch_fetch", {"url": git})
    assert failed
    assert "denied" in text, text
    assert f"/wiki/repo-{mode}" not in setup.git.seen
    failed, text = await call(setup, setup.token("alice"), mode, "fetch_fetch", {"url": git})
    assert not failed, text
    assert setup.git.seen.count(f"/wiki/repo-{mode}") == 1
    record = [r for r in setup.audit() if r["tool"] == "fetch_fetch" and r["principal"] == "bob"
              and r["denied"]][-1]
    assert any("denied: no policy permits bob to reach" in d for d in record["denied"]), record


async def test_a_claim_declared_for_the_policies_comes_from_the_token(setup: Setup) -> None:
    claims = setup.auth.claims(setup.url, sub="dana", client_id="dana", groups=[])
    plain = setup.auth.sign(claims)
    research = setup.auth.sign({**claims, "department": "research"})
    assert await call(setup, research, LEGACY, "echo_echo", {"message": "hi"}) == (False, "hi")
    failed, text = await call(setup, plain, LEGACY, "echo_echo", {"message": "hi"})
    assert failed and text.startswith("denied: no policy permits dana"), text


async def test_the_audit_names_the_deciding_policies(setup: Setup) -> None:
    await call(setup, setup.token("bob"), LEGACY, "chatty_count", {"steps": 1, "pause": 0})
    await call(setup, setup.token("alice"), LEGACY, "echo_echo", {"message": "audited"})
    records = setup.audit()
    denied = [r for r in records if r["tool"] == "chatty_count" and r["principal"] == "bob"][-1]
    assert denied["outcome"] == "denied"
    assert denied["policies"] == ["contractors-read-only"]
    allowed = [r for r in records if r["tool"] == "echo_echo" and r["principal"] == "alice"][-1]
    assert allowed["outcome"] == "ok"
    assert allowed["policies"] == ["engineers-everything"]


def wait_for(predicate: Callable[[], bool], what: str, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {within} s for {what}")
        time.sleep(0.1)


async def test_a_typo_is_refused_at_reload_and_the_old_policies_kept(setup: Setup) -> None:
    team = setup.folder / "team.cedar"
    good = team.read_text()
    before = setup.stderr().count("reload failed")
    team.write_text(good + '\npermit (principal, action == Moat::Action::"call_tool:fetch_fetch", resource)\n'
                    'when { context.arguments.ulr like "x" };\n')
    try:
        wait_for(lambda: setup.stderr().count("reload failed") > before, "the reload failure")
        log = setup.stderr().split("reload failed")[-1]
        assert "team.cedar:26:8:" in log, log
        assert "did you mean `url`?" in log, log
        # The policies in force are still the old ones.
        failed, text = await call(setup, setup.token("bob"), LEGACY, "chatty_count", {"steps": 1, "pause": 0})
        assert failed and "contractors-read-only" in text
        assert await call(setup, setup.token("alice"), LEGACY, "echo_echo", {"message": "kept"}) == (False, "kept")
    finally:
        reloads = setup.stderr().count("reloading:")
        team.write_text(good)
        wait_for(lambda: setup.stderr().count("reloading:") > reloads, "the reload of the good policies")


def test_a_typo_fails_the_start_with_cedars_message(
    moat_bin: Path, plugin: Callable[[str], Path], setup: Setup, tmp_path: Path
) -> None:
    write_config(tmp_path, plugin, setup.auth, setup.wiki, setup.git)
    (tmp_path / "team.cedar").write_text(
        'permit (principal, action == Moat::Action::"call_tool:chatty_count", resource)\n'
        'when { context.arguments.steps like "1*" };\n')
    process = serve(moat_bin, tmp_path, free_port())
    assert process.wait(timeout=120) != 0
    log = (tmp_path / "moat.stderr").read_text()
    assert "team.cedar:2:8:" in log and "expected String but saw Long" in log, log


def policy_cli(moat_bin: Path, setup: Setup, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(moat_bin), "policy", *args, "--config", str(setup.folder / "moat.toml"),
         "--policy", str(setup.folder / "policy.toml")],
        capture_output=True, text=True, timeout=300,
    )


def test_policy_test_runs_cases_and_fails_on_a_wrong_expectation(moat_bin: Path, setup: Setup, tmp_path: Path) -> None:
    cases = tmp_path / "cases.toml"
    right = f"""
[[case]]
name = "contractors fetch wiki pages"
principal = {{ name = "bob", groups = ["contractors"] }}
action = "call_tool"
resource = "fetch_fetch"
arguments = {{ url = "http://127.0.0.1:1/wiki/x" }}
expect = "allow"
policies = ["contractors-wiki-pages-only"]

[[case]]
name = "contractors reach only the wiki"
principal = {{ name = "bob", groups = ["contractors"] }}
action = "reach"
tool = "fetch_fetch"
resource = "http://127.0.0.1:{setup.git.port}/wiki/x"
expect = "deny"
"""
    cases.write_text(right)
    done = policy_cli(moat_bin, setup, "test", str(cases))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed, 0 failed" in done.stdout
    cases.write_text(right + """
[[case]]
name = "a wrong expectation"
principal = { name = "alice", groups = ["eng"] }
action = "call_tool"
resource = "echo_echo"
arguments = { message = "a secret" }
expect = "allow"
""")
    done = policy_cli(moat_bin, setup, "test", str(cases))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL  a wrong expectation: expected allow, got deny" in done.stdout


def test_policy_schema_types_each_tools_arguments(moat_bin: Path, setup: Setup) -> None:
    done = policy_cli(moat_bin, setup, "schema")
    assert done.returncode == 0, done.stderr
    assert ('action "call_tool:echo_repeat" in [call_tool] appliesTo { principal: [Principal], '
            'resource: [Tool], context: { "arguments": {"message": String, "separator"?: String, '
            '"times": Long}') in done.stdout


def test_policy_check_validates_the_cedar_policies(moat_bin: Path, setup: Setup) -> None:
    done = policy_cli(moat_bin, setup, "check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Cedar: 7 policies in " in done.stdout
    assert "are valid for what is served" in done.stdout
