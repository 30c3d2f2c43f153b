"""`moat config HOST …` as a user runs it, against a real `moat serve --http`: the URL it
prints is one moat accepts, the snippet carries the credential this configuration takes, and a
plugin moat would refuse (missing, or a moat.toml without `--config`) is refused at once."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from support import free_port, stop, wait_for_port
from test_auth import mcp_post


def run(moat_bin: Path, *args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(moat_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=env, stdin=subprocess.DEVNULL)


def home(tmp_path: Path) -> dict[str, str]:
    """An environment whose local token lives in `tmp_path`."""
    env = {k: v for k, v in os.environ.items() if k not in ("MOAT_TOKEN_FILE", "XDG_CONFIG_HOME")}
    env["HOME"] = str(tmp_path)
    return env


@contextmanager
def serving(moat_bin: Path, args: list[str], port: int, env: dict[str, str], log: Path) -> Iterator[None]:
    with log.open("w") as errlog:
        process = subprocess.Popen([str(moat_bin), "serve", *args], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=errlog, env=env)
    try:
        wait_for_port(port, process, log)
        yield
    finally:
        stop(process)


def test_every_address_gets_a_url_moat_accepts(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    env, port = home(tmp_path), free_port()
    with serving(moat_bin, [str(plugin("echo")), "--http", f"0.0.0.0:{port}"], port, env,
                 tmp_path / "moat.stderr"):
        token = (tmp_path / ".config/moat/http-token").read_text().strip()
        printed = run(moat_bin, "config", "cursor", "--http", f"0.0.0.0:{port}", env=env)
        assert printed.returncode == 0, printed.stderr
        server = json.loads(printed.stdout)["mcpServers"]["moat"]
        assert server["url"] == f"http://127.0.0.1:{port}/mcp"
        assert "none to connect to" in printed.stderr and "[http] hosts" in printed.stderr
        # The URL as printed gets through moat's Host check, with the snippet's header.
        status, _, body = mcp_post(server["url"], token)
        assert status == 200, body
        assert server["headers"]["Authorization"] == f"Bearer {token}"


def test_a_name_from_http_hosts_is_the_url_and_no_fitting_url_is_an_error(
    moat_bin: Path, tmp_path: Path
) -> None:
    env, port = home(tmp_path), free_port()
    config = tmp_path / "moat.toml"
    config.write_text('[http]\nhosts = ["tools.example.com"]\n')
    named = run(moat_bin, "config", "claude-code", "--config", config, "--http", f"0.0.0.0:{port}", env=env)
    assert named.returncode == 0, named.stderr
    assert f"http://tools.example.com:{port}/mcp" in named.stdout
    assert f"http://127.0.0.1:{port}/mcp reaches moat too" in named.stderr

    lan = run(moat_bin, "config", "cursor", "--http", f"192.0.2.7:{port}", env=env)
    assert lan.returncode != 0 and lan.stdout == ""
    assert "no URL reaches moat at" in lan.stderr and 'hosts = ["192.0.2.7"]' in lan.stderr


def test_with_api_keys_the_refusal_and_the_snippet_say_which_credential_moat_takes(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    env, port = home(tmp_path), free_port()
    made = run(moat_bin, "auth", "key", "ci", env=env)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    hashed = made.stderr.split('ci = "')[1].split('"')[0]
    config = tmp_path / "moat.toml"
    config.write_text(f'[plugins.echo]\npath = {json.dumps(str(plugin("echo")))}\n'
                      f'[auth]\napi_keys = {{ ci = "{hashed}" }}\n')
    log = tmp_path / "moat.stderr"
    # The local token a host configured before [auth] existed.
    stale = run(moat_bin, "config", "cursor", "--http", f"127.0.0.1:{port}", env=env)
    token = json.loads(stale.stdout)["mcpServers"]["moat"]["headers"]["Authorization"].removeprefix("Bearer ")
    with serving(moat_bin, ["--config", str(config), "--http", f"127.0.0.1:{port}"], port, env, log):
        url = f"http://127.0.0.1:{port}/mcp"
        assert mcp_post(url, token)[0] == 401
        [refused] = [line for line in log.read_text().splitlines() if "refused a request" in line]
        assert "this moat accepts only the 1 API key of [auth] api_keys" in refused, refused
        assert "`moat auth key NAME`" in refused and "not the local token" in refused, refused

        printed = run(moat_bin, "config", "cursor", "--config", config, "--http", f"127.0.0.1:{port}", env=env)
        assert printed.returncode == 0, printed.stderr
        server = json.loads(printed.stdout)["mcpServers"]["moat"]
        assert server["headers"] == {"Authorization": "Bearer ${env:MOAT_API_KEY}"}
        assert "not the local token: make one with `moat auth key NAME`" in printed.stderr
        # The header as Cursor expands it is accepted.
        assert mcp_post(server["url"], key)[0] == 200

        command = run(moat_bin, "config", "claude-code", "--config", config, "--http", f"127.0.0.1:{port}", env=env)
        assert command.stdout.strip().endswith('--header "Authorization: Bearer ${MOAT_API_KEY}"'), command.stdout
        assert "export MOAT_API_KEY=KEY" in command.stderr


def test_a_plugin_that_is_not_there_or_is_a_moat_toml_is_refused_with_the_fix(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    env = home(tmp_path)
    missing = run(moat_bin, "config", "claude-code", tmp_path / "nonexistent.wasm", env=env)
    assert missing.returncode != 0 and missing.stdout == ""
    assert f"no plugin at {tmp_path / 'nonexistent.wasm'}" in missing.stderr
    no_config = run(moat_bin, "config", "cursor", "--config", tmp_path / "absent.toml", env=env)
    assert no_config.returncode != 0 and "no moat.toml at" in no_config.stderr

    config = tmp_path / "dir" / "moat.toml"
    config.parent.mkdir()
    config.write_text(f'[plugins.echo]\npath = {json.dumps(str(plugin("echo")))}\n')
    hint = f"is not a WebAssembly file: did you mean `--config {config}`?"
    for args in [("config", "claude-code", config), ("serve", config), ("call", config), ("inspect", config)]:
        done = run(moat_bin, *args, env=env)
        assert done.returncode != 0, args
        assert hint in done.stderr, (args, done.stderr)
    # Given as the hint says, it serves.
    fixed = run(moat_bin, "config", "claude-code", "--config", config, env=env)
    assert fixed.returncode == 0, fixed.stderr
