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
import sys
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
        output: ninja's combined stdout and stderr (the compiler's messages included), at most
            `HEAD_BYTES` + `TAIL_BYTES` of it: the beginning and the end, with a line in between
            saying how many bytes were left out.
        seconds: wall time.
    """

    returncode: int
    output: str
    seconds: float


#: The output kept from a build: its first `HEAD_BYTES` (the first compiler errors) and its last
#: `TAIL_BYTES` (ninja's ``FAILED:`` summary); a compiler that writes megabytes costs no more memory.
HEAD_BYTES = 64 << 10
TAIL_BYTES = 256 << 10
#: The longest line passed to ``on_line`` (longer lines are cut; status lines are short).
LINE_BYTES = 4 << 10
#: Seconds the output is still read after ninja's driver exited (a process it left behind may hold the pipe).
DRAIN_S = 2.0


class OutputTail:
    """The head and tail of a stream of bytes, in memory bounded by ``head + 2 * tail`` bytes, linear time.

    Args:
        head: bytes kept from the beginning.
        tail: bytes kept from the end.
    """

    def __init__(self, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> None:
        self.head_limit, self.tail_limit = head, tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        """Append ``data`` (amortised O(len(data)))."""
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > 2 * self.tail_limit:
            del self.tail[:-self.tail_limit]

    def text(self) -> str:
        """What was kept, decoded as UTF-8 (undecodable bytes replaced)."""
        tail = bytes(self.tail[-self.tail_limit:]) if self.tail_limit else b""
        omitted = self.total - len(self.head) - len(tail)
        middle = f"\n[... {omitted} bytes of build output left out ...]\n".encode() if omitted > 0 else b""
        return (bytes(self.head) + middle + tail).decode("utf-8", "replace")


class _Lines:
    """Splits a byte stream into lines for ``on_line`` in linear time, each cut at `LINE_BYTES`."""

    def __init__(self, on_line: Callable[[str], None] | None) -> None:
        self.on_line = on_line
        self.current = bytearray()

    def add(self, data: bytes) -> None:
        if self.on_line is None:
            return
        start = 0
        while True:
            end = data.find(b"\n", start)
            piece = data[start:] if end < 0 else data[start:end]
            room = LINE_BYTES - len(self.current)
            if room > 0:
                self.current += piece[:room]
            if end < 0:
                return
            self.on_line(self.current.decode("utf-8", "replace").rstrip("\r"))
            self.current = bytearray()
            start = end + 1

    def flush(self) -> None:
        if self.current and self.on_line is not None:
            self.on_line(self.current.decode("utf-8", "replace"))
        self.current = bytearray()


#: The driver between us and ninja (Linux): a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so every
#: process the build starts stays its descendant, a daemon that left ninja's session with ``setsid`` and was
#: orphaned included. Every 0.1 s it SIGKILLs the orphans reparented to it (any child but ninja: a daemon
#: whose parent exited, which may hold the pipe of a finished command that ninja reads to its end); when ninja
#: exits (or this driver gets SIGTERM) it SIGKILLs every descendant still alive (found through ``/proc``),
#: reaps them, and exits with ninja's status (dying by ninja's signal if it died of one). Run with
#: ``python -I -S``: no import of anyaccel, about 20 ms.
_REAPER = r"""
import ctypes, os, select, signal, sys, time
try:
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
except Exception:
    pass
child = None
stopped = []
def stop(signum, frame):
    stopped.append(signum)
    if child:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
signal.signal(signal.SIGTERM, stop)  # before the fork: a SIGTERM at any time stops the build, never the driver
signal.signal(signal.SIGINT, stop)
child = os.fork()
if child == 0:
    try:
        os.execv(sys.argv[1], sys.argv[1:])  # the exec resets the handlers
    except OSError as exc:
        os.write(2, f"anyaccel: cannot run {sys.argv[1]}: {exc.strerror}\n".encode())
    os._exit(127)
if stopped:
    stop(signal.SIGTERM, None)
def processes():
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    text = fh.read().decode("utf-8", "replace")
                fields = text[text.rindex(")") + 2:].split()
            except (OSError, ValueError):
                continue
            if fields[0] != "Z":
                parent[int(name)] = int(fields[1])
    return parent
def subtree(roots, parent):
    found, frontier = set(), set(roots)
    while frontier:
        found |= frontier
        frontier = {p for p, pp in parent.items() if pp in frontier and p not in found}
    return found
def descendants():
    return subtree({os.getpid()}, processes()) - {os.getpid()}
try:
    pidfd = os.pidfd_open(child)
except (AttributeError, OSError):
    pidfd = None
status = None
def reap():
    global status
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == child:
            status = st
while status is None:
    reap()
    if status is not None:
        break
    try:
        parent = processes()
    except OSError:
        parent = {}
    me = os.getpid()
    # a child of ours that is not ninja was orphaned (its parent exited): a daemon of the build; it may hold
    # ninja's pipe to a finished command, which ninja reads to its end
    for pid in subtree({p for p, pp in parent.items() if pp == me and p != child}, parent):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if pidfd is None:
        time.sleep(0.1)
    else:
        select.select([pidfd], [], [], 0.1)  # wakes as soon as ninja exits
