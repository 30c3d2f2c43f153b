"""Signatures, policies and the audit log through the `moat` command and a real MCP client:
`moat sign`/`moat verify` against the `minisign` tool, `moat policy check`/`explain`, a policy
that stops `moat serve`, and the audit log read back after calls over stdio.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from support import LEGACY, RawServer, free_port, http_transport, wait_for_port


def run(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        pytest.fail(f"{args} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    """A minisign key pair made by the minisign tool: (public, secret)."""
    if shutil.which("minisign") is None:
        pytest.fail("the minisign tool is missing (./dev test installs it)")
    public, secret = tmp_path / "acme.pub", tmp_path / "acme.key"
    run("minisign", "-G", "-W", "-p", public, "-s", secret)
    return public, secret


def write_policy(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o644)
    return path


def test_moat_sign_and_the_minisign_tool_agree(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    public, secret = keys
    wasm = tmp_path / "echo.wasm"
    shutil.copy(plugin("echo"), wasm)

    run(moat_bin, "sign", "--key", secret, wasm)
    verified = run("minisign", "-V", "-p", public, "-m", wasm)
    assert "Signature and comment signature verified" in verified.stdout

    # And the other way: the tool signs, moat verifies.
    (tmp_path / "echo.wasm.minisig").unlink()
    run("minisign", "-S", "-s", secret, "-m", wasm)
    ok = run(moat_bin, "verify", "--key", public, wasm)
    digest = hashlib.sha256(wasm.read_bytes()).hexdigest()
    assert 'good signature by "acme"' in ok.stdout and f"sha256:{digest}" in ok.stdout

    wasm.write_bytes(wasm.read_bytes() + b"\0")
    bad = run(moat_bin, "verify", "--key", public, wasm, check=False)
    assert bad.returncode == 1
    assert "does not match the component's bytes" in bad.stderr


def test_policy_check_and_explain(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    config = tmp_path / "moat.toml"
    config.write_text(
        f"[plugins.notes]\npath = {json.dumps(str(plugin('notes')))}\n"
        f'files = [{{ host = "data", guest = "/notes", mode = "rw" }}]\n'
        f'env = {{ NOTES_TITLE = "Mine", HOME_DIR = "/root" }}\n'
        f"[plugins.echo]\npath = {json.dumps(str(plugin('echo')))}\n"
    )
    policy = write_policy(
        tmp_path / "policy.toml",
        '[[allow]]\nname = "notes"\n[ceiling]\nmax_memory_mb = 16\n'
        f'directories = [{{ path = "{data}", mode = "ro" }}]\n',
    )

    check = run(moat_bin, "policy", "check", "--policy", policy, "--config", config, check=False)
    assert check.returncode == 1, check
    assert "notes: allowed by [[allow]] rule 1" in check.stdout
    assert 'echo: refused: ' in check.stdout and 'rule 1: name is not "notes"' in check.stdout

    explain = run(
        moat_bin, "policy", "explain", "--policy", policy, "--config", config, "notes"
    )
    lines = explain.stdout
    assert f"directory {data.resolve()} at /notes (rw): narrowed: read-only: the policy allows it read-only" in lines
    assert "env HOME_DIR: cut: beyond the request: the plugin does not ask for HOME_DIR" in lines
    assert "env NOTES_TITLE: granted" in lines
    assert "memory = 16 MB: narrowed:" in lines and "the policy caps it at 16 MB" in lines
    assert "network https://api.example.org: not granted" in lines
    assert 'asks for: {"files":[{"guest":"/notes","mode":"rw"}]' in lines

    # `moat inspect` shows the same decisions, for the plugin as the config grants it.
    inspected = run(
        moat_bin, "inspect", "--json", "--policy", policy, "--config", config, "notes"
    )
    report = json.loads(inspected.stdout)
    assert report["manifest"]["env"] == ["NOTES_TITLE"]
    fates = {note["grant"]: note["fate"] for note in report["grants"]}
    assert fates["env HOME_DIR"] == "cut" and fates["env NOTES_TITLE"] == "granted"
    assert fates[f"directory {data.resolve()} at /notes (rw)"] == "narrowed"


def test_a_malformed_or_refusing_policy_stops_serve(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    bad = write_policy(tmp_path / "bad.toml", "require_signatures = yes\n")
    result = run(moat_bin, "serve", "--policy", bad, plugin("echo"), check=False)
    assert result.returncode == 2 and "in the policy" in result.stderr, result

    http_only = write_policy(tmp_path / "http.toml", 'transports = ["http"]\n')
    result = run(moat_bin, "serve", "--policy", http_only, plugin("echo"), check=False)
    assert result.returncode == 2
    assert "does not allow serving over stdio" in result.stderr

    loose = write_policy(tmp_path / "loose.toml", '[[allow]]\nname = "*"\n')
    loose.chmod(0o666)
    result = run(moat_bin, "serve", "--policy", loose, plugin("echo"), check=False)
    assert result.returncode == 2 and "writable by others" in result.stderr


@pytest.fixture
def oci_registry(tmp_path: Path) -> Iterator[str]:
    """Debian's docker-registry (the CNCF distribution registry) on a free loopback port."""
    if shutil.which("docker-registry") is None:
        pytest.fail("docker-registry is missing (./dev test installs it)")
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\n"
        f"storage:\n  filesystem:\n    rootdirectory: {tmp_path / 'registry'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    log = tmp_path / "registry.log"
    with log.open("w") as stderr:
        registry = subprocess.Popen(
            ["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL, stderr=stderr
        )
        wait_for_port(port, registry, log, timeout=20)
        yield f"127.0.0.1:{port}"
        registry.kill()
        registry.wait()


def test_a_signed_push_is_admitted_after_a_pull_and_an_unsigned_one_is_refused(
    moat_bin: Path,
    plugin: Callable[[str], Path],
    raw_server: Callable[..., RawServer],
    tmp_path: Path,
    keys: tuple[Path, Path],
    oci_registry: str,
) -> None:
    public, secret = keys
    wasm = tmp_path / "echo.wasm"
    shutil.copy(plugin("echo"), wasm)
    unsigned = f"oci://{oci_registry}/acme/echo:unsigned"
    run(moat_bin, "push", wasm, unsigned)
    # `moat push` takes the signature that lies beside the file along, in the artifact.
    run(moat_bin, "sign", "--key", secret, wasm)
    signed = f"oci://{oci_registry}/acme/echo:signed"
    pushed = run(moat_bin, "push", wasm, signed)
    assert "with its signature" in pushed.stderr, pushed.stderr

    key = public.read_text().splitlines()[1]
    policy = write_policy(
        tmp_path / "policy.toml",
        f'require_signatures = true\n[publishers]\nacme = "{key}"\n[[allow]]\npublisher = "acme"\n',
    )
    config = tmp_path / "moat.toml"
    config.write_text(
        f'[plugins.signed]\nsource = "{signed}"\n\n[plugins.unsigned]\nsource = "{unsigned}"\n'
    )
    pulled = run(moat_bin, "pull", signed)
    assert "with a publisher's signature" in pulled.stderr, pulled.stderr

    check = run(moat_bin, "policy", "check", "--policy", policy, "--config", config, check=False)
    assert check.returncode == 1, check
    assert "signed: allowed by [[allow]] rule 1" in check.stdout
    assert "signed by: acme" in check.stdout
    assert "unsigned: refused:" in check.stdout and "the plugin is unsigned" in check.stdout

    server = raw_server("--policy", str(policy), "--config", str(config))
    server.initialize()
    tools = [tool["name"] for tool in server.request("tools/list")["result"]["tools"]]
    assert "signed_echo" in tools and not any(t.startswith("unsigned_") for t in tools), tools
    assert 'plugin "unsigned" is not loaded' in server.stderr()


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


async def test_the_audit_log_records_every_call_and_no_tool_changes_grants(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    policy = write_policy(tmp_path / "policy.toml", '[[allow]]\nname = "*"\n')
    params = StdioServerParameters(
        command=str(moat_bin),
        args=["serve", "--policy", str(policy), "--audit", str(audit), str(plugin("echo"))],
        env={k: v for k, v in os.environ.items() if k.startswith("MOAT_")},
    )
    with (tmp_path / "stderr").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=LEGACY) as client:
            tools = (await client.list_tools()).tools
            # Every tool is an export of a plugin; none reads or changes grants or the policy.
            assert sorted(t.name for t in tools) == ["echo_echo", "echo_repeat"]
            await client.call_tool("echo_echo", {"message": "secret ✓"})
            await client.call_tool("echo_repeat", {"message": "x", "times": 300})
            with pytest.raises(MCPError):
                await client.call_tool("grants_widen", {"files": ["/"]})

    assert stat.S_IMODE(audit.stat().st_mode) == 0o600
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [r["outcome"] for r in records] == ["ok", "invalid_arguments", "unknown_tool"]
    digest = "sha256:" + hashlib.sha256(plugin("echo").read_bytes()).hexdigest()
    first = records[0]
    assert first["plugin"] == "echo" and first["digest"] == digest and first["tool"] == "echo_echo"
    assert first["arguments_sha256"] == hashlib.sha256(
        canonical({"message": "secret ✓"}).encode()
    ).hexdigest()
    assert "secret" not in audit.read_text(), "arguments are redacted by default"
    # moat authenticates no client: its name is only what it said at `initialize`.
    assert first["client_claimed"].startswith("mcp ") and first["denied"] == []
    assert "client" not in first and "session" not in first and "session_claimed" not in first
    assert first["time"].endswith("Z") and first["duration_ms"] >= 0
    assert "error" not in first
    assert "times" in records[1]["error"] and records[1]["tool"] == "echo_repeat"
    assert records[2]["plugin"] is None and records[2]["tool"] == "grants_widen"


async def test_over_http_the_policy_picks_the_address_and_the_audit_log_names_the_session(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    port = free_port()
    policy = write_policy(
        tmp_path / "policy.toml", f'http_bind = ["127.0.0.1:{port}"]\n[[allow]]\nname = "*"\n'
    )
    refused = run(
        moat_bin, "serve", "--policy", policy, "--http", f"127.0.0.2:{port}", plugin("echo"),
        check=False,
    )
    assert refused.returncode == 2 and f"does not allow binding 127.0.0.2:{port}" in refused.stderr

    audit = tmp_path / "audit.jsonl"
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [str(moat_bin), "serve", "--policy", str(policy), "--audit", str(audit),
             "--http", f"127.0.0.1:{port}", str(plugin("echo"))],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
        )
        try:
            wait_for_port(port, process, log)
            async with Client(http_transport(f"http://127.0.0.1:{port}/mcp"), mode=LEGACY) as client:
                await client.call_tool("echo_echo", {"message": "over http"})
        finally:
            process.terminate()
            process.wait(timeout=10)
    [record] = [json.loads(line) for line in audit.read_text().splitlines()]
    assert record["outcome"] == "ok" and record["tool"] == "echo_echo"
    assert isinstance(record.get("session"), str) and record["session"], record
    assert "session_claimed" not in record and "client" not in record, record


def test_a_stateless_request_s_session_header_is_recorded_as_claimed(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    from test_http_protocol import echo_call, modern_headers, post_headers
    from test_protocol import MODERN_META

    port = free_port()
    audit = tmp_path / "audit.jsonl"
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [str(moat_bin), "serve", "--audit", str(audit), "--http", f"127.0.0.1:{port}",
             str(plugin("echo"))],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
        )
        try:
            wait_for_port(port, process, log)
            headers = post_headers(
                {**modern_headers("tools/call", "echo_echo"), "mcp-session-id": "forged"}
            )
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("POST", "/mcp", json.dumps(echo_call(1, "hi", MODERN_META)), headers)
            reply = connection.getresponse()
            reply.read()
            connection.close()
            assert reply.status == 200
        finally:
            process.terminate()
            process.wait(timeout=10)
    [record] = [json.loads(line) for line in audit.read_text().splitlines()]
    assert record["outcome"] == "ok", record
    # moat made no such session: the header is only what the client says, recorded (like every
    # session id) as the first 8 bytes of its SHA-256, so the audit file holds no usable id.
    claimed = hashlib.sha256(b"forged").hexdigest()[:16]
    assert "session" not in record and record["session_claimed"] == claimed, record
    assert record["client_claimed"] == "moat-e2e 0" and "client" not in record, record


def test_an_audit_log_of_minus_is_standard_output_over_http_and_refused_on_stdio(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    from test_http_protocol import echo_call, modern_headers, post_headers
    from test_protocol import MODERN_META

    port = free_port()
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [str(moat_bin), "serve", "--audit", "-", "--http", f"127.0.0.1:{port}",
             str(plugin("echo"))],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
        )
        try:
            wait_for_port(port, process, log)
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("POST", "/mcp", json.dumps(echo_call(1, "hi", MODERN_META)),
                               post_headers(modern_headers("tools/call", "echo_echo")))
            assert connection.getresponse().status == 200
            connection.close()
        finally:
            process.terminate()
            out, _ = process.communicate(timeout=10)
    [record] = [json.loads(line) for line in out.decode().splitlines()]
    assert record["tool"] == "echo_echo" and record["outcome"] == "ok", record
    assert not (Path.cwd() / "-").exists()
    refused = subprocess.run([str(moat_bin), "serve", "--audit", "-", str(plugin("echo"))],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert "standard output, which carries MCP on stdio" in refused.stderr, refused.stderr
    assert refused.stdout == ""
