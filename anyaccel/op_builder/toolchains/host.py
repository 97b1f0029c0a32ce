"""Finding the host toolchain (C++ compiler, ninja) and sizing a build.

Two kinds of functions live here, and the split keeps a warm load fast:

- *identity* functions (`find_cxx`, `file_identity`) only look at the file system. The cache
  key uses them, so a warm load in a fresh process spawns no process at all.
- *version* functions (`probe_version`, `tool_version`) run ``--version``. They are called only
  while building (the version goes into the manifest) and by ``anyaccel report``, and never raise: a tool
  that cannot run, hangs, fails or prints undecodable bytes gives a `VersionProbe` that says so.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from anyaccel.op_builder.errors import SettingError, ToolchainError

logger = logging.getLogger(__name__)

# Tried in this order after $CXX (the names torch.utils.cpp_extension and distutils use).
CXX_CANDIDATES: tuple[str, ...] = ("c++", "g++", "clang++")
# Peak resident memory of one compile of a TORCH_LIBRARY translation unit is about 1 GiB with g++ 12;
# budget 1.5 GiB per job so parallel compiles do not run the machine out of memory.
BYTES_PER_JOB: int = 3 * 2**29


def find_tool(env: Mapping[str, str] | None, override_var: str, candidates: Sequence[str],
              missing_code: str, fix: str, not_executable_code: str = "compiler_not_executable") -> Path | None:
    """Resolve a tool: ``$<override_var>`` (its first word, a name or a path) else the first of ``candidates``
    on ``PATH``. File-system lookups only: no process is started, so the cache key may call this.

    Args:
        env: environment to read ``override_var`` and ``PATH`` from; ``os.environ`` when None.
        override_var: the variable that names the tool (``CXX``, ``ANYACCEL_SYCL_CXX``).
        candidates: names tried on ``PATH`` when the variable is unset or empty.
        missing_code: the diagnosis code raised when the variable names nothing that exists.
        fix: the end of that error's message, saying what to set instead.
        not_executable_code: the code raised when it names a file that cannot be executed.

    Returns:
        The tool's absolute path with symlinks kept (``c++`` and ``g++`` differ only by name), or None.

    Raises:
        ToolchainError: ``missing_code`` when the variable is set but names nothing (silently falling back to
            another tool would hide the user's mistake); ``not_executable_code`` when it names a file without
            execute permission or a directory.
    """
    env = os.environ if env is None else env
    path_var = env.get("PATH", os.defpath)
    override = env.get(override_var, "").strip()
    if override:
        try:
            name = shlex.split(override)[0]
        except (ValueError, IndexError):
            raise ToolchainError(missing_code, f"{override_var}={override!r} is not a command line (unbalanced "
                                               f"quotes); {fix}") from None
        found = shutil.which(name, path=path_var)
        if found is None:
            if os.sep in name and os.path.exists(name):
                kind = "a directory" if os.path.isdir(name) else "a file without execute permission"
                raise ToolchainError(not_executable_code, f"{override_var}={override!r} names {kind}, which cannot "
                                                          f"be run; {fix}")
            raise ToolchainError(missing_code, f"{override_var}={override!r} names no executable file "
                                               f"(searched PATH too); {fix}")
        return Path(os.path.abspath(found))
    for name in candidates:
        found = shutil.which(name, path=path_var)
        if found is not None:
            return Path(os.path.abspath(found))
    return None


def find_cxx(env: Mapping[str, str] | None = None) -> Path | None:
    """Resolve the C++ compiler: ``$CXX`` else `CXX_CANDIDATES` on ``PATH`` (see `find_tool`).

    Raises:
        ToolchainError: ``compiler_missing`` when ``$CXX`` is set but names nothing executable.
    """
    return find_tool(env, "CXX", CXX_CANDIDATES, "compiler_missing",
                     f"set CXX to an installed C++ compiler or unset it to use one of {', '.join(CXX_CANDIDATES)}")


def require_cxx(env: Mapping[str, str] | None = None) -> Path:
    """Like `find_cxx` but raises ``ToolchainError("compiler_missing")`` when none is found."""
    found = find_cxx(env)
    if found is None:
        raise ToolchainError(
            "compiler_missing",
            f"no C++ compiler found: CXX is unset and none of {', '.join(CXX_CANDIDATES)} is on PATH",
        )
    return found


def find_ninja(env: Mapping[str, str] | None = None) -> Path | None:
    """Find ninja: the ``ninja`` Python package's binary first (``pip install`` provides it), then ``PATH``.

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
    """Like `find_ninja` but raises ``ToolchainError("ninja_missing")`` when none is found."""
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


@dataclass(frozen=True)
class VersionProbe:
    """What ``<tool> --version`` said.

    Attributes:
        command: the command line that ran, as a string.
        ok: it ran and exited 0.
        returncode: its exit status (negative: killed by that signal), or None when it did not run or hung.
        output: its stdout and stderr, decoded as UTF-8 with undecodable bytes replaced (at most 4000 chars).
        error: why it did not run or was stopped ("" when it exited by itself).
    """

    command: str
    ok: bool
    returncode: int | None
    output: str
    error: str = ""

    @property
    def first_line(self) -> str:
        """The first non-empty line of the output ("" when none)."""
        return next((line.strip() for line in self.output.splitlines() if line.strip()), "")

    def describe(self) -> str:
        """A one-paragraph account for logs and error messages: the command, its status and its output."""
        status = (f"could not run: {self.error}" if self.returncode is None and self.error else
                  f"exited with status {self.returncode}")
        text = self.output.strip()
        return f"`{self.command}` {status}" + (f"; it printed:\n{text}" if text else "; it printed nothing")


def probe_version(path: Path | str, args: Sequence[str] = ("--version",), timeout_s: float = 30.0,
                  env: Mapping[str, str] | None = None) -> VersionProbe:
    """Run ``<path> --version`` and report what happened; never raises.

    Args:
        path: the tool.
        args: the arguments that make it print its version.
        timeout_s: seconds before it is killed.
        env: its environment; the current one when None.

    Returns:
        The `VersionProbe` (``ok`` False when the tool could not start, hung, was killed or exited
        non-zero).

    Side effects: starts a process. Never call this on the load path.
    """
    command = [str(path), *args]
    shown = shlex.join(command)
    try:
        out = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             timeout=timeout_s, check=False, env=None if env is None else dict(env))
    except subprocess.TimeoutExpired as exc:
        text = (exc.output or b"").decode("utf-8", "replace")[:4000]
        return VersionProbe(shown, False, None, text, f"no answer within {timeout_s:g} s")
    except (OSError, ValueError) as exc:  # not found, not executable, exec format error, NUL in the path
        return VersionProbe(shown, False, None, "", str(exc))
    text = out.stdout.decode("utf-8", "replace")[:4000]
    return VersionProbe(shown, out.returncode == 0, out.returncode, text)


def tool_version(path: Path, args: tuple[str, ...] = ("--version",), timeout_s: float = 30.0) -> str:
    """The first line of ``<path> --version``, or ``"unknown (<what happened>)"``: ``"unknown (exit 3)"``,
    ``"unknown (exit 3: <first line>)"``, ``"unknown (<why it did not run>)"``; never raises.

    Side effects: starts a process. Never call this on the load path.
    """
    probe = probe_version(path, args, timeout_s)
    if probe.ok and probe.first_line:
        return probe.first_line
    if probe.returncode is None:
        return f"unknown ({probe.error})"
    return f"unknown (exit {probe.returncode}" + (f": {probe.first_line})" if probe.first_line else ")")


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
        mem_available: available memory in bytes; `available_memory_bytes` when None.
        bytes_per_job: memory budget of one compile in bytes.

    Raises:
        SettingError: ``MAX_JOBS`` is set but is not a positive integer (a ``ValueError``).
    """
    env = os.environ if env is None else env
    raw = env.get("MAX_JOBS", "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise SettingError(f"MAX_JOBS={raw!r} is not a positive integer; set it to e.g. 1 or 4, or unset it")
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
