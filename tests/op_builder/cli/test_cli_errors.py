"""The command line fails loudly and cleanly. ``anyaccel build`` exits non-zero when an op it
was asked for failed, was skipped or does not exist for the accelerator, and on an unknown accelerator;
``anyaccel report --json`` stays JSON with a bad ``ANYACCEL_ACCELERATOR``; ``cache ls``/``clean`` print errors,
not tracebacks; ``clean --all`` copes with whatever it finds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from anyaccel.op_builder.core.cache import Cache

REPO = Path(__file__).resolve().parents[3]


def anyaccel(*argv: str, cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("ANYACCEL_")}
    full.update(PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                ANYACCEL_CACHE_DIR=str(cache), **env)
    return subprocess.run([sys.executable, "-m", "anyaccel", *argv], env=full, capture_output=True, text=True,
                          timeout=300, cwd=REPO)


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr


def test_build_unknown_accelerator_lists_the_valid_ones(tmp_path):
    proc = anyaccel("build", "--accelerator", "bogus", cache=tmp_path / "c")
    assert proc.returncode == 2, proc.stderr
    no_traceback(proc)
    assert "'bogus'" in proc.stderr and "cpu, cuda" in proc.stderr and "'*'" in proc.stderr


def test_build_named_op_without_a_build_for_the_accelerator(tmp_path):
    proc = anyaccel("build", "--ops", "FusedAdamBuilder", cache=tmp_path / "c")
    assert proc.returncode == 1, proc.stderr
    no_traceback(proc)
    assert "no build for accelerator '*'" in proc.stderr and "cuda" in proc.stderr


def test_build_named_op_skipped_for_a_missing_toolchain(tmp_path):
    proc = anyaccel("build", "--ops", "CPULionBuilder", cache=tmp_path / "c", CXX=str(tmp_path / "no-such-c++"),
                    ANYACCEL_CPU_ISA="portable")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    no_traceback(proc)
    assert "skipped" in proc.stdout and "was asked for but skipped" in proc.stderr and "no-such-c++" in proc.stderr


@pytest.mark.slow
def test_build_named_op_that_fails(tmp_path):
    cxx = tmp_path / "cxx"
    cxx.write_text("#!/bin/sh\ncase \" $* \" in *\" -c \"*) echo 'x.cpp:1:1: error: nope' >&2; exit 1;; esac\n"
                   "exec g++ \"$@\"\n")
    cxx.chmod(0o700)
    proc = anyaccel("build", "--ops", "cpu_lion", cache=tmp_path / "c", CXX=str(cxx), ANYACCEL_CPU_ISA="portable")
    assert proc.returncode == 1 and "failed" in proc.stdout, proc.stdout + proc.stderr
    no_traceback(proc)


def test_report_json_with_a_bad_accelerator(tmp_path):
    proc = anyaccel("report", "--json", cache=tmp_path / "c", ANYACCEL_ACCELERATOR="bogus")
    assert proc.returncode == 1, proc.stderr
    no_traceback(proc)
    report = json.loads(proc.stdout)
    assert "bogus" in report["accelerator"]["error"] and report["ops"] == []
    assert report["errors"][0]["section"] == "accelerator"
    assert report["errors"][0]["type"] == "UnknownAcceleratorError" and "valid names" in report["errors"][0]["message"]
    text = anyaccel("report", cache=tmp_path / "c", ANYACCEL_ACCELERATOR="bogus")
    assert text.returncode == 1 and "error (accelerator)" in text.stdout
    no_traceback(text)


@pytest.mark.parametrize("problem", ["world-writable", "is-a-file", "under-a-file", "insecure-op-dir"])
@pytest.mark.parametrize("command", [["cache", "ls"], ["cache", "clean"], ["cache", "clean", "--all"]])
def test_cache_commands_print_clean_errors(tmp_path, problem, command):
    root = tmp_path / "c"
    if problem == "world-writable":
        root.mkdir()
        root.chmod(0o777)
    elif problem == "is-a-file":
        root.write_text("x")
    elif problem == "under-a-file":
        (tmp_path / "f").write_text("x")
        root = tmp_path / "f" / "c"
    else:
        (root / "ops").mkdir(mode=0o700, parents=True)  # `cache ls` only reads: it creates no folder
        root.chmod(0o700)
        (root / "ops" / "cpu_lion").mkdir(mode=0o700)
        (root / "ops" / "cpu_lion").chmod(0o777)
    proc = anyaccel(*command, cache=root)
    no_traceback(proc)
    if problem == "insecure-op-dir":
        if command[-1] == "ls":
            assert proc.returncode == 0 and "insecure:" in proc.stdout and "chmod go-w" in proc.stdout
        else:  # nothing in it can be trusted: removed
            assert proc.returncode == 0 and not (root / "ops" / "cpu_lion").exists(), proc.stderr
        return
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout
    expected = "writable by group or others" if problem == "world-writable" else "is a file"
    assert expected in proc.stderr and "ANYACCEL_CACHE_DIR" in proc.stderr, proc.stderr


def test_clean_all_copes_with_anything(tmp_path):
    root = tmp_path / "c"
    Cache.open(root)  # creates the layout (`cache ls` only reads)
    (root / "ops" / "stray.txt").write_text("x")
    (root / "ops" / "dangling").symlink_to(tmp_path / "nowhere")
    (root / "ops" / "cpu_lion").mkdir(mode=0o700)
    (root / "ops" / "cpu_lion" / "notes").write_text("x")
    (root / "ops" / "cpu_lion" / "half").mkdir(mode=0o700)  # an entry without anything in it
    (root / "logs" / "a-folder" / "deeper").mkdir(parents=True)
    (root / "logs" / "link").symlink_to(tmp_path / "nowhere")
    (root / "tmp" / "x-0123456789-abc").mkdir()
    (root / "tmp" / "file").write_text("x")
    (root / "quarantine" / "cpu_lion-abc-insecure").mkdir()
    (root / "locks" / "folder").mkdir()
    keep = tmp_path / "outside"
    keep.mkdir()
    (keep / "precious").write_text("x")
    (root / "logs" / "to-outside").symlink_to(keep)
    (root / "unknown-top-level").write_text("not ours")
    ls = anyaccel("cache", "ls", cache=root)
    assert ls.returncode == 0 and "unexpected:" in ls.stdout and "damaged: no-manifest" in ls.stdout, ls.stdout
    no_traceback(ls)
    proc = anyaccel("cache", "clean", "--all", cache=root)
    assert proc.returncode == 0, proc.stderr
    no_traceback(proc)
    for sub in ("ops", "logs", "tmp", "quarantine"):
        assert list((root / sub).iterdir()) == [], sub
    assert all(p.is_file() and not p.is_symlink() for p in (root / "locks").iterdir()), "only lock files stay"
    assert not (root / "locks" / "folder").exists()
    assert (keep / "precious").read_text() == "x", "a link is removed, never followed"
    assert (root / "unknown-top-level").exists(), "nothing outside the cache's own folders is touched"


@pytest.mark.parametrize("name", [b"bad\xffdir", b"caf\xe9", b"half\xe2\x82"], ids=["ff", "latin-1", "cut-utf-8"])
def test_build_into_a_cache_path_that_is_not_utf8_names_the_path(tmp_path, name):
    """A non-UTF-8 cache root is named, not a codec error; the build failed with "'utf-8' codec can't encode
    character '\\udcff'", naming no path
    (ninja's build file could not hold it); now a CacheUnusableError names the path's bytes and the fix, and
    nothing is created."""
    cache = Path(os.fsdecode(os.fsencode(tmp_path) + b"/" + name))
    proc = anyaccel("build", "--ops", "pin_memory", cache=cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    no_traceback(proc)
    assert repr(os.fsencode(cache)) in proc.stdout and "is not valid UTF-8" in proc.stdout, proc.stdout
    assert "set ANYACCEL_CACHE_DIR" in proc.stdout
    assert not os.path.lexists(cache)


def test_opening_a_non_utf8_cache_to_read_still_works(tmp_path):
    """``cache ls`` / ``clean`` read (create=False): the check is for writing builds only."""
    cache = Path(os.fsdecode(os.fsencode(tmp_path) + b"/ro\xff"))
    assert Cache.open(cache, create=False).root == cache
    from anyaccel.op_builder.errors import CacheUnusableError

    with pytest.raises(CacheUnusableError) as info:
        Cache.open(cache)
    assert info.value.code == "cache_not_utf8" and info.value.path == cache
