"""`moat serve` at start: it stops, saying why, when there is nothing to serve; values that could
never hold are refused when the config is read; `--http` takes `localhost`; the log is as loud
as `-q`, `-v` and `MOAT_LOG` say, and a bad `MOAT_LOG` is an error; a plugin not in the cache
is served at once, and its optimized code swapped in and cached while it serves; a start that
lists and quits (stdin closed, SIGTERM, `moat call`) still leaves its code for the next.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from support import RawServer, free_port, stop, wait_for_port


def run(*args: str | Path, env: dict[str, str] | None = None, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Runs moat to its end; stdin is closed at once, so a `serve` that starts serving stops."""
    return subprocess.run(
        [str(a) for a in args], input=stdin, capture_output=True, text=True, timeout=120, env=env
    )


def test_serve_stops_when_there_is_nothing_to_serve(moat_bin: Path, tmp_path: Path) -> None:
    nothing = run(moat_bin, "serve")
    assert nothing.returncode != 0
    assert "nothing to serve" in nothing.stderr and "--config" in nothing.stderr

    empty = tmp_path / "moat.toml"
    empty.write_text("# no plugins yet\n")
    from_config = run(moat_bin, "serve", "--config", empty)
    assert from_config.returncode != 0
    assert f"{empty} has no [plugins.NAME] table" in from_config.stderr

    folder = tmp_path / "plugins"
    folder.mkdir()
    from_folder = run(moat_bin, "serve", folder)
    assert from_folder.returncode != 0
    assert f"no .wasm file in {folder}" in from_folder.stderr


