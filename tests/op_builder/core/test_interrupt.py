"""SIGINT and SIGTERM during a build (``anyaccel build``, or a program's JIT ``load()``) leave no process (ninja,
compilers), no build directory and nothing cached; they print one line and end with the signal's status.

The compiler is the integrity tests' wrapper in its ``sleep`` mode: it records "<pid> <pgid>" and sleeps, so
the signal always arrives mid-build. Each run is a child process; waits poll for an event, nothing is timed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from integrity_support import BUILDER, LOAD_SCRIPT, REPO, child_env, make_wrapper

from anyaccel.op_builder.core import interrupt

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _default_sigint() -> None:
    """In the child before it runs: SIGINT's default disposition, as a program started from an interactive shell
    has it. A test session started in the background by a non-interactive shell (``cmd &``, ``nohup``) has SIGINT
    ignored, its children inherit that, and Python then keeps ignoring it: the child would never see the
    interrupt these tests send (as the user meant, when they started it that way)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_mid_build(cmd: list[str], tmp_path: Path, sig: int) -> tuple[subprocess.CompletedProcess[str],
                                                                              list[int]]:
    """Start ``cmd`` with the sleeping compiler, send ``sig`` once a compiler runs; returns the finished process
    and the compilers' pids."""
    pids = tmp_path / "pids.txt"
    env = child_env(tmp_path / "cache", make_wrapper(tmp_path), INTEG_CXX="sleep", INTEG_PIDS=str(pids))
    proc = subprocess.Popen(cmd, env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)
    try:
        while not (pids.exists() and pids.read_text().strip()):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    started = [int(line.split()[0]) for line in pids.read_text().splitlines()]
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), started


def _assert_nothing_left(tmp_path: Path, started: list[int], stderr: str) -> None:
    assert stderr.count(interrupt.INTERRUPTED_LINE) == 1, stderr
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(map(_alive, started)):
        time.sleep(0.05)
    assert not [pid for pid in started if _alive(pid)], "a compiler outlived the interrupted build"
    cache = tmp_path / "cache"
    assert not any((cache / "tmp").iterdir()), "the build directory was left behind"
    assert not any((cache / "ops").rglob("op.so")) and not any((cache / "ops").rglob("manifest.json"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_anyaccel_build_interrupted_ends_cleanly(tmp_path, sig):
    cmd = [sys.executable, "-m", "anyaccel", "build", "--ops", "cpu_lion"]
    done, started = _interrupt_mid_build(cmd, tmp_path, sig)
    assert done.returncode == 128 + sig, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    _assert_nothing_left(tmp_path, started, done.stderr)


def test_jit_load_terminated_ends_cleanly(tmp_path):
    """SIGTERM during a program's load(): the cleanup runs, then the program dies of SIGTERM (status 143)."""
    done, started = _interrupt_mid_build([sys.executable, "-c", LOAD_SCRIPT.format(builder=BUILDER)], tmp_path,
                                         signal.SIGTERM)
    assert done.returncode == -signal.SIGTERM, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    _assert_nothing_left(tmp_path, started, done.stderr)


def test_jit_load_interrupted_ends_cleanly(tmp_path):
    """SIGINT during a program's load(): the cleanup runs and the KeyboardInterrupt reaches the program (this one
    does not catch it, so Python ends it by SIGINT, status 130)."""
    done, started = _interrupt_mid_build([sys.executable, "-c", LOAD_SCRIPT.format(builder=BUILDER)], tmp_path,
                                         signal.SIGINT)
    assert done.returncode == -signal.SIGINT, (done.returncode, done.stderr)
    _assert_nothing_left(tmp_path, started, done.stderr)


def test_exit_status_and_report_once(capsys):
    assert interrupt.exit_status(KeyboardInterrupt()) == 130
    exc = interrupt.BuildInterrupted(signal.SIGTERM)
    assert interrupt.exit_status(exc) == 143 and isinstance(exc, KeyboardInterrupt)
    interrupt.report(exc)
    interrupt.report(exc)
    assert capsys.readouterr().err == interrupt.INTERRUPTED_LINE + "\n"
