"""moat's own interfaces in Python's shape, for a plugin built by componentize-py.

componentize-py makes raw bindings from what the world imports (`wit_world.imports.log`, …);
this module wraps them: Python's `logging` sent to the MCP client, progress in one call, content
blocks and prompt messages made by name, questions for the client (elicitation, sampling, roots)
asked in one line, resource updates and tasks. Each part needs its interface in the world
(`import moat:plugin/log@0.1.0;`, `import moat:plugin/progress@0.1.0;`, `use
moat:plugin/content@0.1.0.{content-block};`, `use moat:plugin/prompt@0.1.0.{message};`, `import
moat:plugin/client@0.1.0;`, `import moat:plugin/resources@0.1.0;`, `import
moat:plugin/tasks@0.1.0;`); used without it, it says which line to add.

    import moat_plugin
    from moat_plugin import question

    log = moat_plugin.logger(__name__)

    class WitWorld(wit_world.WitWorld):
        def count(self, path: str) -> list[ContentBlock]:
            log.info("counting %s", path)           # a notifications/message to the client
            moat_plugin.progress(1, 2, "read")      # a notifications/progress, when asked for
            return [moat_plugin.text("3 lines")]

        def clean(self, path: str) -> str:
            answer = moat_plugin.elicit(f"Delete {path}?", {"type": "object", "properties": {}})
            if answer["action"] != "accept":
                return "kept"
            ...

A question stops a call from a 2026-07-28 client, which calls again with the answers: the tool
then runs again from the start in a fresh instance and each question gets its answer. So a tool
asks the same questions in the same order each time, and changes nothing before its last one.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, Union

__all__ = [
    "Handler",
    "logger",
    "progress",
    "text",
    "image",
    "audio",
    "link",
    "resource",
    "message",
    "capabilities",
    "question",
    "ask",
    "elicit",
    "elicit_typed",
    "sample",
    "roots",
    "updated",
    "detach",
]


def _bindings(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"wit_world.imports.{name}")
    except ImportError:
        return None


# Imported now, while componentize-py builds the component: its snapshot keeps what is loaded,
# and a module first imported during a call would not be found.
_IMPORTED = {
    name: _bindings(name) for name in ["log", "progress", "content", "prompt", "client", "resources", "tasks"]
}


def _interface(name: str, line: str) -> ModuleType:
    """The bindings of `moat:plugin/NAME`, or an error naming the WIT `line` that brings them."""
    bindings = _IMPORTED[name]
    if bindings is None:
        raise RuntimeError(f"the plugin's world does not import moat:plugin/{name}@0.1.0: add `{line}` to it")
    return bindings


class Handler(logging.Handler):
    """Sends each record to the MCP client (and moat's log) at the nearest MCP level."""

    def emit(self, record: logging.LogRecord) -> None:
        bindings = _interface("log", "import moat:plugin/log@0.1.0;")
        levels = bindings.Level
        if record.levelno >= logging.ERROR:
            level = levels.ERROR
        elif record.levelno >= logging.WARNING:
            level = levels.WARNING
        elif record.levelno >= logging.INFO:
            level = levels.INFO
        else:
            level = levels.DEBUG
        try:
            bindings.log(level, self.format(record))
        except Exception:
            self.handleError(record)


def logger(name: str = "plugin", level: int = logging.DEBUG) -> logging.Logger:
    """A logger whose records go to the client; the client's `logging/setLevel` filters them."""
    log = logging.getLogger(name)
    if not any(isinstance(h, Handler) for h in log.handlers):
        log.addHandler(Handler())
    log.setLevel(level)
    log.propagate = False
    return log


def progress(done: float, total: float | None = None, message: str | None = None) -> None:
    """Reports how far the call is: `done` grows with every report, `total` is its end if known.
    moat sends it only to a client that asked for progress; otherwise it costs nothing."""
    bindings = _interface("progress", "import moat:plugin/progress@0.1.0;")
    bindings.report(float(done), None if total is None else float(total), message)


def _content() -> ModuleType:
    return _interface("content", "use moat:plugin/content@0.1.0.{content-block};")


def text(value: str) -> Any:
    """A text block."""
    return _content().ContentBlock_Text(value)


def image(data: bytes, mime_type: str) -> Any:
    """An image block, such as `image/png`."""
    content = _content()
    return content.ContentBlock_Image(content.Image(data=data, mime_type=mime_type))


def audio(data: bytes, mime_type: str) -> Any:
    """A sound block, such as `audio/wav`."""
    content = _content()
    return content.ContentBlock_Audio(content.Audio(data=data, mime_type=mime_type))


def link(uri: str, name: str, description: str | None = None, mime_type: str | None = None) -> Any:
    """A link to a resource the client may fetch by itself."""
    content = _content()
    return content.ContentBlock_ResourceLink(
        content.ResourceLink(uri=uri, name=name, description=description, mime_type=mime_type)
    )


def resource(uri: str, body: str | bytes, mime_type: str | None = None) -> Any:
    """A resource given in full: text, or bytes of any kind."""
    content = _content()
    contents = content.Body_Text(body) if isinstance(body, str) else content.Body_Blob(body)
    return content.ContentBlock_Resource(content.EmbeddedResource(uri=uri, mime_type=mime_type, body=contents))


def _role(name: str) -> Any:
    """The WIT role `name` (`user` or `assistant`) of a message."""
    if name not in ("user", "assistant"):
        raise ValueError(f"a message's role is `user` or `assistant`, not {name!r}")
    return _interface("prompt", "use moat:plugin/prompt@0.1.0.{message};").Role[name.upper()]


def _block(content: Any) -> Any:
    """A text block for a string, or the content block given."""
    return text(content) if isinstance(content, str) else content


def message(role: str, content: Any) -> Any:
    """One message of a prompt, as a function of the exported `prompts` interface returns them:
    `role` is `user` or `assistant`, `content` a text or a content block."""
    prompt = _interface("prompt", "use moat:plugin/prompt@0.1.0.{message};")
    return prompt.Message(role=_role(role), content=_block(content))


def _client() -> ModuleType:
    return _interface("client", "import moat:plugin/client@0.1.0;")


def capabilities() -> frozenset[str]:
    """What the client of this request said it can be asked: some of `elicitation`,
    `elicitation-url`, `sampling` and `roots`. A question it cannot be asked fails."""
    declared = _client().capabilities()
    return frozenset(flag.name.lower().replace("_", "-") for flag in type(declared) if flag in declared)


# One turn of a sampling request: a text said by the user, or (role, text or content block).
Turn = Union[str, tuple[str, Any]]


class question:
    """The questions `ask` takes: each makes one, to be asked with others at once."""

    @staticmethod
    def form(message: str, schema: Mapping[str, Any] | str) -> Any:
        """An elicitation form: `schema` is the JSON Schema of the object the user fills in (a
        dict, or its JSON text), with properties of primitive types."""
        client = _client()
        written = schema if isinstance(schema, str) else json.dumps(schema)
        return client.Question_Elicit(client.Form(message=message, schema=written))

    @staticmethod
    def typed_form(name: str, message: str) -> Any:
        """An elicitation form the plugin declares in WIT: the function `name` of its exported
        `forms` interface, whose parameters are the fields. moat writes the schema and checks
        an accepted answer against the parameters' types."""
        client = _client()
        return client.Question_ElicitTyped(client.TypedForm(name=name, message=message))

    @staticmethod
    def page(message: str, url: str, elicitation_id: str) -> Any:
        """An elicitation that sends the user to the web page `url`."""
        client = _client()
        return client.Question_ElicitUrl(client.Page(message=message, url=url, elicitation_id=elicitation_id))

    @staticmethod
    def sampling(messages: str | Sequence[Turn], system_prompt: str | None = None, max_tokens: int = 1000) -> Any:
        """A request for the client's model: one text from the user, or a conversation of
        `(role, content)` pairs, where role is `user` or `assistant` and content a text or a
        content block."""
        client = _client()
        said = [messages] if isinstance(messages, str) else list(messages)
        turns = []
        for turn in said:
            role, content = ("user", turn) if isinstance(turn, str) else turn
            turns.append(client.SamplingMessage(role=_role(role), content=_block(content)))
        return client.Question_Sample(client.Sampling(messages=turns, system_prompt=system_prompt, max_tokens=max_tokens))

    @staticmethod
    def roots() -> Any:
        """The client's roots: the folders and files it works on."""
        return _client().Question_Roots()


def ask(questions: Mapping[str, Any] | None = None, /, **named: Any) -> dict[str, Any]:
    """Asks every question at once, each under a key of its own (given as a dict, as keywords,
    or both), and returns every answer under its key: the client's result, from JSON.
    Raises `componentize_py_types.Err` with the reason when the client cannot be asked (such as
    a capability it did not declare); uncaught in a tool that returns `result<_, string>`, that
    reason is the tool's error."""
    asked = {**(questions or {}), **named}
    return {key: json.loads(answer) for key, answer in _client().ask(list(asked.items()))}


# The questions asked one at a time, counted to give each a key of its own in the call: a call
# runs in a fresh instance, so a call run again asks them under the same keys.
_ASKED = 0


def _ask_one(kind: str, asked: Any) -> Any:
    global _ASKED
    _ASKED += 1
    key = f"{kind}-{_ASKED}"
    return ask({key: asked})[key]


def elicit(message: str, schema: Mapping[str, Any] | str) -> dict[str, Any]:
    """Asks the user to fill in a form and returns the client's result: `{"action": "accept",
    "content": {…}}`, or an `action` of `decline` or `cancel`."""
    return _ask_one("elicit", question.form(message, schema))


def elicit_typed(name: str, message: str) -> dict[str, Any]:
    """Asks the user to fill in the form `name` of the exported `forms` interface; returns the
    client's result as `elicit` does, its content checked against the form's types."""
    return _ask_one("elicit", question.typed_form(name, message))


def sample(messages: str | Sequence[Turn], system_prompt: str | None = None, max_tokens: int = 1000) -> dict[str, Any]:
    """Asks the client's model and returns its message: `{"role": "assistant", "content":
    {"type": "text", "text": …}, "model": …}`."""
    return _ask_one("sample", question.sampling(messages, system_prompt, max_tokens))


def roots() -> list[dict[str, Any]]:
    """The client's roots, each `{"uri": …, "name": …}` (the name may be absent)."""
    return _ask_one("roots", question.roots())["roots"]


def updated(uri: str) -> None:
    """Says that the plugin's resource `uri` (as its `@uri` tag names it) changed, for the
    clients that subscribed to it."""
    _interface("resources", "import moat:plugin/resources@0.1.0;").updated(uri)


def detach() -> bool:
    """Lets the rest of the call run as a task when the client follows tasks: the tool then
    runs again from the start in a fresh instance, where this returns `True`; everything before
    it must be harmless to repeat. Returns `False` (and the call goes on) otherwise."""
    return _interface("tasks", "import moat:plugin/tasks@0.1.0;").detach()
