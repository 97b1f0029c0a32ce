"""The build lock (anyaccel/op_builder/core/lock.py): an OS lock a dead process never holds, waiters that
time out naming the holder, and its timeout variable."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from anyaccel.op_builder.core import lock as lock_mod
from anyaccel.op_builder.core.lock import BuildLock
from anyaccel.op_builder.errors import CacheSecurityError, LockTimeoutError


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


# ---------------------------------------------------------------- a lock never harms another file

VICTIM = b"precious data that is not a lock\n"


def _victim(tmp_path, mode: int = 0o644):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM)
    os.chmod(victim, mode)
    return victim


def _untouched(victim, mode: int = 0o644) -> None:
    assert victim.read_bytes() == VICTIM
    assert stat.S_IMODE(victim.stat().st_mode) == mode


@pytest.mark.parametrize("use", ["acquire", "try_acquire", "is_held"])
def test_a_hard_link_as_lock_file_is_refused_and_its_data_kept(tmp_path, use):
    victim = _victim(tmp_path)
    path = tmp_path / "locks" / "op-key.lock"
    path.parent.mkdir()
    os.link(victim, path)
    with pytest.raises(CacheSecurityError, match="hard link") as err:
        getattr(BuildLock(path, "op", timeout_s=1), use)()
    assert str(path) in str(err.value) and f"rm '{path}'" in str(err.value)
    _untouched(victim)


def test_a_file_we_did_not_create_is_never_chmod_ed_or_truncated(tmp_path):
    path = _victim(tmp_path)  # our uid, one link, mode 0644: not a lock file this library made
    with pytest.raises(CacheSecurityError, match="mode 0644") as err:
        BuildLock(path, "op", timeout_s=1).acquire()
    assert str(path) in str(err.value)
    _untouched(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_another_users_lock_file_is_refused(tmp_path):
    path = _victim(tmp_path, 0o600)
    os.chown(path, 12345, 12345)
    with pytest.raises(CacheSecurityError, match="uid 12345"):
        BuildLock(path, "op", timeout_s=1).acquire()
    _untouched(path, 0o600)


def test_a_link_to_a_link_is_refused(tmp_path):
    victim = _victim(tmp_path)
    (tmp_path / "hop").symlink_to(victim)
    (tmp_path / "x.lock").symlink_to(tmp_path / "hop")
    with pytest.raises(CacheSecurityError, match="symbolic link"):
        BuildLock(tmp_path / "x.lock", "op", timeout_s=1).acquire()
    _untouched(victim)


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_lock_path_that_is_not_a_file_is_a_clear_error(tmp_path, kind):
    path = tmp_path / "x.lock"
    path.mkdir() if kind == "directory" else os.mkfifo(path)
    with pytest.raises(CacheSecurityError, match="not a regular file") as err:
        BuildLock(path, "op", timeout_s=1).acquire()
    fix = f"rmdir '{path}'" if kind == "directory" else f"rm '{path}'"
    assert fix in str(err.value)


def test_our_own_lock_file_is_taken_again_under_any_umask(tmp_path):
    path = tmp_path / "own.lock"
    old = os.umask(0o077)
    try:
        with BuildLock(path, "op", timeout_s=1):
            pass
    finally:
        os.umask(old)
    path.write_bytes(b'{"pid": 1, "host": "h", "since": 0}')  # a note left by a killed holder
    with BuildLock(path, "op", timeout_s=1) as held:
        assert "pid" in held.holder()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
