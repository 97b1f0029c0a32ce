"""The build's process-wide helpers: per-key thread locks, the build's progress context, failure logs and
the linker choice.

The build itself (toolchain hooks, the ninja build, the atomic publication) is the "build" section of
[`OpBuilder`][anyaccel.op_builder.core.builder.OpBuilder].
"""

from __future__ import annotations

import contextvars
import functools
import logging
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from anyaccel.op_builder.core import cache as cache_mod
from anyaccel.op_builder.core import integrity
from anyaccel.op_builder.core.progress import BuildProgress

logger = logging.getLogger(__name__)

LIBRARY_NAME = integrity.LIBRARY_NAME

# The progress display of the build running in this context (read by compile(), whose signature backends
# override, so it is not a parameter).
_PROGRESS: contextvars.ContextVar[BuildProgress | None] = contextvars.ContextVar("anyaccel_build_progress",
                                                                                  default=None)
# One in-process lock per cache key: a load and an AOT build of the same key in two threads run one at a time.
_KEY_LOCKS: dict[str, threading.Lock] = {}
_STATE_LOCK = threading.Lock()


def key_lock(key: str) -> threading.Lock:
    """The in-process lock of cache key ``key`` (created on first use)."""
    with _STATE_LOCK:
        return _KEY_LOCKS.setdefault(key, threading.Lock())


def _ninja_command(log_text: str) -> str:
    """The command ninja reports after ``FAILED:``, or ""."""
    lines = log_text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("FAILED:") and i + 1 < len(lines):
            return lines[i + 1].strip()
    return ""


def _write_log(path: Path, text: str) -> Path | None:
    """Write a failure log (mode 0600); returns its path, or None when it could not be written (a full disk:
    the error being reported matters more than its log)."""
    try:
        cache_mod.write_file(path, text)
    except OSError as exc:
        logger.warning("could not write the build log %s: %s", path, exc)
        return None
    return path


def _fast_linker(cxx: str) -> tuple[str, ...]:
    """``("-fuse-ld=gold",)`` when GNU gold is installed beside a GCC or Clang driver, else ``()``.

    Linking against ``libtorch_cpu.so`` (430 MB) takes 0.5 s with the default BFD linker and 0.17 s with gold
    on the development machine. The linker is a build-host detail, not a key input: the library it makes is
    the same contract.
    """
    name = Path(cxx).name
    if shutil.which("ld.gold") is None or not any(k in name for k in ("g++", "c++", "clang")):
        return ()
    return ("-fuse-ld=gold",) if _gold_links(cxx, shutil.which("ld.gold")) else ()


@functools.cache
def _gold_links(cxx: str, gold: str | None) -> bool:
    """Whether ``cxx -shared -fuse-ld=gold`` links a C++ shared library here (once per compiler, gold found on
    ``PATH`` (``gold``, part of the cache key) and process).

    Gold can fail where the default linker succeeds (a GCC whose ``libstdc++.so`` symlink dangles: BFD skips
    it, gold stops), so it is used only after a trial link of an empty library; the trial costs about 0.1 s
    and runs only when a build is about to link.
    """
    with tempfile.TemporaryDirectory(prefix="anyaccel_gold_") as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text("int anyaccel_gold_probe() { return 0; }\n")
        try:
            proc = subprocess.run([cxx, "-shared", "-fPIC", "-fuse-ld=gold", str(src), "-o", str(Path(tmp) / "p.so")],
                                  capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return False
    if proc.returncode != 0:
        logger.info("gold cannot link with %s here; using the default linker", cxx)
    return proc.returncode == 0
