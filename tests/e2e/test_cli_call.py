"""`moat call`: the tools listed when none is named, arguments from stdin, a plugin of a
moat.toml with its limits, and every outcome an MCP result on stdout with its own exit code.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from support import assert_raw_text_only


def call(moat_bin: Path, *args: str | Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(moat_bin), "call", *map(str, args)], input=stdin, capture_output=True, text=True, timeout=120
    )


def result_of(done: subprocess.CompletedProcess[str]) -> dict:
    """The MCP result on stdout; every outcome prints one."""
    return json.loads(done.stdout)


def test_no_tool_lists_the_tools(moat_bin: Path, plugin: Callable[[str], Path]) -> None:
    listed = call(moat_bin, plugin("echo"))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["echo_echo", "echo_repeat"]
    assert all(len(line.split()) > 1 for line in lines), "each name has its description's first line"


def test_each_listed_description_is_a_whole_sentence_or_ends_in_an_ellipsis(
    moat_bin: Path, plugin: Callable[[str], Path]
) -> None:
    # weather's first sentences are longer than a line; text's fit.
    for name in ["weather", "text"]:
        listed = call(moat_bin, plugin(name))
        assert listed.returncode == 0, listed.stderr
        for line in listed.stdout.splitlines():
            about = line.split(None, 1)[1]
            assert len(line) <= 100, line
            assert about.endswith((".", "…")), line
            # A cut falls between words, not inside one.
            assert not about.endswith(" …") and about.rstrip("…")[-1:] != " ", line
    weather = call(moat_bin, plugin("weather")).stdout
    assert "weather_current   The current weather at a place: temperature," in weather
    assert "…" in weather, weather
    text = call(moat_bin, plugin("text")).stdout.splitlines()
    assert "text_hash           Hashes the UTF-8 bytes of `text` and returns the digest." in text, text


def test_arguments_from_stdin(moat_bin: Path, plugin: Callable[[str], Path]) -> None:
    done = call(moat_bin, plugin("echo"), "echo", "-", stdin='{"message": "from stdin"}')
    assert done.returncode == 0, done.stderr
    assert_raw_text_only(result_of(done), "from stdin")


def test_a_plugin_of_a_config_by_name_with_its_limits(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    config = tmp_path / "moat.toml"
    config.write_text(f"[plugins.sleepy]\npath = {json.dumps(str(plugin('chatty')))}\ndeadline_ms = 200\n")
    quick = call(moat_bin, "--config", config, "sleepy", "nap", '{"ms": 1}')
    assert quick.returncode == 0, quick.stderr
    assert result_of(quick)["structuredContent"] == {"value": 1}
    slow = call(moat_bin, "--config", config, "sleepy", "sleepy_nap", '{"ms": 5000}')
    assert slow.returncode == 4, slow.stderr
    assert result_of(slow)["isError"] is True
    assert "200ms deadline" in result_of(slow)["content"][0]["text"]
    absent = call(moat_bin, "--config", config, "nobody", "nap")
    assert absent.returncode == 3
    assert "has no plugin nobody" in result_of(absent)["content"][0]["text"]


def test_each_kind_of_failure_has_its_exit_code_and_a_result(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    shapes, chatty = plugin("shapes"), plugin("chatty")
    for args, code, words in [
        ((shapes, "check", '{"value": -1}'), 1, "-1 is negative"),
        ((shapes, "check", "{not json"), 2, "not valid JSON"),
        ((shapes, "check", "[1]"), 2, "must be a JSON object"),
        ((shapes, "check", '{"value": "x"}'), 2, "invalid arguments"),
        ((shapes, "no-such-tool"), 2, 'no tool "no-such-tool"'),
        ((tmp_path / "gone.wasm", "x"), 3, "gone.wasm"),
        ((chatty, "crash", '{"message": "boom"}'), 4, "the tool crashed"),
    ]:
        done = call(moat_bin, *args)
        assert done.returncode == code, (args, done.stdout, done.stderr)
        result = result_of(done)
        assert result["isError"] is True, args
        assert words in result["content"][0]["text"], (args, result)
    ok = call(moat_bin, shapes, "check", '{"value": 1}')
    assert ok.returncode == 0, ok.stderr
    assert result_of(ok).get("isError") in (None, False)


def test_the_exit_codes_are_documented(moat_bin: Path) -> None:
    helped = subprocess.run([str(moat_bin), "call", "--help"], capture_output=True, text=True, timeout=60)
    for line in ["0  the tool succeeded", "1  the tool reported an error", "2  usage", "3  the plugin could not", "4  the call failed"]:
        assert line in helped.stdout


def test_a_plugin_of_a_locked_config_is_called_only_as_pinned(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    import shutil

    wasm = tmp_path / "tool.wasm"
    shutil.copy(plugin("echo"), wasm)
    config = tmp_path / "moat.toml"
    config.write_text('[plugins.tool]\npath = "tool.wasm"\n')
    locked = subprocess.run([str(moat_bin), "lock", "--config", str(config)], capture_output=True, text=True, timeout=120)
    assert locked.returncode == 0, locked.stderr
    pinned = call(moat_bin, "--config", config, "tool", "echo", '{"message": "x"}')
    assert pinned.returncode == 0, pinned.stderr
    shutil.copy(plugin("chatty"), wasm)
    changed = call(moat_bin, "--config", config, "tool", "nap", '{"ms": 1}')
    assert changed.returncode == 3, changed.stderr
    assert "moat.lock pins" in result_of(changed)["content"][0]["text"]


def test_the_log_says_a_grant_is_missing_once_and_only_when_it_is(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != "MOAT_LOG"}

    def listed(*args: str | Path) -> str:
        done = subprocess.run([str(moat_bin), *map(str, args)], capture_output=True, text=True,
                              timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        return done.stderr

    # fetch asks for `*:*`; with nothing granted the log says so, once.
    [missing] = [line for line in listed("call", plugin("fetch")).splitlines() if "network *:*" in line]
    assert " INFO " in missing and missing.count("not granted") == 1, missing
    # Granted one site, fetch has what its operator chose: nothing to say at the default level,
    # and at debug level no policy is named, since none is in force.
    config = tmp_path / "moat.toml"
    config.write_text(f'[plugins.fetch]\npath = {json.dumps(str(plugin("fetch")))}\n'
                      'network = ["https://example.com"]\n')
    assert "network" not in listed("call", "--config", config, "fetch")
    debug = listed("-v", "call", "--config", config, "fetch")
    assert "network *:*: granted in part: the plugin asks for it; the operator grants [https://example.com]" in debug
    assert "network https://example.com: granted: the plugin asks for it" in debug
    assert "the policy" not in debug and "within the policy" not in debug, debug
