"""A plugin author's path in Rust, Python, JavaScript and TypeScript: `moat new`, `moat build`
(cargo, componentize-py, or esbuild and componentize-js, then the WIT docs and manifest embedded), the
project's own test, and the tool served to the Python `mcp` client with its description from the
WIT doc comments; then what the Python and TypeScript guest SDKs make and ask the client, in both
protocol eras.

Environment:
  cargo with the wasm32-wasip2 target (`./dev test` adds it); the Rust project's crates come from
  crates.io
  componentize-py on PATH or in the virtualenv beside this Python (tests/e2e/requirements.txt)
  npm and node on PATH; the JavaScript project's packages come from the npm registry (or its
  cache, which `./dev test` filled for tests/js)
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import LOG_LEVEL_META_KEY, CreateMessageResult, ElicitResult, ListRootsResult, Root, TextContent
from support import LEGACY, MODERN, MODES, RawServer
from test_protocol import MODERN_META

# The toolchains: componentize-py from this Python's virtualenv, node and npm from PATH.
TOOL_PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def run(*args: str | Path, cwd: Path, moat_bin: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=os.pathsep.join([str(moat_bin.parent), TOOL_PATH]))
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


def written(moat: Path, folder: Path, name: str, lang: str, files: dict[str, str]) -> Path:
    """A `moat new NAME --lang LANG` project in `folder`, with `files` (paths in it) written over."""
    run(moat, "new", name, "--lang", lang, cwd=folder, moat_bin=moat)
    project = folder / name
    for path, text in files.items():
        (project / path).write_text(text)
    return project


async def served_greet(moat_bin: Path, component: Path, tool: str) -> tuple[str | None, str]:
    """The description of `tool` and its answer to "moat", from a `moat serve COMPONENT`."""
    params = StdioServerParameters(command=str(moat_bin), args=["serve", str(component)])
    async with Client(stdio_client(params), read_timeout_seconds=120) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool(tool, {"name": "moat"})
        return tools[tool].description, result.content[0].text


MANIFESTS = {"rust": "Cargo.toml", "python": "pyproject.toml", "javascript": "package.json", "typescript": "package.json"}
TESTS = {"rust": ["cargo", "test", "-q"], "python": [sys.executable, "-m", "unittest", "-q"]}


@pytest.mark.parametrize("lang", MANIFESTS)
async def test_new_build_test_and_serve(moat_bin: Path, tmp_path: Path, lang: str) -> None:
    moat = moat_bin.resolve()
    started = time.monotonic()
    run(moat, "new", "hello-tools", "--lang", lang, cwd=tmp_path, moat_bin=moat)
    project = tmp_path / "hello-tools"
    manifest = project / MANIFESTS[lang]
    assert manifest.is_file() and (project / "wit/hello-tools.wit").is_file()
    # No `npm install` first: `moat build` runs it in a project that has no node_modules.
    built = run(moat, "build", cwd=project, moat_bin=moat)
    assert "carries the docs of 1 of its" in built.stderr and "permission manifest" in built.stderr
    if MANIFESTS[lang] == "package.json":
        assert "running `npm install` there" in built.stderr and (project / "node_modules").is_dir()
    if lang == "typescript":
        run("npm", "run", "check", cwd=project, moat_bin=moat)
    component = project / "build/hello-tools.wasm"

    # The project's own test calls the component through moat.
    run(*TESTS.get(lang, ["npm", "test"]), cwd=project, moat_bin=moat)

    description, answer = await served_greet(moat, component, "hello_tools_greet")
    assert answer == "Hello, moat!"
    assert description is not None and description.startswith("Greets `name`."), description
    report = json.loads(run(moat, "inspect", "--json", component, cwd=project, moat_bin=moat).stdout)
    assert report["manifest"] == {"files": [], "env": [], "network": []}
    assert report["summary"].startswith("What the hello-tools plugin is for")
    print(f"{lang}: new → build → test → served in {time.monotonic() - started:.1f} s")


async def test_python_is_all_a_python_plugin_needs(moat_bin: Path, tmp_path: Path) -> None:
    """With no componentize-py on PATH, the first `moat build` installs the pinned one in a
    virtualenv in moat's cache, saying so, and later builds reuse it."""
    moat = moat_bin.resolve()
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not (Path(d) / "componentize-py").exists()]
    env = dict(os.environ, PATH=os.pathsep.join([str(moat.parent), *path]),
               MOAT_CACHE_DIR=str(tmp_path / "cache"))

    def build(project: Path) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(moat), "build"], capture_output=True, text=True, timeout=900,
                              cwd=project, env=env)
        assert done.returncode == 0, done.stderr
        return done

    made = subprocess.run([str(moat), "new", "hello-py", "--lang", "python"], capture_output=True,
                          text=True, cwd=tmp_path, env=env)
    assert made.returncode == 0, made.stderr
    assert "pip install" not in made.stderr, made.stderr
    first = build(tmp_path / "hello-py")
    assert "componentize-py is not on PATH: installing componentize-py 0.25.1" in first.stderr
    venv = tmp_path / "cache/toolchains/componentize-py-0.25.1"
    assert (venv / "bin/python").exists()
    again = build(tmp_path / "hello-py")
    assert "installing" not in again.stderr, again.stderr
    _, answer = await served_greet(moat, tmp_path / "hello-py/build/hello-py.wasm", "hello_py_greet")
    assert answer == "Hello, moat!"
    # componentize-py's own export is no tool, and nothing to warn of on every call.
    called = subprocess.run([str(moat), "call", "build/hello-py.wasm", "hello_py_greet", '{"name": "x"}'],
                            capture_output=True, text=True, cwd=tmp_path / "hello-py", env=env)
    assert called.returncode == 0 and "Hello, x!" in called.stdout, called.stderr
    assert "exports#init" not in called.stderr and "WARN" not in called.stderr, called.stderr


