"""`moat config schema`: the JSON Schema of moat.toml that editors check the file against, as the
command prints it, and `moat config HOST` unchanged beside it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from conftest import REPO_ROOT


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=60)


def test_moat_config_schema_prints_the_committed_schema(moat_bin: Path) -> None:
    result = run(moat_bin, "config", "schema")
    assert result.returncode == 0, result.stderr
    committed = (REPO_ROOT / "moat.schema.json").read_text()
    assert result.stdout == committed, "moat.schema.json is stale: run `moat config schema > moat.schema.json`"
    schema = json.loads(result.stdout)
    assert schema["title"] == "moat.toml"
    assert schema["additionalProperties"] is False


def test_moat_config_still_wants_a_host(moat_bin: Path, plugin: Callable[[str], Path]) -> None:
    missing = run(moat_bin, "config")
    assert missing.returncode == 2
    assert "<HOST>" in missing.stderr
    unknown = run(moat_bin, "config", "schemas")
    assert unknown.returncode == 2
    assert "invalid value 'schemas'" in unknown.stderr
    cursor = run(moat_bin, "config", "cursor", plugin("echo"))
    assert cursor.returncode == 0, cursor.stderr
    assert "mcpServers" in json.loads(cursor.stdout)
