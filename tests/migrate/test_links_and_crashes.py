"""``anyaccel migrate`` on files that are not plain files (symbolic links, hard links) and on sources that
crash or stall libcst's native parser (deep nesting, very long expression chains). Every parser case runs
the command in a child process, so a crash fails the test instead of killing pytest."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from anyaccel.migrate import cli

REPO = Path(__file__).resolve().parents[2]
CUDA_CODE = "import torch\n\n\ndef step(x):\n    torch.cuda.synchronize()\n    return x\n"
MIGRATED = "get_accelerator().synchronize()"


def _run(argv: list[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    code = cli.run(parser.parse_args(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _real(tmp_path: Path, name: str = "real.py") -> Path:
    real = tmp_path / "elsewhere" / name
    real.parent.mkdir(exist_ok=True)
    real.write_text(CUDA_CODE, encoding="utf-8")
    return real


def test_write_through_a_symbolic_link_rewrites_its_target_and_keeps_the_link(tmp_path):
    real = _real(tmp_path)
    link = tmp_path / "link.py"
    link.symlink_to(real)
    code, _, _ = _run(["--write", str(link)])
    assert code == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert MIGRATED in real.read_text(encoding="utf-8")


def test_write_through_a_link_to_a_link(tmp_path):
    real = _real(tmp_path)
    hop = tmp_path / "hop.py"
    hop.symlink_to(real)
    link = tmp_path / "link.py"
    link.symlink_to(hop)
    assert _run(["--write", str(link)])[0] == 0
    assert link.is_symlink() and hop.is_symlink() and MIGRATED in real.read_text(encoding="utf-8")


def test_a_tree_with_a_link_rewrites_each_real_file_once_and_keeps_the_link(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    real = tree / "real.py"
    real.write_text(CUDA_CODE, encoding="utf-8")
    (tree / "alias.py").symlink_to("real.py")
    code, out, _ = _run(["--diff", str(tree)])
    assert code == 0 and out.count("+    get_accelerator().synchronize()") == 1
    assert _run(["--write", str(tree)])[0] == 0
    assert (tree / "alias.py").is_symlink() and MIGRATED in real.read_text(encoding="utf-8")
    assert sorted(p.name for p in tree.iterdir()) == ["alias.py", "real.py"]


def test_write_keeps_hard_links(tmp_path):
    real = _real(tmp_path)
    twin = tmp_path / "twin.py"
    os.link(real, twin)
    inode = real.stat().st_ino
    os.chmod(real, 0o640)
    assert _run(["--write", str(twin)])[0] == 0
    assert real.stat().st_ino == twin.stat().st_ino == inode and real.stat().st_nlink == 2
    assert MIGRATED in real.read_text(encoding="utf-8") and real.read_text() == twin.read_text()
    assert (real.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.py"]  # no temporary file left


@pytest.mark.parametrize("target", ["dangling", "loop"])
def test_a_broken_link_is_reported_not_written(tmp_path, target):
    link = tmp_path / "link.py"
    if target == "dangling":
        link.symlink_to(tmp_path / "missing.py")
    else:
        other = tmp_path / "other.py"
        link.symlink_to(other)
        other.symlink_to(link)
    code, _, err = _run(["--write", str(link)])
    assert code == 1 and f"{link}:0:0: unreadable" in err
    assert link.is_symlink() and not (tmp_path / "missing.py").exists()


# ---------------------------------------------------------------- libcst's parser: crashes and stalls

DEEP = {
    "parens 5000": "x = " + "(" * 5000 + "1" + ")" * 5000 + "\n",
    "brackets 1000": "x = " + "[" * 1000 + "]" * 1000 + "\n",
    "unary minus 100000": "x = " + "-" * 100_000 + "1\n",
    "not 20000": "x = " + "not " * 20_000 + "1\n",
    "attributes 100000": "x = a" + ".b" * 100_000 + "\n",
    "lambdas 5000": "x = " + "lambda: " * 5000 + "1\n",
    "and-chain 10000": "x = " + " and ".join(["a"] * 10_000) + "\n",
    "plus-chain 10000": "x = " + "+".join(["1"] * 10_000) + "\n",
}


@pytest.mark.parametrize("name", list(DEEP))
def test_a_source_too_deep_for_the_parser_is_a_clear_per_file_error(tmp_path, name):
    deep = tmp_path / "deep.py"
    deep.write_text("import torch\n" + DEEP[name], encoding="utf-8")
    fine = tmp_path / "fine.py"
    fine.write_text(CUDA_CODE, encoding="utf-8")
    try:
        proc = subprocess.run([sys.executable, "-m", "anyaccel", "migrate", "--write", str(deep), str(fine)],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired:
        pytest.fail("hung: anyaccel migrate did not finish in 120 s")
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert f"{deep}:" in proc.stderr and "too-complex" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert deep.read_text(encoding="utf-8").startswith("import torch\n")
    assert MIGRATED in fine.read_text(encoding="utf-8")  # the other file was still migrated


def test_a_file_that_cannot_be_written_is_a_per_file_error(tmp_path, monkeypatch):
    from anyaccel.migrate import files

    stuck = _real(tmp_path, "stuck.py")
    fine = _real(tmp_path, "fine.py")

    def refuse(path: str, source: files.SourceText) -> None:
        if path.endswith("stuck.py"):
            raise OSError(30, "Read-only file system", path)
        real_write(path, source)

    real_write = files.write_atomic
    monkeypatch.setattr(files, "write_atomic", refuse)
    code, _, err = _run(["--write", str(stuck), str(fine)])
    assert code == 1 and f"{stuck}:0:0: unwritable: " in err and "Read-only file system" in err
    assert stuck.read_text(encoding="utf-8") == CUDA_CODE and MIGRATED in fine.read_text(encoding="utf-8")


def test_migrate_source_screens_what_cpython_refuses_in_process():
    from anyaccel.migrate.engine import migrate_source

    source = "import torch\nx = " + "(" * 5000 + "1" + ")" * 5000 + "\n"
    code = ("import sys; from anyaccel.migrate.engine import migrate_source; "
            "r = migrate_source(sys.stdin.read(), 'deep.py', frozenset()); "
            "print(r.error.kind, r.rewritten == r.original)")
    proc = subprocess.run([sys.executable, "-c", code], input=source, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (proc.returncode, proc.stdout.strip()) == (0, "too-complex True"), proc.stderr[-1000:]
    assert migrate_source(CUDA_CODE, "fine.py", frozenset()).changed
