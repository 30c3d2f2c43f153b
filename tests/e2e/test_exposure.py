"""moat reachable as a service: HTTPS with a certificate renewed in place, configured `Host`
names, `/metrics` on a listener of its own scraped by a real Prometheus, and the caller's
address taken from a trusted proxy only."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from support import AUTH, MODES, assert_text_only, free_port, http_transport, stop, wait_for_port


def make_certificate(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, its subject's CN `name`."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


def curl_ok(url: str, ca: Path) -> bool:
    done = subprocess.run(["curl", "-sS", "--cacert", str(ca), "-o", "/dev/null", "-w", "%{http_code}", url],
                          capture_output=True, text=True, timeout=30, check=False)
    return done.returncode == 0 and done.stdout == "200"


def serve(moat_bin: Path, args: list[str], log: Path, port: int) -> subprocess.Popen[bytes]:
    with log.open("w") as errlog:
        process = subprocess.Popen([str(moat_bin), "serve", *args], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=errlog)
    wait_for_port(port, process, log)
    return process



@pytest.mark.parametrize("mode", MODES)
async def test_https_serves_mcp_and_takes_a_renewed_certificate_without_a_restart(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path, mode: str
) -> None:
    first_cert, first_key = make_certificate(tmp_path, "first")
    second_cert, second_key = make_certificate(tmp_path, "second")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    shutil.copy(first_cert, cert)
    shutil.copy(first_key, key)
    port = free_port()
    process = serve(moat_bin, [str(plugin("echo")), "--http", f"127.0.0.1:{port}",
                               "--tls-cert", str(cert), "--tls-key", str(key)], tmp_path / "moat.stderr", port)
    try:
        url = f"https://127.0.0.1:{port}/mcp"
        context = ssl.create_default_context(cafile=str(first_cert))
        client = httpx2.AsyncClient(headers=AUTH, verify=context, timeout=30)
        async with Client(streamable_http_client(url, http_client=client), mode=mode,
                          read_timeout_seconds=30) as session:
            result = await session.call_tool("echo_echo", {"message": "over tls"})
            assert_text_only(result, "over tls")
        healthz = f"https://127.0.0.1:{port}/healthz"
        assert curl_ok(healthz, first_cert) and not curl_ok(healthz, second_cert)
        # Renewed: the key first, then the certificate, as a certificate tool would.
        shutil.copy(second_key, key)
        shutil.copy(second_cert, cert)
        deadline = time.monotonic() + 15
        while not curl_ok(healthz, second_cert):
            assert time.monotonic() < deadline, (tmp_path / "moat.stderr").read_text()
            time.sleep(0.5)
        assert not curl_ok(healthz, first_cert)
        assert "reloaded the TLS certificate" in (tmp_path / "moat.stderr").read_text()
        # Plain HTTP to the TLS port is no MCP request.
        assert not curl_ok(f"http://127.0.0.1:{port}/healthz", first_cert)
    finally:
        stop(process)


def test_a_renewal_that_cannot_be_read_keeps_the_certificate_in_use(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    first_cert, first_key = make_certificate(tmp_path, "first")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    shutil.copy(first_cert, cert)
    shutil.copy(first_key, key)
    port = free_port()
    log = tmp_path / "moat.stderr"
    process = serve(moat_bin, [str(plugin("echo")), "--http", f"127.0.0.1:{port}",
                               "--tls-cert", str(cert), "--tls-key", str(key)], log, port)
    try:
        cert.write_text("-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n")
        deadline = time.monotonic() + 15
        while "cannot be read" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        assert curl_ok(f"https://127.0.0.1:{port}/healthz", first_cert)
    finally:
        stop(process)


def test_configured_host_names_are_accepted_and_others_still_refused(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    port = free_port()
    config = tmp_path / "moat.toml"
    config.write_text(f'[plugins.echo]\npath = {json.dumps(str(plugin("echo")))}\n'
                      '[http]\nhosts = ["tools.example.com"]\norigins = ["https://app.example.com"]\n')
    process = serve(moat_bin, ["--config", str(config), "--http", f"127.0.0.1:{port}"],
                    tmp_path / "moat.stderr", port)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e", "version": "1"}}})

    def answer(**headers: str) -> tuple[int, str, str]:
        """The status, content type and body."""
        args = ["curl", "-sS", "-o", str(tmp_path / "body"), "-w", "%{http_code} %{content_type}", "-X", "POST",
                f"http://127.0.0.1:{port}/mcp", "--data", body,
                "-H", "content-type: application/json", "-H", "accept: application/json, text/event-stream",
                "-H", AUTH["Authorization"].join(["authorization: ", ""])]
        for name, value in headers.items():
            args += ["-H", f"{name}: {value}"]
        code, _, kind = subprocess.run(args, capture_output=True, text=True, check=True).stdout.partition(" ")
        return int(code), kind, (tmp_path / "body").read_text()

    def status(**headers: str) -> int:
        return answer(**headers)[0]

    try:
        assert status(host="tools.example.com") == 200
        assert status(origin="https://app.example.com") == 200
        # Refused as every other refusal of moat's is: JSON naming what was refused and the fix.
        code, kind, refused = answer(host="evil.example.com")
        assert (code, kind) == (403, "application/json"), refused
        said = json.loads(refused)["error_description"]
        assert '"evil.example.com"' in said and "[http] hosts" in said, said
        code, kind, refused = answer(origin="https://evil.example.com")
        assert (code, kind) == (403, "application/json"), refused
        said = json.loads(refused)["error_description"]
        assert '"https://evil.example.com"' in said and "[http] origins" in said, said
    finally:
        stop(process)


async def test_prometheus_scrapes_the_metrics_listener(
    moat_bin: Path, plugin: Callable[[str], Path], tmp_path: Path
) -> None:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.fail("prometheus is not installed; `./dev test` installs Debian's `prometheus`")
    port, metrics_port, prometheus_port = free_port(), free_port(), free_port()
    moat = serve(moat_bin, [str(plugin("echo")), "--http", f"127.0.0.1:{port}",
                            "--metrics", f"127.0.0.1:{metrics_port}"], tmp_path / "moat.stderr", port)
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: moat\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
    )
    log = tmp_path / "prometheus.stderr"
    with log.open("w") as errlog:
        scraper = subprocess.Popen(
            [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{prometheus_port}"],
            stdout=subprocess.DEVNULL, stderr=errlog,
        )
    try:
        # /metrics is served on its own listener, not beside /mcp.
        plain = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H",
                                f"authorization: {AUTH['Authorization']}", f"http://127.0.0.1:{port}/metrics"],
                               capture_output=True, text=True, check=True)
        assert plain.stdout == "404"
        async with Client(http_transport(f"http://127.0.0.1:{port}/mcp"), mode=MODES[1],
                          read_timeout_seconds=30) as client:
            for _ in range(3):
                await client.call_tool("echo_echo", {"message": "scraped"})
        # One refused request, for the auth-failure series.
        subprocess.run(["curl", "-sS", "-o", "/dev/null", "-X", "POST", f"http://127.0.0.1:{port}/mcp"],
                       check=True)
        query = urllib.parse.quote('moat_calls_total{tool="echo_echo",outcome="ok"}')
        failures = urllib.parse.quote('moat_auth_failures_total{kind="missing"}')
        slots = urllib.parse.quote("moat_instance_pool_slots")
        deadline = time.monotonic() + 60
        while True:
            try:
                calls = prometheus_value(prometheus_port, query)
                refused = prometheus_value(prometheus_port, failures)
                if calls == 3 and refused == 1 and prometheus_value(prometheus_port, slots) == 256:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.5)
    finally:
        scraper.terminate()
        scraper.wait(timeout=30)
        stop(moat)


def prometheus_value(port: int, query: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?query={query}", timeout=10) as response:
        answer = json.loads(response.read())
    results = answer["data"]["result"]
    return float(results[0]["value"][1]) if results else None
