"""The quick start's `./dev serve` offers a host the plugins meant for people: every bundled plugin
but the test fixtures (the conformance suite's `test_*` tools). The script runs as it is, in a
copy of the repository's plugin manifests, with `cargo` and `rustup` standing in for the build
and a `moat` that prints what it was asked to serve."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

from conftest import REPO_ROOT


def executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_dev_serve_offers_the_bundled_plugins_but_not_the_conformance_fixture(tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    tree.mkdir()
    shutil.copy(REPO_ROOT / "dev", tree / "dev")
    bundled = sorted(p.parent.name for p in (REPO_ROOT / "plugins").glob("*/Cargo.toml"))
    assert "conformance" in bundled and "text" in bundled, bundled
    for name in bundled:
        (tree / "plugins" / name).mkdir(parents=True)
        shutil.copy(REPO_ROOT / "plugins" / name / "Cargo.toml", tree / "plugins" / name / "Cargo.toml")
    fake = tmp_path / "bin"
    executable(fake / "rustup", "#!/bin/sh\necho wasm32-wasip2\n")
    executable(fake / "cargo", "#!/bin/sh\nexit 0\n")
    executable(tree / "target/release/moat", '#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    done = subprocess.run([str(tree / "dev"), "serve"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    command, *served = done.stdout.splitlines()
    assert command == "serve"
    names = sorted(Path(path).stem for path in served)
    assert names == [name.replace("-", "_") for name in bundled if name != "conformance"], names
    assert all(path.startswith("target/wasm-plugins/wasm32-wasip2/release/") for path in served), served
