"""Finding the host toolchain (C++ compiler, ninja) and sizing a build.

Two kinds of functions live here, and the split matters for speed (user pain P5):

- *identity* functions (:func:`find_cxx`, :func:`file_identity`) only look at the file system. The cache
  key uses them, so a warm load in a fresh process spawns no process at all.
- *version* functions (:func:`tool_version`, :func:`describe`) run ``--version``. They are called only
  while building (the version goes into the manifest) and by ``anyaccel report``.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from anyaccel.op_builder.core.errors import ToolchainError

logger = logging.getLogger(__name__)

# Tried in this order after $CXX (the names torch.utils.cpp_extension and distutils use).
CXX_CANDIDATES: tuple[str, ...] = ("c++", "g++", "clang++")
# Peak resident memory of one compile of a TORCH_LIBRARY translation unit is about 1 GiB with g++ 12;
# budget 1.5 GiB per job so parallel compiles do not run the machine out of memory (user pain P13).
BYTES_PER_JOB: int = 3 * 2**29


def find_tool(env: Mapping[str, str] | None, override_var: str, candidates: Sequence[str],
              missing_code: str, fix: str) -> Path | None:
    """Resolve a tool: ``$<override_var>`` (its first word, a name or a path) else the first of ``candidates``
    on ``PATH``. File-system lookups only: no process is started, so the cache key may call this.

    Args:
        env: environment to read ``override_var`` and ``PATH`` from; ``os.environ`` when None.
        override_var: the variable that names the tool (``CXX``, ``ANYACCEL_SYCL_CXX``).
        candidates: names tried on ``PATH`` when the variable is unset or empty.
        missing_code: the diagnosis code raised when the variable names nothing executable.
        fix: the end of that error's message, saying what to set instead.

    Returns:
        The tool's absolute path with symlinks kept (``c++`` and ``g++`` differ only by name), or None.

    Raises:
        ToolchainError: ``missing_code`` when the variable is set but names nothing executable (silently
            falling back to another tool would hide the user's mistake).
    """
    env = os.environ if env is None else env
    path_var = env.get("PATH", os.defpath)
    override = env.get(override_var, "").strip()
    if override:
        found = shutil.which(shlex.split(override)[0], path=path_var)
        if found is None:
            raise ToolchainError(missing_code, f"{override_var}={override!r} names no executable file "
                                               f"(searched PATH too); {fix}")
        return Path(os.path.abspath(found))
    for name in candidates:
        found = shutil.which(name, path=path_var)
        if found is not None:
            return Path(os.path.abspath(found))
    return None


def find_cxx(env: Mapping[str, str] | None = None) -> Path | None:
    """Resolve the C++ compiler: ``$CXX`` else :data:`CXX_CANDIDATES` on ``PATH`` (see :func:`find_tool`).

    Raises:
        ToolchainError: ``compiler_missing`` when ``$CXX`` is set but names nothing executable.
    """
    return find_tool(env, "CXX", CXX_CANDIDATES, "compiler_missing",
                     f"set CXX to an installed C++ compiler or unset it to use one of {', '.join(CXX_CANDIDATES)}")


def require_cxx(env: Mapping[str, str] | None = None) -> Path:
    """Like :func:`find_cxx` but raises ``ToolchainError("compiler_missing")`` when none is found."""
    found = find_cxx(env)
    if found is None:
        raise ToolchainError(
            "compiler_missing",
            f"no C++ compiler found: CXX is unset and none of {', '.join(CXX_CANDIDATES)} is on PATH",
        )
    return found


def find_ninja(env: Mapping[str, str] | None = None) -> Path | None:
    """Find ninja: the ``ninja`` Python package's binary first, then ``PATH`` (user pain P11).

    Returns:
        The path of the ninja executable, or None.
    """
    env = os.environ if env is None else env
    try:
        import ninja  # the PyPI package that ships the binary; tiny import

        candidate = Path(ninja.BIN_DIR) / "ninja"
        if os.access(candidate, os.X_OK):
            return candidate
    except (ImportError, AttributeError):
        pass
    found = shutil.which("ninja", path=env.get("PATH", os.defpath))
    return Path(found) if found else None


def require_ninja(env: Mapping[str, str] | None = None) -> Path:
    """Like :func:`find_ninja` but raises ``ToolchainError("ninja_missing")`` when none is found."""
    found = find_ninja(env)
    if found is None:
        raise ToolchainError("ninja_missing", "ninja is neither installed as a Python package nor on PATH")
    return found


def file_identity(path: Path) -> dict[str, object]:
    """A cheap fingerprint of a tool for the cache key: resolved path, size in bytes and mtime in ns.

    A compiler upgrade replaces the file, which changes size or mtime; no process is started.
    """
    real = Path(os.path.realpath(path))
    st = real.stat()
    return {"path": str(path), "real_path": str(real), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def tool_version(path: Path, args: tuple[str, ...] = ("--version",), timeout_s: float = 30.0) -> str:
    """The first line of ``<path> --version``, or ``"unknown (<reason>)"``.

    Side effects: starts a process. Never call this on the load path.
    """
    try:
        out = subprocess.run([str(path), *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else f"unknown (exit {out.returncode})"


def available_memory_bytes() -> int | None:
    """``MemAvailable`` from /proc/meminfo in bytes, or None where that file does not exist."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def build_jobs(
    env: Mapping[str, str] | None = None,
    cpu_count: int | None = None,
    mem_available: int | None = None,
    bytes_per_job: int = BYTES_PER_JOB,
) -> int:
    """How many compiler processes a build may run at once.

    ``MAX_JOBS`` wins (the variable torch.utils.cpp_extension and DeepSpeed honour); otherwise the minimum
    of the usable cores and ``mem_available // bytes_per_job``, at least 1.

    Args:
        env: environment to read ``MAX_JOBS`` from; ``os.environ`` when None.
        cpu_count: usable cores; ``len(os.sched_getaffinity(0))`` (or ``os.cpu_count()``) when None.
        mem_available: available memory in bytes; :func:`available_memory_bytes` when None.
        bytes_per_job: memory budget of one compile in bytes.

    Raises:
        ValueError: ``MAX_JOBS`` is set but is not a positive integer.
    """
    env = os.environ if env is None else env
    raw = env.get("MAX_JOBS", "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"MAX_JOBS={raw!r} is not a positive integer; set it to e.g. 1 or 4, or unset it")
        return int(raw)
    if cpu_count is None:
        cpu_count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = max(1, cpu_count)
    mem = available_memory_bytes() if mem_available is None else mem_available
    if mem is not None:
        jobs = min(jobs, max(1, mem // bytes_per_job))
    return jobs


def python_tag() -> str:
    """The interpreter's tag for the cache key, e.g. ``cpython-311`` (``sys.implementation.cache_tag``)."""
    return sys.implementation.cache_tag or f"{sys.implementation.name}-{sys.version_info[0]}{sys.version_info[1]}"
