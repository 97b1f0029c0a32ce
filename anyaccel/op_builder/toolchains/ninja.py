"""The build driver of the stable-ABI ops: one ninja file per build, run with a bounded wall time.

A build is data: per source, the compile command (host C++ compiler or nvcc, chosen by the source's
suffix), and one link command. :func:`write_build_file` turns that into ``build.ninja``; :func:`run_ninja`
runs ninja in its own process group and kills the whole group when ``ANYACCEL_BUILD_TIMEOUT`` passes, so a
compiler that never returns cannot hang ``load()`` or outlive it (user pain P3).

Why not ``torch.utils.cpp_extension.load``: it always links ``libtorch_python``/``libc10`` (and the CUDA
ones for ``.cu`` sources, which a CPU-only torch does not have), adds the Python headers, and loads the
library it built; a stable-ABI op needs none of that, must be buildable for another machine without being
loaded (AOT, GPU wheels built on CPU machines) and links only ``libtorch_cpu`` (the stable shim). ninja is
still the one that schedules and runs the commands, as in torch's JIT.
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from anyaccel.op_builder.core.errors import OpBuilderError

TIMEOUT_ENV = "ANYACCEL_BUILD_TIMEOUT"
#: Default wall-time bound of one build, in seconds: far above any build of ours (CUDA ops take 20-30 s
#: on 16 cores, CPU ops 2-5 s on 2), short enough that a hung compiler is noticed within the hour.
DEFAULT_TIMEOUT_S = 3600.0


class BuildTimeoutError(OpBuilderError, TimeoutError):
    """A build ran longer than ``ANYACCEL_BUILD_TIMEOUT``; its process group was killed.

    Attributes:
        command: the command ninja was running when the time ran out (best effort), else ninja's own.
        seconds: the bound that passed.
    """

    def __init__(self, message: str, command: str, seconds: float) -> None:
        super().__init__(message)
        self.command = command
        self.seconds = seconds


def positive_seconds(name: str, raw: str, default: float) -> float:
    """Parse a positive, finite number of seconds from a variable's text (empty: ``default``).

    Raises:
        ValueError: not a number, not finite (``nan``, ``inf``, ``1e308`` overflow to an unbounded wait in
            practice: anything above 1e9 s is refused), or not positive; the message names the variable.
    """
    raw = raw.strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= 1e9):
        raise ValueError(f"{name}={raw!r} is not a finite positive number of seconds (at most 1e9); set it to e.g. "
                         f"{default:g} or unset it")
    return value


def build_timeout_s(env: Mapping[str, str] | None = None) -> float:
    """``ANYACCEL_BUILD_TIMEOUT`` in seconds, else :data:`DEFAULT_TIMEOUT_S` (see :func:`positive_seconds`)."""
    env = os.environ if env is None else env
    return positive_seconds(TIMEOUT_ENV, env.get(TIMEOUT_ENV, ""), DEFAULT_TIMEOUT_S)


@dataclass(frozen=True)
class CompileStep:
    """One translation unit: ``command + ["-c", source, "-o", object]``.

    Attributes:
        source: the source file (absolute).
        obj: the object file to produce (absolute, inside the build directory).
        command: the compiler and its flags, without ``-c``/``-o``.
    """

    source: Path
    obj: Path
    command: tuple[str, ...]


def _ninja_escape(text: str) -> str:
    return text.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def write_build_file(build_dir: Path, steps: Sequence[CompileStep], link: Sequence[str], output: Path) -> Path:
    """Write ``build_dir/build.ninja`` compiling ``steps`` and linking their objects into ``output``.

    Args:
        build_dir: a private directory.
        steps: the compile steps.
        link: the link command without the objects and ``-o`` (e.g. ``["c++", "-shared", "-L...", "-l..."]``;
            libraries are placed after the objects).
        output: the shared library to produce.

    Returns:
        The ninja file.
    """
    lines = ["ninja_required_version = 1.3", ""]
    for i, step in enumerate(steps):
        cmd = shlex.join([*step.command, "-c", str(step.source), "-o", str(step.obj)])
        lines += [f"rule compile_{i}", f"  command = {cmd.replace('$', '$$')}",
                  f"  description = compile {step.source.name}", ""]
        lines.append(f"build {_ninja_escape(str(step.obj))}: compile_{i} {_ninja_escape(str(step.source))}")
        lines.append("")
    tool, *flags = link
    link_cmd = shlex.join([tool, *[str(s.obj) for s in steps], "-o", str(output), *flags])
    lines += ["rule link", f"  command = {link_cmd.replace('$', '$$')}", f"  description = link {output.name}", ""]
    lines.append(f"build {_ninja_escape(str(output))}: link " + " ".join(_ninja_escape(str(s.obj)) for s in steps))
    lines += ["", f"default {_ninja_escape(str(output))}", ""]
    path = build_dir / "build.ninja"
    path.write_text("\n".join(lines))
    return path


@dataclass(frozen=True)
class NinjaResult:
    """The outcome of one ninja run.

    Attributes:
        returncode: ninja's exit status (negative: killed by that signal).
        output: ninja's combined stdout and stderr (the compiler's messages included).
        seconds: wall time.
    """

    returncode: int
    output: str
    seconds: float


def run_ninja(ninja: Path, build_dir: Path, jobs: int, env: Mapping[str, str], timeout_s: float) -> NinjaResult:
    """Run ``ninja -C build_dir -j jobs`` in a new process group, bounded by ``timeout_s``.

    Raises:
        BuildTimeoutError: the time passed; every process of the group (ninja and the compilers it started)
            was killed with SIGKILL before raising, naming the last command ninja started.
        OSError: ninja could not be started.
    """
    t0 = time.monotonic()
    proc = subprocess.Popen([str(ninja), "-C", str(build_dir), "-j", str(jobs)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=dict(env), start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, _ = proc.communicate()
        started = [ln for ln in (out or "").splitlines() if ln.startswith("[")]
        command = started[-1] if started else f"{ninja} -C {build_dir}"
        raise BuildTimeoutError(f"the build in {build_dir} ran longer than {timeout_s:g} s ({TIMEOUT_ENV}); its "
                                f"processes were killed. Last step: {command}", command, timeout_s) from None
    except BaseException:
        _kill_group(proc)
        raise
    return NinjaResult(proc.returncode, out or "", time.monotonic() - t0)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