def test_new_refuses_a_bad_name_and_an_existing_folder(moat_bin: Path, tmp_path: Path) -> None:
    bad = subprocess.run([str(moat_bin), "new", "Hello_Tools", "--lang", "python"], capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode != 0 and "is not a plugin name" in bad.stderr
    (tmp_path / "taken").mkdir()
    taken = subprocess.run([str(moat_bin), "new", "taken", "--lang", "python"], capture_output=True, text=True, cwd=tmp_path)
    assert taken.returncode != 0 and "exists already" in taken.stderr


def test_build_outside_a_project_says_what_it_looks_for(moat_bin: Path, tmp_path: Path) -> None:
    done = subprocess.run([str(moat_bin), "build", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode != 0
    assert "no Cargo.toml, pyproject.toml or package.json" in done.stderr


SDK_WIT = """package local:sdk-tour@0.1.0;

/// What the Python guest SDK makes.
world sdk-tour {
    import moat:plugin/log@0.1.0;
    import moat:plugin/progress@0.1.0;
    use moat:plugin/content@0.1.0.{content-block};

    /// Logs, reports progress and returns one block of each kind.
    export tour: func() -> list<content-block>;
}
"""

SDK_APP = '''
import logging

import moat_plugin
import wit_world

log = moat_plugin.logger("tour")


class WitWorld(wit_world.WitWorld):
    def tour(self):
        log.debug("starting")
        log.warning("half a %s", "warning")
        logging.getLogger("elsewhere").error("not through moat")
        moat_plugin.progress(1, 2, "one")
        moat_plugin.progress(2, 2)
        return [
            moat_plugin.text("hello"),
            moat_plugin.image(b"\\x89PNG", "image/png"),
            moat_plugin.audio(b"RIFF", "audio/wav"),
            moat_plugin.link("file:///a.txt", "a", description="the a file"),
            moat_plugin.resource("mem://note", "a note", "text/plain"),
            moat_plugin.resource("mem://raw", b"\\x00\\x01"),
        ]
'''


async def test_the_python_sdk_logs_reports_progress_and_makes_content(moat_bin: Path, tmp_path: Path) -> None:
    moat = moat_bin.resolve()
    project = written(moat, tmp_path, "sdk-tour", "python", {"wit/sdk-tour.wit": SDK_WIT, "app.py": SDK_APP})
    run(moat, "build", cwd=project, moat_bin=moat)

    logs: list[tuple[str, str]] = []
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_log(params: Any) -> None:
        logs.append((params.level, params.data))

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    params = StdioServerParameters(command=str(moat), args=["serve", str(project / "build/sdk-tour.wasm")])
    errlog = tmp_path / "moat.stderr"
    with errlog.open("w") as stderr:
        client = Client(stdio_client(params, errlog=stderr), mode=MODERN, logging_callback=on_log, read_timeout_seconds=120)
        async with client:
            meta = {LOG_LEVEL_META_KEY: "debug"}
            result = await client.call_tool("sdk_tour_tour", {}, progress_callback=on_progress, meta=meta)
            for _ in range(50):  # the callbacks may run a moment after the result
                if len(logs) >= 2:
                    break
                await asyncio.sleep(0.1)
    blocks = [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]
    assert blocks == [
        {"type": "text", "text": "hello"},
        {"type": "image", "data": "iVBORw==", "mimeType": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {"type": "resource_link", "uri": "file:///a.txt", "name": "a", "description": "the a file"},
        {"type": "resource", "resource": {"uri": "mem://note", "mimeType": "text/plain", "text": "a note"}},
        {"type": "resource", "resource": {"uri": "mem://raw", "blob": "AAE="}},
    ], blocks
    # Only the SDK's logger goes to the client; another one stays in the guest's stderr.
    assert logs == [("debug", "starting"), ("warning", "half a warning")], logs
    assert reports == [(1, 2, "one"), (2, 2, None)]
    # The client left right after its call, while moat was making the next call's instance.
    assert "panicked" not in errlog.read_text(), errlog.read_text()


# What the Python and TypeScript askers both declare: the interview, and the form it asks for by
# name (a named interface: componentize-py binds no other).
INTERVIEW = """
    /// Says what the client can be asked, then asks it a form, a typed form, its model and its
    /// roots one at a time, and a form and the roots at once.
    export interview: func(topic: string) -> result<string, string>;

    export forms;
"""

FORMS = """
/// The forms the plugin asks for by name.
interface forms {
    /// Where to send the report.
    ///
    /// email: the address.
    /// copies: how many copies.
    contact: func(email: string, copies: option<u32>);
}
"""

ASKER_WIT = (
    """package local:asker@0.1.0;

/// What the Python guest SDK asks the client.
world asker {
    import moat:plugin/client@0.1.0;
    import moat:plugin/tasks@0.1.0;
    import moat:plugin/resources@0.1.0;
"""
    + INTERVIEW
    + """
    /// Says whether it goes on as a task.
    export later: func(label: string) -> string;

    /// Says that the status resource changed.
    export touch: func();

    /// Asks for the roots twice under one key.
    export twice: func() -> result<string, string>;

    export resources;
    export prompts;
}

/// What the plugin offers as prompts.
interface prompts {
    use moat:plugin/prompt@0.1.0.{message};

    /// Asks for a review of `topic`.
    ///
    /// topic: what to review.
    review: func(topic: string) -> list<message>;
}

/// What the plugin serves as resources.
interface resources {
    /// How the plugin is.
    /// @uri status
    status: func() -> string;
}
"""
    + FORMS
)

ASKER_APP = '''
import json

import moat_plugin
import wit_world
from moat_plugin import question
from wit_world import exports


class WitWorld(wit_world.WitWorld):
    def interview(self, topic):
        can = sorted(moat_plugin.capabilities())
        name = moat_plugin.elicit(
            f"Who asks about {topic}?",
            {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        )
        contact = moat_plugin.elicit_typed("contact", "Where to?")
        said = moat_plugin.sample(
            [("user", f"One word on {topic}"), ("assistant", moat_plugin.text("Ready.")), "Go"],
            system_prompt="Be brief.",
            max_tokens=20,
        )
        roots = moat_plugin.roots()
        both = moat_plugin.ask(
            {"again": question.form("Again?", '{"type": "object", "properties": {"yes": {"type": "boolean"}}}')},
            where=question.roots(),
        )
        return json.dumps({"can": can, "name": name, "contact": contact, "said": said, "roots": roots, "both": both})

    def later(self, label):
        return f"{label}: {'a task' if moat_plugin.detach() else 'at once'}"

    def touch(self):
        moat_plugin.updated("status")

    def twice(self):
        moat_plugin.ask(where=question.roots())
        moat_plugin.ask(where=question.roots())
        return "asked twice"


class Prompts(exports.Prompts):
    def review(self, topic):
        return [
            moat_plugin.message("user", f"Review {topic}."),
            moat_plugin.message("assistant", moat_plugin.link("file:///review.md", "review")),
        ]


class Resources(exports.Resources):
    def status(self):
        return "calm"


class Forms(exports.Forms):
    def contact(self, email, copies):
        raise NotImplementedError("a form, never called")
'''


@pytest.fixture(scope="module")
def asker(moat_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Python plugin above, made with `moat new` and `moat build`."""
    moat = moat_bin.resolve()
    files = {"wit/asker.wit": ASKER_WIT, "app.py": ASKER_APP}
    project = written(moat, tmp_path_factory.mktemp("asker"), "asker", "python", files)
    run(moat, "build", cwd=project, moat_bin=moat)
    return project / "build/asker.wasm"


TS_ASKER_WIT = (
    """package local:asker@0.1.0;

/// What the TypeScript guest SDK asks the client.
world asker {
    import moat:plugin/client@0.1.0;
"""
    + INTERVIEW
    + "}\n"
    + FORMS
)

TS_ASKER_APP = """import { ask, capabilities, elicit, elicitTyped, question, roots, sample } from "./moat/client";

export function interview(topic: string): string {
    const can = [...capabilities()].sort();
    const name = elicit(`Who asks about ${topic}?`, {
        type: "object",
        properties: { name: { type: "string" } },
        required: ["name"],
    });
    const contact = elicitTyped("contact", "Where to?");
    const said = sample([["user", `One word on ${topic}`], ["assistant", { tag: "text", val: "Ready." }], "Go"], {
        systemPrompt: "Be brief.",
        maxTokens: 20,
    });
    const where = roots();
    const both = ask({
        again: question.form("Again?", '{"type": "object", "properties": {"yes": {"type": "boolean"}}}'),
        where: question.roots(),
    });
    return JSON.stringify({ can, name, contact, said, roots: where, both });
}

export const forms = {
    contact(_email: string, _copies: number | undefined): void {
        throw "a form, never called";
    },
};
"""


@pytest.fixture(scope="module")
def ts_asker(moat_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The TypeScript plugin above, made with `moat new` (which writes moat/client.ts) and `moat build`."""
    moat = moat_bin.resolve()
    files = {
        "wit/asker.wit": TS_ASKER_WIT,
        "plugin.ts": TS_ASKER_APP,
        # As a project made by an older moat would hold it: the build writes this moat's instead.
        "moat/client.ts": "// an older SDK, which tsc would refuse the plugin's imports from\n",
    }
    project = written(moat, tmp_path_factory.mktemp("ts-asker"), "asker", "typescript", files)
    sdk = project / "moat/client.ts"
    run("npm", "install", "--prefer-offline", "--no-audit", "--no-fund", cwd=project, moat_bin=moat)
    run(moat, "build", cwd=project, moat_bin=moat)
    assert "export function elicit(" in sdk.read_text()
    return project / "build/asker.wasm"


ASKERS = {"python": "asker", "typescript": "ts_asker"}


class Answers:
    """The client's side of an interview: what each callback was asked, and its answers."""

    def __init__(self) -> None:
        self.forms: list[Any] = []
        self.samplings: list[Any] = []

    async def elicit(self, _context: Any, params: Any) -> ElicitResult:
        self.forms.append(params)
        if params.message == "Where to?":
            return ElicitResult(action="accept", content={"email": "ada@example.org", "copies": 2})
        if params.message == "Again?":
            return ElicitResult(action="decline")
        return ElicitResult(action="accept", content={"name": "Ada"})

    async def sample(self, _context: Any, params: Any) -> CreateMessageResult:
        self.samplings.append(params)
        return CreateMessageResult(role="assistant", content=TextContent(type="text", text="Sandboxed."), model="echo-1")

    async def roots(self, _context: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri="file:///work", name="work")])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("lang", ASKERS)
async def test_the_sdks_ask_the_client(
    moat_bin: Path, request: pytest.FixtureRequest, tmp_path: Path, lang: str, mode: str
) -> None:
    asker = request.getfixturevalue(ASKERS[lang])
    answers = Answers()
    params = StdioServerParameters(command=str(moat_bin), args=["serve", str(asker)])
    with (tmp_path / "moat.stderr").open("w") as errlog:
        client = Client(
            stdio_client(params, errlog=errlog),
            mode=mode,
            read_timeout_seconds=120,
            elicitation_callback=answers.elicit,
            sampling_callback=answers.sample,
            list_roots_callback=answers.roots,
        )
        async with client:
            result = await client.call_tool("asker_interview", {"topic": "moats"})
            later = await client.call_tool("asker_later", {"label": "now"}) if lang == "python" else None
    assert not result.is_error, result
    said = json.loads(result.content[0].text)
    assert said["can"] == ["elicitation", "roots", "sampling"]
    assert said["name"] == {"action": "accept", "content": {"name": "Ada"}}
    assert said["contact"] == {"action": "accept", "content": {"email": "ada@example.org", "copies": 2}}
    assert said["said"]["content"] == {"type": "text", "text": "Sandboxed."} and said["said"]["model"] == "echo-1"
    assert said["roots"] == [{"uri": "file:///work", "name": "work"}]
    assert said["both"]["again"]["action"] == "decline"
    assert said["both"]["where"]["roots"] == [{"uri": "file:///work", "name": "work"}]

    # The forms went out as the plugin wrote them; the typed one with the schema moat made.
    schemas = {form.message: form.requested_schema for form in answers.forms}
    assert schemas["Who asks about moats?"]["required"] == ["name"]
    typed = schemas["Where to?"]
    assert set(typed["properties"]) == {"email", "copies"} and typed["required"] == ["email"]
    assert typed["properties"]["email"]["description"] == "the address."
    sampling = answers.samplings[-1]
    assert sampling.system_prompt == "Be brief." and sampling.max_tokens == 20
    assert [(m.role, m.content.text) for m in sampling.messages] == [
        ("user", "One word on moats"),
        ("assistant", "Ready."),
        ("user", "Go"),
    ]
    # A client that does not follow tasks gets the call's answer at once.
    assert later is None or later.content[0].text == "now: at once"


@pytest.mark.parametrize("lang", ASKERS)
async def test_a_question_the_client_cannot_take_is_the_tools_error(
    moat_bin: Path, request: pytest.FixtureRequest, lang: str
) -> None:
    asker = request.getfixturevalue(ASKERS[lang])
    answers = Answers()
    params = StdioServerParameters(command=str(moat_bin), args=["serve", str(asker)])
    async with Client(stdio_client(params), mode=LEGACY, read_timeout_seconds=120, elicitation_callback=answers.elicit) as client:
        result = await client.call_tool("asker_interview", {"topic": "moats"})
    assert result.is_error
    assert result.content[0].text == "the client did not declare the `sampling` capability", result.content[0].text
    # The forms before the sampling were asked and answered.
    assert [form.message for form in answers.forms] == ["Who asks about moats?", "Where to?"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_key_names_one_question_for_the_whole_call(moat_bin: Path, asker: Path, mode: str) -> None:
    """A replayed call answers every `ask` from one map: a key asked again would get the first
    question's answer, so moat refuses it, in both eras."""
    answers = Answers()
    params = StdioServerParameters(command=str(moat_bin), args=["serve", str(asker)])
    async with Client(stdio_client(params), mode=mode, read_timeout_seconds=120, list_roots_callback=answers.roots) as client:
        result = await client.call_tool("asker_twice", {})
    assert result.is_error, result
    assert result.content[0].text == (
        'question key "where" was asked before in this call: a key names one question for the whole call'
    ), result.content[0].text


async def test_a_python_plugin_serves_a_prompt_and_a_resource_that_changes(moat_bin: Path, asker: Path) -> None:
    updates: list[str] = []

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            updates.append(str(root.params.uri))

    params = StdioServerParameters(command=str(moat_bin), args=["serve", str(asker)])
    async with Client(stdio_client(params), mode=LEGACY, read_timeout_seconds=120, message_handler=on_message) as client:
        assert (await client.read_resource("asker://status")).contents[0].text == "calm"
        prompt = await client.get_prompt("asker_review", {"topic": "moats"})
        said = [(m.role, m.content.model_dump(mode="json", exclude_none=True)) for m in prompt.messages]
        assert said == [
            ("user", {"type": "text", "text": "Review moats."}),
            ("assistant", {"type": "resource_link", "uri": "file:///review.md", "name": "review"}),
        ], said
        await client.subscribe_resource("asker://status")
        await client.call_tool("asker_touch", {})
        await client.list_tools()  # the notification comes before this answer
    assert updates == ["asker://status"]


def test_a_python_tool_detaches_into_a_task(raw_server: Callable[..., RawServer], asker: Path) -> None:
    server = raw_server(str(asker))
    meta = dict(MODERN_META)
    meta["io.modelcontextprotocol/clientCapabilities"] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    created = server.request("tools/call", {"name": "asker_later", "arguments": {"label": "soon"}, "_meta": meta})
    task = created["result"]
    assert task["resultType"] == "task" and task["status"] == "working", task
    deadline = time.monotonic() + 60
    while True:
        state = server.request("tasks/get", {"taskId": task["taskId"], "_meta": meta})["result"]
        if state["status"] != "working" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert state["status"] == "completed", state
    # The task ran the tool again, where `detach` said so.
    assert state["result"]["content"][0]["text"] == "soon: a task", state
