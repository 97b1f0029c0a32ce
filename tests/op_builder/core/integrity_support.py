"""Helpers of the cache-integrity tests: a real op built once per session, cloned per test, loaded
in child processes so a crash inside ``dlopen`` fails one test instead of the run.

The op is ``cpu_lion`` at the ``portable`` SIMD level (the smallest flags; about 5 s to build on two cores).
Every child uses the same compiler wrapper, so every clone of the template has the same cache key; the
wrapper runs the real g++ unless ``INTEG_CXX`` asks it to fail in a given way (a failed rebuild is how the
tests see that a tampered entry was not loaded, without paying for a build each time).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
OP = "cpu_lion"
BUILDER = "CPULionBuilder"
REAL_CXX = shutil.which("g++") or shutil.which("c++") or "c++"
NOBODY = 65534

WRAPPER = """#!/bin/sh
# A C++ compiler for tests: INTEG_CXX selects a failure, else the real compiler runs.
case " $* " in *" -c "*|*" -shared "*)
  case "${{INTEG_CXX:-}}" in
    fail) echo "fake-cxx: error: told to fail" >&2; exit 1;;
    sleep) echo "$$ $(cut -d' ' -f5 /proc/$$/stat)" >> "$INTEG_PIDS"; exec sleep 300;;
    enospc) echo "x.cpp:1: fatal error: error writing to /tmp/ccA.s: No space left on device" >&2
            echo "compilation terminated." >&2; exit 1;;
    segv) kill -SEGV $$;;
    ice) echo "x.cpp: In function 'f': x.cpp:3:1: internal compiler error: Segmentation fault" >&2
         echo "c++: internal compiler error: Segmentation fault signal terminated program cc1plus" >&2; exit 4;;
  esac;;
esac
if [ "$1" = "--version" ] && [ "${{INTEG_VERSION:-}}" = fail ]; then
  printf 'broken \\377\\376 version\\n' >&2; exit 3
fi
exec {real} "$@"
"""

LOAD_SCRIPT = r"""
import json, os, sys, traceback
import torch
from anyaccel.op_builder import {builder}
from anyaccel.op_builder.errors import OpBuilderError

def attempt():
    try:
        m = {builder}().load()
    except OpBuilderError as exc:
        return {{"ok": False, "type": type(exc).__name__, "code": exc.code, "message": str(exc),
                 "path": str(getattr(exc, "path", "") or "")}}
    except Exception as exc:  # an untyped error is a test failure, reported as such
        return {{"ok": False, "type": type(exc).__name__, "code": None, "message": traceback.format_exc()}}
    p = torch.ones(64)
    g = torch.full((64,), 0.5)
    m.lion_step([p], [g], [torch.zeros(64)], [], 0.1, 0.9, 0.99, 0.0)
    return {{"ok": True, "source": m.source, "path": str(m.path), "namespace": m.namespace,
             "correct": bool(torch.allclose(p, torch.full((64,), 0.9)))}}

results = [attempt()]
for value in json.loads(os.environ.get("INTEG_THEN", "[]")):  # further loads in this process, INTEG_CXX=value
    os.environ["INTEG_CXX"] = value
    results.append(attempt())
print(json.dumps(results))
"""


def make_wrapper(directory: Path) -> Path:
    """Write the compiler wrapper into ``directory`` (mode 0700) and return it."""
    path = directory / "integ-cxx"
    path.write_text(WRAPPER.format(real=REAL_CXX))
    path.chmod(0o700)
    return path


def child_env(cache: Path, cxx: Path, **extra: str) -> dict[str, str]:
    """The environment of a child: this repository first on PYTHONPATH, the cache, the wrapper, SIMD level
    portable, no prebuilt artifacts, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANYACCEL_", "INTEG_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]), ANYACCEL_CACHE_DIR=str(cache),
               ANYACCEL_CPU_ISA="portable", ANYACCEL_PREBUILT_DIR=str(cache.parent / "no-prebuilt"), CXX=str(cxx))
    env.pop("MAX_JOBS", None)
    env.update(extra)
    return env