def test_serve_stops_when_every_plugin_fails_with_each_reason(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    missing = tmp_path / "gone.wasm"
    config = tmp_path / "moat.toml"
    config.write_text(
        f"[plugins.gone]\npath = {json.dumps(str(missing))}\n\n"
        f"[plugins.echo]\npath = {json.dumps(str(plugin('echo')))}\n"
    )
    policy = tmp_path / "policy.toml"
    policy.write_text('[[allow]]\nname = "someone_else"\n')
    policy.chmod(0o644)
    result = run(moat_bin, "serve", "--config", config, "--policy", policy)
    assert result.returncode != 0
    assert "none of the 2 plugins loaded" in result.stderr
    assert 'plugin "gone"' in result.stderr and "gone.wasm" in result.stderr
    assert 'plugin "echo"' in result.stderr and "allows no plugin like this one" in result.stderr


def test_values_that_could_never_hold_are_refused_at_load(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    config = tmp_path / "moat.toml"
    echo = json.dumps(str(plugin("echo")))
    for setting, reason in [
        ("deadline_ms = 0", "deadline_ms = 0 would stop every call"),
        ("max_memory_mb = 99999", "more than the 1024 MiB moat's engine gives"),
        ('network = ["http://localhost:8080"]', "localhost is always a loopback address"),
    ]:
        config.write_text(f"[plugins.echo]\npath = {echo}\n{setting}\n")
        result = run(moat_bin, "serve", "--config", config)
        assert result.returncode != 0, setting
        assert reason in result.stderr, result.stderr


def test_http_takes_localhost_and_says_precisely_what_else_is_wrong(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    for address, reason in [
        ("example.com:8080", 'the host "example.com" is not an IP address'),
        ("localhost:99999", 'the port "99999" is not a number'),
        ("localhost", "has no port"),
    ]:
        result = run(moat_bin, "serve", plugin("echo"), "--http", address)
        assert result.returncode == 2
        assert reason in result.stderr, result.stderr

    port = free_port()
    log = tmp_path / "moat.stderr"
    with log.open("w") as errors:
        process = subprocess.Popen(
            [str(moat_bin), "serve", str(plugin("echo")), "--http", f"localhost:{port}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
    try:
        wait_for_port(port, process, log)
        assert f"127.0.0.1:{port}" in log.read_text()
    finally:
        stop(process)


def test_log_flags_and_a_bad_moat_log(moat_bin: Path, plugin: Callable[[str], Path]) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != "MOAT_LOG"}
    loud = run(moat_bin, "pull", plugin("echo"), env=env)
    assert loud.returncode == 0, loud.stderr
    assert " INFO " in loud.stderr
    quiet = run(moat_bin, "-q", "pull", plugin("echo"), env=env)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    also_quiet = run(moat_bin, "pull", plugin("echo"), "--quiet", env=env)
    assert also_quiet.stderr == ""

    bad = run(moat_bin, "pull", plugin("echo"), env={**env, "MOAT_LOG": "debug,moat=loud"})
    assert bad.returncode == 2
    assert 'MOAT_LOG="debug,moat=loud" is not a log filter' in bad.stderr
    # The parser's reason, once.
    assert bad.stderr.count("expected one of") == 1, bad.stderr


def test_json_logs_are_one_object_a_line_from_the_flag_or_the_variable(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MOAT_LOG", "MOAT_LOG_FORMAT")}
    missing = tmp_path / "gone.wasm"
    for args, extra in [(["--log-format", "json"], {}), ([], {"MOAT_LOG_FORMAT": "json"})]:
        # One plugin loads, one does not, and then moat stops: events of three levels.
        done = run(moat_bin, *args, "serve", plugin("echo"), missing, env={**env, **extra})
        lines = done.stderr.splitlines()
        assert lines, done.stderr
        events = [json.loads(line) for line in lines]
        for event in events:
            assert {"timestamp", "level", "target", "message"} <= event.keys(), event
        # The event's fields are at the top, beside its message.
        [loaded] = [e for e in events if e["message"] == "plugins loaded"]
        assert loaded["plugins"] == 1 and loaded["failed"] == 1, loaded
        [failed] = [e for e in events if "not loaded" in e["message"]]
        assert failed["level"] == "ERROR" and failed["plugin"] == "gone", failed
    text = run(moat_bin, "serve", plugin("echo"), env={**env, "MOAT_LOG_FORMAT": "text"})
    assert " INFO " in text.stderr and not text.stderr.startswith("{")
    bad = run(moat_bin, "cache", "dir", env={**env, "MOAT_LOG_FORMAT": "yaml"})
    assert bad.returncode == 2 and 'MOAT_LOG_FORMAT="yaml" is not a log format' in bad.stderr


def test_each_plugin_gets_one_line_and_rmcp_stays_quiet(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != "MOAT_LOG"}
    missing = tmp_path / "gone.wasm"
    result = run(moat_bin, "serve", plugin("echo"), missing, env={**env, "MOAT_LOG": "info"})
    lines = result.stderr.splitlines()
    assert len([line for line in lines if "echo" in line and "loaded" in line]) == 1, result.stderr
    assert len([line for line in lines if "gone" in line and "not loaded" in line]) == 1, result.stderr
    assert not any("rmcp" in line for line in lines), result.stderr


def test_messages_read_as_sentences(moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path) -> None:
    config = tmp_path / "moat.toml"
    config.write_text(f"[plugins.echo]\npath = {json.dumps(str(plugin('echo')))}\n")
    checked = run(moat_bin, "policy", "check", "--config", config)
    assert checked.returncode == 0, checked.stderr
    assert "echo: allowed by default (no policy is in force)" in checked.stdout
    policy = tmp_path / "policy.toml"
    policy.write_text('transports = ["http"]\n')
    policy.chmod(0o644)
    refused = run(moat_bin, "serve", plugin("echo"), "--policy", policy)
    assert "does not allow serving over stdio" in refused.stderr


def test_a_log_line_never_lands_on_a_spinner(moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path) -> None:
    """On a terminal the compile spinner is wiped before each log line and drawn again after."""
    import os
    import select

    config = tmp_path / "moat.toml"
    # Grants the plugin does not ask for: each is cut with a warning while the spinner turns.
    config.write_text(
        f"[plugins.echo]\npath = {json.dumps(str(plugin('echo')))}\n"
        'env = { A = "b" }\nnetwork = ["https://example.com"]\n'
    )
    master, terminal = os.openpty()
    env = {k: v for k, v in os.environ.items() if k != "MOAT_LOG"}
    env["MOAT_CACHE_DIR"] = str(tmp_path / "cache")  # a fresh cache: compiling takes a while
    process = subprocess.Popen(
        [str(moat_bin), "inspect", "--config", str(config), "echo"],
        stdout=subprocess.DEVNULL,
        stderr=terminal,
        env=env,
    )
    os.close(terminal)
    drawn = b""
    while select.select([master], [], [], 60)[0]:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        drawn += chunk
    assert process.wait(timeout=60) == 0
    text = drawn.decode(errors="replace")
    assert "compiling echo" in text and "compiling 1 plugins" not in text
    warnings = [line for line in text.split("\n") if "WARN" in line]
    assert len(warnings) == 2, text
    for line in warnings:
        assert "compiling" not in line.split("\x1b[2K")[-1], f"a log line glued to the spinner: {line!r}"


def serve_until_optimized(moat_bin: Path, wasm: Path, env: dict[str, str]) -> None:
    """Serves `wasm` on stdio, calls echo before and after its optimized code is in use, and stops."""
    process = subprocess.Popen(
        [str(moat_bin), "serve", str(wasm)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdin and process.stdout and process.stderr
    optimized = threading.Event()

    def watch_log() -> None:
        assert process.stderr
        for line in process.stderr:
            if "optimized code in use" in line and "echo" in line:
                optimized.set()

    threading.Thread(target=watch_log, daemon=True).start()

    def request(id: int, method: str, params: dict[str, object]) -> dict[str, object]:
        assert process.stdin and process.stdout
        process.stdin.write(json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}) + "\n")
        process.stdin.flush()
        return json.loads(process.stdout.readline())

    def echo(id: int, message: str) -> str:
        answer = request(id, "tools/call", {"name": "echo_echo", "arguments": {"message": message}})
        return answer["result"]["content"][0]["text"]  # type: ignore[index]

    try:
        request(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})
        assert echo(1, "before") == "before"
        assert optimized.wait(120), "no `optimized code in use` line within 120 s"
        assert echo(2, "after") == "after"
    finally:
        process.stdin.close()
        process.wait(timeout=30)


def test_a_cold_start_serves_at_once_then_swaps_in_optimized_code_and_caches_it(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    serve_until_optimized(moat_bin, plugin("echo"), {**os.environ, "MOAT_CACHE_DIR": str(cache)})
    # Both tiers' code: Winch's, stored first, and Cranelift's.
    assert len(list(cache.glob("*.cwasm"))) == 2, list(cache.iterdir())


def test_a_start_that_ends_before_its_code_is_optimized_leaves_winch_s_code_for_the_next(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "MOAT_CACHE_DIR": str(cache)}
    serve_until_optimized(moat_bin, plugin("echo"), env)
    winch, cranelift = sorted(cache.glob("*.cwasm"), key=lambda p: p.stat().st_mtime_ns)
    stored = winch.stat().st_mtime_ns
    # As if that moat had stopped before Cranelift's code was made.
    cranelift.unlink()
    serve_until_optimized(moat_bin, plugin("echo"), env)
    # The next start ran Winch's code from the cache (not compiled, nor stored, again), and
    # optimized it again.
    assert winch.stat().st_mtime_ns == stored
    assert cranelift.is_file()


# The biggest of the Rust test plugins: Winch takes long enough over it that a moat quitting as
# soon as its tools are listed used to exit before its code reached the cache.
BIG = "filesystem"


def list_and_quit(moat_bin: Path, wasm: Path, stderr: Path, end: str) -> str:
    """Serves `wasm` on stdio, lists its tools, ends at once as `end` says, and returns the log."""
    server = RawServer(moat_bin, [str(wasm)], stderr)
    try:
        server.initialize()
        assert server.request("tools/list")["result"]["tools"]
        if end == "eof":
            server.close_stdin()
        else:
            server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0, server.stderr()
    finally:
        server.stop()
    return stderr.read_text()


@pytest.mark.parametrize("end", ["eof", "sigterm"])
def test_a_start_that_lists_and_quits_leaves_its_code_for_the_next(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, end: str
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("MOAT_CACHE_DIR", str(cache))
    monkeypatch.setenv("MOAT_LOG", "info")
    cold = list_and_quit(moat_bin, plugin(BIG), tmp_path / "cold.stderr", end)
    assert f"(compiled) plugin=\"{BIG}\"" in cold and "compiled=1 from_cache=0" in cold, cold
    # Winch's code, stored before moat exited.
    assert len(list(cache.glob("*.cwasm"))) == 1, list(cache.iterdir())
    warm = list_and_quit(moat_bin, plugin(BIG), tmp_path / "warm.stderr", "eof")
    assert f"(from the cache) plugin=\"{BIG}\"" in warm and "compiled=0 from_cache=1" in warm, warm


def test_moat_call_leaves_its_code_for_the_next(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "MOAT_CACHE_DIR": str(cache)}
    listed = run(moat_bin, "call", plugin(BIG), env=env)
    assert listed.returncode == 0, listed.stderr
    [entry] = cache.glob("*.cwasm")
    stored = entry.stat().st_mtime_ns
    again = run(moat_bin, "call", plugin(BIG), env=env)
    assert again.returncode == 0 and again.stdout == listed.stdout, again.stderr
    # Taken from the cache, not compiled and stored again.
    assert entry.stat().st_mtime_ns == stored
