"""The build lock (anyaccel/op_builder/core/lock.py): an OS lock a dead process never holds, waiters that
time out naming the holder, and its timeout variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from anyaccel.op_builder.core import lock as lock_mod
from anyaccel.op_builder.core.lock import BuildLock
from anyaccel.op_builder.errors import LockTimeoutError


def test_waiters_time_out_with_the_holder_named(tmp_path):
    path = tmp_path / "x.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys\n"
         "from anyaccel.op_builder.core.lock import BuildLock\n"
         f"l = BuildLock({str(path)!r}, 'x'); l.acquire(); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert BuildLock(path, "t").is_held()
        with pytest.raises(LockTimeoutError, match=f"pid {holder.pid}") as err:
            BuildLock(path, "op toy", timeout_s=0.3, poll_s=0.05).acquire()
        assert "op toy" in str(err.value) and lock_mod.TIMEOUT_ENV in str(err.value)
        assert isinstance(err.value, TimeoutError)
    finally:
        holder.kill()
        holder.wait()
    assert not BuildLock(path, "t").is_held()  # released by the kernel when the holder died
    with BuildLock(path, "op toy", timeout_s=5) as held:
        assert BuildLock(path, "t").is_held() and "pid" in held.holder()
    assert not BuildLock(path, "t").is_held()


def test_try_acquire_never_waits_and_release_is_idempotent(tmp_path):
    a, b = BuildLock(tmp_path / "y.lock", "a"), BuildLock(tmp_path / "y.lock", "b")
    assert a.try_acquire() and not b.try_acquire()
    a.release()
    a.release()
    assert b.try_acquire()
    b.release()
    assert BuildLock(tmp_path / "z.lock", "z").holder() == "an unknown process"


@pytest.mark.parametrize("raw,expected", [("", lock_mod.DEFAULT_TIMEOUT_S), ("600", 600.0), (" 0.5 ", 0.5)])
def test_timeout_variable(monkeypatch, raw, expected):
    monkeypatch.setenv(lock_mod.TIMEOUT_ENV, raw)
    assert lock_mod.default_timeout_s() == expected


@pytest.mark.parametrize("raw", ["0", "-1", "soon"])
def test_bad_timeout_variable_names_it(monkeypatch, raw):
    monkeypatch.setenv(lock_mod.TIMEOUT_ENV, raw)
    with pytest.raises(ValueError, match=lock_mod.TIMEOUT_ENV):
        lock_mod.default_timeout_s()


def test_nan_timeout_is_refused(monkeypatch):
    monkeypatch.setenv(lock_mod.TIMEOUT_ENV, "nan")
    with pytest.raises(ValueError, match=lock_mod.TIMEOUT_ENV):
        lock_mod.default_timeout_s()


def test_lock_file_is_private(tmp_path):
    path = tmp_path / "p.lock"
    with BuildLock(path, "p"):
        assert (os.stat(path).st_mode & 0o777) == 0o600
