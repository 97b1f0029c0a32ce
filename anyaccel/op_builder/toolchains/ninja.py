"""The build driver of the stable-ABI ops: one ninja file per build, run with a bounded wall time.

A build is data: per source, the compile command (host C++ compiler or nvcc, chosen by the source's
suffix), and one link command. `write_build_file` turns that into ``build.ninja``; `run_ninja`
runs ninja in a session of its own and kills ninja and every process of that session when
``ANYACCEL_BUILD_TIMEOUT`` passes, so a compiler that never returns cannot hang ``load()`` or outlive it.
ninja's output is read as it comes (its ``[k/N] compile x.cpp`` status lines feed the build progress
display) rather than at exit.

Why not ``torch.utils.cpp_extension.load``: it always links ``libtorch_python``/``libc10`` (and the CUDA
ones for ``.cu`` sources, which a CPU-only torch does not have), adds the Python headers, and loads the
library it built; a stable-ABI op needs none of that, must be buildable for another machine without being
loaded (AOT, GPU wheels built on CPU machines) and links only ``libtorch_cpu`` (the stable shim). ninja is
still the one that schedules and runs the commands, as in torch's JIT.
"""

from __future__ import annotations

import os
import re
import selectors
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from anyaccel import settings
from anyaccel.op_builder.errors import OpBuilderError, SettingError

TIMEOUT_ENV = settings.BUILD_TIMEOUT.name
#: Default wall-time bound of one build, in seconds: far above any build of ours (CUDA ops take 20-30 s
#: on 16 cores, CPU ops 2-5 s on 2), short enough that a hung compiler is noticed within the hour.
DEFAULT_TIMEOUT_S = settings.BUILD_TIMEOUT.default_s


class BuildTimeoutError(OpBuilderError, TimeoutError):
    """A build ran longer than ``ANYACCEL_BUILD_TIMEOUT``; ninja and every process it started were killed.

    Attributes:
        command: the command ninja was running when the time ran out (best effort), else ninja's own.
        seconds: the bound that passed.
    """

    CODE = "timeout"

    def __init__(self, message: str, command: str, seconds: float) -> None:
        super().__init__(message)
        self.command = command
        self.seconds = seconds


def build_timeout_s(env: Mapping[str, str] | None = None) -> float:
    """``ANYACCEL_BUILD_TIMEOUT`` in seconds, else `DEFAULT_TIMEOUT_S` (`anyaccel.settings.BUILD_TIMEOUT`).

    Raises:
        SettingError: the variable is set to something else than a finite positive number of seconds.
    """
    return settings.BUILD_TIMEOUT.get(env, error=SettingError)


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


def _rules(steps: Sequence[CompileStep], link: Sequence[str], output: Path) -> list[tuple[str, str, Path, list[Path]]]:
    """``(description, command, output, inputs)`` of every edge of the build, compile steps first."""
    rules = [(f"compile {step.source.name}", shlex.join([*step.command, "-c", str(step.source), "-o", str(step.obj)]),
              step.obj, [step.source]) for step in steps]
    tool, *flags = link
    rules.append((f"link {output.name}", shlex.join([tool, *[str(s.obj) for s in steps], "-o", str(output), *flags]),
                  output, [s.obj for s in steps]))
    return rules


def step_commands(steps: Sequence[CompileStep], link: Sequence[str], output: Path) -> dict[str, str]:
    """The command of every edge by the description ninja prints for it (``"compile x.cpp"``, ``"link op.so"``),
    to name the command of a step that hung."""
    return {description: command for description, command, _, _ in _rules(steps, link, output)}


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
    for i, (description, command, out, inputs) in enumerate(_rules(steps, link, output)):
        rule = "link" if out == output else f"compile_{i}"
        lines += [f"rule {rule}", f"  command = {command.replace('$', '$$')}", f"  description = {description}", ""]
        lines.append(f"build {_ninja_escape(str(out))}: {rule} " + " ".join(_ninja_escape(str(p)) for p in inputs))
        lines.append("")
    lines += [f"default {_ninja_escape(str(output))}", ""]
    path = build_dir / "build.ninja"
    path.write_text("\n".join(lines))
    return path


#: ninja's status line: ``[3/7] compile x.cpp``.
STATUS_LINE = re.compile(r"^\[(\d+)/(\d+)\] (.*)$")


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


