"""`moat lint`: what in a plugin makes a model choose or call its tools wrong, on the command line
as CI runs it (`--strict`), and the same list at the end of `moat inspect`."""

import json
import subprocess
from pathlib import Path
from typing import Callable

BUNDLED = ["echo", "fetch", "filesystem", "memory", "notebook", "text", "time", "weather"]


def run(moat_bin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(moat_bin), *args], capture_output=True, text=True, timeout=120)


def test_strict_lint_fails_on_findings_and_names_them(moat_bin: Path, plugin: Callable[[str], Path]) -> None:
    plain = run(moat_bin, "lint", str(plugin("views")))
    assert plain.returncode == 0, plain.stderr
    strict = run(moat_bin, "lint", "--strict", str(plugin("views")))
    assert strict.returncode == 1, strict.stderr
    assert strict.stdout == plain.stdout
    lines = strict.stdout.splitlines()
    assert lines[0].startswith("views: ") and lines[0].endswith(" findings"), lines
    assert "  views_cancel_trip: no @read-only hint (true or false)" in lines, lines
    assert "  views_cancel_trip.tripId: the parameter has no description" in lines, lines
    assert not any(line.startswith("  views_plan_trip") for line in lines), lines


def test_json_lint_lists_each_finding(moat_bin: Path, plugin: Callable[[str], Path]) -> None:
    out = run(moat_bin, "lint", "--json", str(plugin("views")))
    assert out.returncode == 0, out.stderr
    [report] = json.loads(out.stdout)
    assert report["plugin"] == "views"
    assert {"subject": "views_cancel_trip", "message": "no @open-world hint (does it reach beyond its own data?)"} in report[
        "findings"
    ]


def test_every_bundled_plugin_lints_clean(moat_bin: Path, plugin: Callable[[str], Path]) -> None:
    out = run(moat_bin, "lint", "--strict", *(str(plugin(name)) for name in BUNDLED))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [f"{name}: no findings" for name in BUNDLED]


def test_inspect_ends_with_the_lint(moat_bin: Path, plugin: Callable[[str], Path]) -> None:
    out = run(moat_bin, "inspect", str(plugin("views")))
    assert out.returncode == 0, out.stderr
    tail = out.stdout[out.stdout.rindex("\nlint: ") :]
    assert "views_cancel_trip: the description says what the tool does but not when" in tail, tail
