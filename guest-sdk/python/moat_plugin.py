"""moat's own interfaces in Python's shape, for a plugin built by componentize-py.

componentize-py makes raw bindings from what the world imports (`wit_world.imports.log`, …);
this module wraps them: Python's `logging` sent to the MCP client, progress in one call, and
content blocks made by name. Each part needs its interface in the world (`import
moat:plugin/log@0.1.0;`, `import moat:plugin/progress@0.1.0;`, `use
moat:plugin/content@0.1.0.{content-block};`); used without it, it says which line to add.

    import moat_plugin

    log = moat_plugin.logger(__name__)

    class WitWorld(wit_world.WitWorld):
        def count(self, path: str) -> list[ContentBlock]:
            log.info("counting %s", path)           # a notifications/message to the client
            moat_plugin.progress(1, 2, "read")      # a notifications/progress, when asked for
            return [moat_plugin.text("3 lines")]
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any

__all__ = ["Handler", "logger", "progress", "text", "image", "audio", "link", "resource"]


def _bindings(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"wit_world.imports.{name}")
    except ImportError:
        return None


# Imported now, while componentize-py builds the component: its snapshot keeps what is loaded,
# and a module first imported during a call would not be found.
_IMPORTED = {name: _bindings(name) for name in ["log", "progress", "content"]}


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