def run_python(code: str, env: dict[str, str], timeout: float = 300, umask: int | None = None,
               prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child Python (optionally under ``umask`` and after a ``prefix`` command)."""
    if umask is not None:
        code = f"import os; os.umask({umask:#o})\n" + code
    return subprocess.run([*(prefix or []), sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=str(REPO))


def load_in_child(env: dict[str, str], then: list[str] | None = None, timeout: float = 300,
                  umask: int | None = None, prefix: list[str] | None = None) -> tuple[list[dict[str, Any]], str]:
    """Load the op in a child process (then load again once per value of ``then``, with ``INTEG_CXX`` set to it).

    Returns:
        (one result dict per load, the child's stderr).

    Raises:
        AssertionError: the child crashed (a signal: SIGBUS/SIGSEGV inside ``dlopen``) or printed no result.
    """
    if then:
        env = {**env, "INTEG_THEN": json.dumps(then)}
    proc = run_python(LOAD_SCRIPT.format(builder=BUILDER), env, timeout, umask, prefix)
    assert proc.returncode == 0, (f"the loading process died (return code {proc.returncode}; negative: that "
                                  f"signal):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


class Template:
    """A cache holding one clean build of the op, built under ``umask 0`` in a child.

    Attributes:
        root: the cache root.
        cxx: the compiler wrapper (part of the key: every clone must use it).
        entry: the entry directory, relative to the root.
        stderr: what the building child printed on stderr.
    """

    def __init__(self, base: Path) -> None:
        self.cxx = make_wrapper(base)
        self.root = base / "template-cache"
        results, self.stderr = load_in_child(child_env(self.root, self.cxx), umask=0)
        assert results[0]["ok"] and results[0]["source"] == "built" and results[0]["correct"], results
        self.entry = Path(results[0]["path"]).parent.relative_to(self.root)
        self.key = self.entry.name

    def clone(self, dest: Path) -> Path:
        """A private copy of the template cache at ``dest`` (links copied as links); returns its root."""
        shutil.copytree(self.root, dest, symlinks=True)
        return dest

    def env(self, cache: Path, **extra: str) -> dict[str, str]:
        """:func:`child_env` with this template's wrapper."""
        return child_env(cache, self.cxx, **extra)


def other_isa_library(base: Path, template: Template) -> Path:
    """A library of the same op built for another SIMD level (``avx2`` where the CPU has it, else a build
    with another define), in its own cache; returns its ``op.so``."""
    cache = base / "other-isa-cache"
    env = template.env(cache, ANYACCEL_CPU_ISA="avx2")
    results, _ = load_in_child(env)
    if not results[0]["ok"]:  # no AVX2 here: a build for another compiler (wrapper copy) is another build too
        other = base / "other-cxx"
        other.mkdir(exist_ok=True)
        results, _ = load_in_child(child_env(cache, make_wrapper(other)))
    assert results[0]["ok"], results
    return Path(results[0]["path"])


def modes(root: Path) -> dict[str, str]:
    """``relative path -> 'kind mode'`` of everything under ``root`` (links not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            kind = "link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "file"
            out[str(path.relative_to(root))] = f"{kind} {stat.S_IMODE(st.st_mode):o}"
    return out


def quarantined(cache: Path) -> list[str]:
    """The names in the cache's quarantine."""
    q = cache / "quarantine"
    return sorted(p.name for p in q.iterdir()) if q.is_dir() else []


def readonly_prefix(path: Path) -> list[str] | None:
    """A command prefix that runs a child with ``path`` mounted read-only (root: a private mount namespace), or
    None where that is impossible here. For a non-root user the caller uses ``chmod`` instead."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return None
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", f"mount --bind '{path}' '{path}' && mount -o "
                            f"remount,bind,ro '{path}' && ! touch '{path}/.rw-probe' 2>/dev/null"],
                           capture_output=True, timeout=30)
    if probe.returncode != 0:
        return None
    return ["unshare", "--mount", "sh", "-c", f"mount --bind '{path}' '{path}' && mount -o remount,bind,ro '{path}' "
            "&& exec \"$@\"", "sh"]