status = 0 if status is None else status
for _ in range(500):
    try:
        alive = descendants()
    except OSError:
        break
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    if not alive:
        break
    time.sleep(0.01)
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
"""


def _driver(argv: list[str]) -> list[str]:
    """``argv`` run under the `_REAPER` driver where it works (Linux with ``/proc`` and a Python
    executable), else ``argv`` itself."""
    if sys.platform.startswith("linux") and os.path.isdir("/proc/self") and sys.executable:
        return [sys.executable, "-I", "-S", "-c", _REAPER, *argv]
    return argv


def run_ninja(ninja: Path, build_dir: Path, jobs: int, env: Mapping[str, str], timeout_s: float,
              on_line: Callable[[str], None] | None = None, on_tick: Callable[[], None] | None = None,
              commands: Mapping[str, str] | None = None, tick_s: float = 0.5) -> NinjaResult:
    """Run ``ninja -C build_dir -j jobs`` in a new session, bounded by ``timeout_s``; every process the build
    started is dead when this returns or raises.

    ninja's output is read as it comes: every line goes to ``on_line`` (progress), and ``on_tick`` is
    called at least every ``tick_s`` seconds (a live elapsed-time display). Reading is linear in the output
    and its memory bounded (`OutputTail`); once ninja's driver has exited the output is read for at
    most `DRAIN_S` more seconds, so a process that kept the pipe open cannot hold the build.

    On Linux ninja runs under a small driver that is a child subreaper (`_REAPER`): a process of the
    build that daemonized (``setsid``, double fork) is still its descendant and is killed when ninja ends.

    Args:
        ninja: the ninja executable.
        build_dir: the directory holding ``build.ninja``.
        jobs: parallel jobs (``-j``).
        env: the complete environment of the build.
        timeout_s: wall-time bound in seconds.
        on_line: called with each line of output (without the newline, cut at `LINE_BYTES`), in the
            calling thread.
        on_tick: called periodically while the build runs.
        commands: `step_commands`, to name the command of the step that was running at the timeout.
        tick_s: seconds between ``on_tick`` calls.

    Returns:
        The `NinjaResult` (output decoded as UTF-8, undecodable bytes replaced; head and tail only).

    Raises:
        BuildTimeoutError: the time passed; ninja and every process it started were killed (see
            `_kill_group`) before raising, naming the command that was still running (read from
            ``/proc``; else the first step ninja had not finished).
        OSError: ninja could not be started.
    """
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    argv = [str(ninja), "-C", str(build_dir), "-j", str(jobs)]
    proc = subprocess.Popen(_driver(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=dict(env), start_new_session=True)
    assert proc.stdout is not None
    kept = OutputTail()
    lines = _Lines(on_line)
    drain_until: float | None = None
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                if now >= deadline:
                    raise subprocess.TimeoutExpired(proc.args, timeout_s)
                if drain_until is None and proc.poll() is not None:
                    drain_until = now + DRAIN_S  # the driver is gone: what still holds the pipe is not ours
                if drain_until is not None and now >= drain_until:
                    break
                limit = min(deadline, drain_until) if drain_until is not None else deadline
                if sel.select(timeout=max(min(limit - now, tick_s), 0.0)):
                    data = os.read(proc.stdout.fileno(), 65536)
                    if not data:
                        break  # every writer (ninja and its compilers) has closed the pipe
                    kept.add(data)
                    lines.add(data)
                if on_tick is not None:
                    on_tick()
        lines.flush()
        proc.wait(timeout=max(deadline - time.monotonic(), 0.001))
    except subprocess.TimeoutExpired:
        running = [c for c in _group_commands(proc.pid) if c != shlex.join(argv)]  # before the kill
        _kill_group(proc)
        out = kept.text()
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
    _kill_group(proc)  # ninja is done: nothing it started may outlive the build (a no-op after the driver)
    return NinjaResult(proc.returncode, kept.text(), time.monotonic() - t0)


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


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """Stop ninja and every process it started, then reap ``proc`` (the driver, or ninja itself).

    The driver (`_REAPER`) gets SIGTERM: it SIGKILLs ninja, then every descendant, daemons included,
    and exits. Then, as a second line (and the only one where there is no driver), every process left in the
    build's session (``start_new_session``) gets SIGKILL: ninja puts each command in a process group of its own,
    so killing one group is not enough. ``proc``'s own pid is signalled only while it is unreaped, so a pid the
    system has reused is never hit.
    """
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    for _ in range(50):
        if proc.poll() is None:
            proc.kill()
        victims = [pid for pid, _ in _session_processes(proc.pid)]
        if not victims and proc.poll() is not None:
            break
        for victim in victims:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # where /proc is missing: at least the session's first group
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()
