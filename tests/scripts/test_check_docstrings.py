"""scripts/check_docstrings.py: no comment, docstring or docs page points outside the repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_docstrings.py"

#: One planted reference per rule, each in a comment or a string (the rule, the planted text).
PLANTED = (
    ("shared", "see ../shared/reference/baselines.md"),
    ("user-pain", "the old failure (User pains in the notes)"),
    ("pain-id", "never a crash (P17)"),
    ("issue", "typed errors with a fix (issue 12 item 11)"),
    ("issue", "as asked in Issue #7"),
    ("leadership", "the leadership folder says so"),
    ("session", "not run in this session"),
    ("abs-path", "python x.py /work/ds-checkout"),
    ("abs-path", "a copy in /root/notes"),
    ("probe", "measured with .device_carry/probe_l.py"),
    ("run-id", "two rows per program (run BN: 4.79 -> 4.35 us)"),
    ("run-id", "in runs BC and BD"),
    ("dated", "measured on an H200 (2026-11-24)"),
)


def _run(*targets: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, targets)], capture_output=True, text=True,
                          timeout=120)


def _rules(stdout: str) -> list[tuple[str, int]]:
    """(rule, line) of every reported reference."""
    out = []
    for line in stdout.splitlines():
        where, rule = line.split(": ")[:2]
        out.append((rule, int(where.rsplit(":", 1)[1])))
    return out


def test_the_repository_refers_to_nothing_outside_it() -> None:
    result = _run()
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("rule", "text"), PLANTED, ids=[f"{r}-{i}" for i, (r, _) in enumerate(PLANTED)])
def test_each_reference_is_reported_in_a_comment_a_docstring_and_a_string(tmp_path: Path, rule: str,
                                                                          text: str) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text(f'"""A module.\n\n{text}\n"""\n\nX = 1  # {text}\nY = "{text}"\nZ = f"{{X}} {text}"\n')
    result = _run(pkg)
    assert result.returncode == 1, result.stdout
    assert _rules(result.stdout) == [(rule, 3), (rule, 6), (rule, 7), (rule, 8)], result.stdout


def test_code_itself_and_ordinary_prose_pass(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "ok.py").write_text(
        '"""Two rows per program at <= 1024 rows keep enough loads in flight; we run CI on a P100 and FP8\n'
        "with shared memory, run A/B tests, and cite DeepSpeed #2503 and ``tests/scripts``.\"\"\"\n\n"
        "shared = {}\nP12 = 1\nissue = shared\nwork = '/tmp/work/x'  # a temporary path is not one machine's\n")
    (pkg / "kernel.cpp").write_text("// the shared/private split of the pool; 2x faster than a growing file\n"
                                    "int x = 1;\n")
    result = _run(pkg)
    assert result.returncode == 0, result.stdout


def test_native_sources_are_checked(tmp_path: Path) -> None:
    (tmp_path / "kernel.cu").write_text("int x = 1;\n// measured in run AF, see /home/me/notes\n")
    result = _run(tmp_path)
    assert result.returncode == 1
    assert _rules(result.stdout) == [("abs-path", 2), ("run-id", 2)], result.stdout


def test_docs_pages_may_date_runs_and_benchmark_pages_may_name_them(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "benchmarks").mkdir(parents=True)
    run = "Measured in run BL (2026-11-24): 38.2 -> 35.1 us.\n"
    (docs / "nn_ops.md").write_text(run)
    (docs / "benchmarks" / "index.md").write_text(run)
    (docs / "guide.md").write_text("# Guide\n\n" + run + "As user pain P5 in shared/notes.md says.\n")
    result = _run(docs)
    assert result.returncode == 1
    assert all("guide.md" in line for line in result.stdout.splitlines()), result.stdout
    assert _rules(result.stdout) == [("run-id", 3), ("pain-id", 4), ("shared", 4), ("user-pain", 4)], result.stdout


def test_a_missing_path_is_an_error_not_a_pass(tmp_path: Path) -> None:
    result = _run(tmp_path / "nowhere")
    assert result.returncode == 2
    assert "nowhere" in result.stderr
