"""scripts/gen_environment_doc.py: docs/environment.md's table is the one anyaccel/settings.py renders."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_environment_doc.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_the_document_agrees_with_the_settings() -> None:
    result = _run("--check")
    assert result.returncode == 0, result.stderr


def test_a_document_that_disagrees_fails_the_check_and_is_rewritten(tmp_path: Path) -> None:
    doc = tmp_path / "environment.md"
    text = (ROOT / "docs" / "environment.md").read_text()
    doc.write_text(text.replace("| `ANYACCEL_STRICT` |", "| `ANYACCEL_STRICTER` |"))
    result = _run("--check", "--doc", str(doc))
    assert result.returncode == 1 and "ANYACCEL_STRICTER" in result.stderr
    assert _run("--doc", str(doc)).returncode == 0 and doc.read_text() == text


def test_a_document_without_the_markers_is_refused(tmp_path: Path) -> None:
    doc = tmp_path / "environment.md"
    doc.write_text("# Environment variables\n")
    result = _run("--check", "--doc", str(doc))
    assert result.returncode != 0 and "do not edit" in result.stderr