def run_ninja(ninja: Path, build_dir: Path, jobs: int, env: Mapping[str, str], timeout_s: float,
              on_line: Callable[[str], None] | None = None, on_tick: Callable[[], None] | None = None,
              commands: Mapping[str, str] | None = None, tick_s: float = 0.5) -> NinjaResult:
    """Run ``ninja -C build_dir -j jobs`` in a new session, bounded by ``timeout_s``.

    ninja's output is read as it comes: every line goes to ``on_line`` (progress), and ``on_tick`` is
    called at least every ``tick_s`` seconds (a live elapsed-time display).

    Args:
        ninja: the ninja executable.
        build_dir: the directory holding ``build.ninja``.
        jobs: parallel jobs (``-j``).
        env: the complete environment of the build.
        timeout_s: wall-time bound in seconds.
        on_line: called with each line of output (without the newline), in the calling thread.
        on_tick: called periodically while the build runs.
        commands: `step_commands`, to name the command of the step that was running at the timeout.
        tick_s: seconds between ``on_tick`` calls.

    Returns:
        The `NinjaResult` (output decoded as UTF-8, undecodable bytes replaced).

    Raises:
        BuildTimeoutError: the time passed; ninja and every process it started were killed (see
            `_kill_group`) before raising, naming the command that was still running (read from
            ``/proc``; else the first step ninja had not finished).
        OSError: ninja could not be started.
    """
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    proc = subprocess.Popen([str(ninja), "-C", str(build_dir), "-j", str(jobs)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(env),
                            start_new_session=True)
    assert proc.stdout is not None
    chunks: list[bytes] = []
    pending = b""
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise subprocess.TimeoutExpired(proc.args, timeout_s)
                if sel.select(timeout=min(remaining, tick_s)):
                    data = os.read(proc.stdout.fileno(), 65536)
                    if not data:
                        break  # every writer (ninja and its compilers) has closed the pipe
                    chunks.append(data)
                    pending += data
                    *lines, pending = pending.split(b"\n")
                    if on_line is not None:
                        for line in lines:
                            on_line(line.decode("utf-8", "replace").rstrip("\r"))
                if on_tick is not None:
                    on_tick()
        if pending and on_line is not None:
            on_line(pending.decode("utf-8", "replace"))
        proc.wait(timeout=max(deadline - time.monotonic(), 0.001))
    except subprocess.TimeoutExpired:
        running = _group_commands(proc.pid)  # before the kill: what was still running names the hang
        _kill_group(proc)
        out = b"".join(chunks).decode("utf-8", "replace")
        finished = {m[3] for m in map(STATUS_LINE.match, out.splitlines()) if m}
        known = dict(commands or {})
        unfinished = [cmd for desc, cmd in known.items() if desc not in finished]
        command = next((c for c in running if c in known.values()), None) or next(iter(running), None) \
            or next(iter(unfinished), None) or f"{ninja} -C {build_dir}"
        raise BuildTimeoutError(f"the build in {build_dir} ran longer than {timeout_s:g} s ({TIMEOUT_ENV}); ninja and "
                                f"every process it started were killed. Still running: {command}", command,
                                timeout_s) from None
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        proc.stdout.close()
    return NinjaResult(proc.returncode, b"".join(chunks).decode("utf-8", "replace"), time.monotonic() - t0)


def _session_processes(sid: int) -> list[tuple[int, list[str]]]:
    """``(pid, argv)`` of every live (not zombie) process of session ``sid`` except its leader, oldest first;
    empty where ``/proc`` does not exist."""
    found = []
    try:
        pids = sorted(int(d) for d in os.listdir("/proc") if d.isdigit())
    except OSError:
        return []
    for pid in pids:
        if pid == sid:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                text = fh.read().decode("utf-8", "replace")
            fields = text[text.rindex(")") + 2:].split()  # state, ppid, pgrp, session, ...
            if int(fields[3]) != sid or fields[0] == "Z":
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = [a.decode("utf-8", "replace") for a in fh.read().split(b"\0")[:-1]]
        except (OSError, ValueError, IndexError):
            continue
        found.append((pid, argv))
    return found


def _group_commands(sid: int) -> list[str]:
    """The command lines of the processes ninja (leader of session ``sid``) started, oldest first
    (``sh -c CMD`` reported as ``CMD``)."""
    commands = []
    for _, argv in _session_processes(sid):
        if len(argv) >= 3 and argv[1] == "-c" and os.path.basename(argv[0]) in ("sh", "bash", "dash"):
            commands.append(argv[2])
        elif argv:
            commands.append(shlex.join(argv))
    return commands


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float = 1.0) -> None:
    """Stop ninja and every process it started, then reap ninja.

    ninja puts each command in a process group of its own (so that Ctrl-C reaches only ninja), so killing
    ninja's group is not enough: ninja gets SIGTERM first (it passes it on to its commands' groups), then
    every process left in ninja's session (``start_new_session``) gets SIGKILL, a hung compiler and its
    children included. Only a process that left the session (``setsid``) can survive.
    """
    try:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    for _ in range(50):
        for victim in [proc.pid, *(pid for pid, _ in _session_processes(proc.pid))]:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not _session_processes(proc.pid):
            break
        time.sleep(0.02)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # where /proc is missing: at least ninja's own group
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
