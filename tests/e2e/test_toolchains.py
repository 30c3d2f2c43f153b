"""What `moat inspect` and `moat serve` make of components other toolchains build: one that
imports an interface moat does not offer is refused with the import named and what moat offers,
and `inspect` still shows its imports and exports.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


def leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def name(text: str) -> bytes:
    return leb128(len(text.encode())) + text.encode()


def vec(items: list[bytes]) -> bytes:
    return leb128(len(items)) + b"".join(items)


def section(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + leb128(len(body)) + body


def importing(interface: str) -> bytes:
    """A component (binary format, by hand) that imports `interface` as an instance whose one
    function `get` returns a u32, and exports nothing."""
    func = b"\x40" + vec([]) + b"\x00\x79"  # func() -> u32
    instance = b"\x42" + vec([b"\x01" + func, b"\x04\x00" + name("get") + b"\x01" + leb128(0)])
    types = section(7, vec([instance]))
    imports = section(10, vec([b"\x00" + name(interface) + b"\x05" + leb128(0)]))
    return b"\x00asm\x0d\x00\x01\x00" + types + imports


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_inspect_shows_what_an_unlinkable_component_imports(moat_bin: Path, tmp_path: Path) -> None:
    wasm = tmp_path / "wasi3.wasm"
    wasm.write_bytes(importing("wasi:cli/environment@0.3.0"))

    shown = run(moat_bin, "inspect", wasm)
    assert shown.returncode == 1, shown.stderr
    assert "cannot load:" in shown.stdout
    assert "`wasi:cli/environment@0.3.0`, a version moat does not offer" in shown.stdout
    assert "moat offers wasi:cli@0.2.12" in shown.stdout
    assert "imports:\n  wasi:cli/environment@0.3.0\n" in shown.stdout
    assert "exports:\n  (none)" in shown.stdout

    report = run(moat_bin, "inspect", "--json", wasm)
    assert report.returncode == 1, report.stderr
    parsed = json.loads(report.stdout)
    assert parsed["imports"] == ["wasi:cli/environment@0.3.0"]
    assert parsed["exports"] == []
    assert "does not offer" in parsed["error"]


def test_serve_names_each_import_moat_does_not_offer(moat_bin: Path, tmp_path: Path) -> None:
    wasm = tmp_path / "vault.wasm"
    wasm.write_bytes(importing("acme:vault/secrets@1.0.0"))
    served = run(moat_bin, "serve", wasm)
    assert served.returncode != 0
    assert 'plugin "vault" cannot link' in served.stderr, served.stderr
    assert "`acme:vault/secrets@1.0.0`, which moat does not offer" in served.stderr
    assert "wasi:config" in served.stderr
