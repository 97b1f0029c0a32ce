"""An inter-process build lock the kernel releases when its holder dies.

``fcntl.flock`` on a lock file: the kernel drops the lock when the holding process exits for any reason
(SIGKILL and OOM kill included), so a crashed build never blocks the next run, unlike torch's
``FileBaton``, which waits forever on a file left behind. The lock file is never deleted (deleting a
lock file while someone waits on it would let two holders in); a file left by a dead process is simply
acquired again.

The holder writes its pid, host and start time into the file, so waiters can log who holds the build and
for how long; a wait longer than the timeout ends in `LockTimeoutError`.

The lock file is created with ``O_EXCL | O_NOFOLLOW`` and mode 0600 (whatever the umask); an existing one
must be what this library made, a regular file of the user with one link and mode 0600. Anything else, a
symbolic or hard link planted in its place, another user's file, a directory, a FIFO, is refused
(`CacheSecurityError`), never followed, truncated or chmod-ed (see `open_lock_file`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import stat
import time
from pathlib import Path
from types import TracebackType

from anyaccel import settings
from anyaccel.op_builder.core.cache import FILE_MODE, cache_os_error
from anyaccel.op_builder.errors import CacheSecurityError, LockTimeoutError, SettingError

logger = logging.getLogger(__name__)

TIMEOUT_ENV = settings.BUILD_LOCK_TIMEOUT.name
DEFAULT_TIMEOUT_S = settings.BUILD_LOCK_TIMEOUT.default_s


def default_timeout_s() -> float:
    """``ANYACCEL_BUILD_LOCK_TIMEOUT`` in seconds, else 1800.

    Parsed by `anyaccel.settings.BUILD_LOCK_TIMEOUT`, as every duration setting.

    Raises:
        SettingError: the variable is not a finite positive number of seconds (``nan``, ``inf``, ``1e308``,
            ``-1``, ``abc``): each would mean a wait without end or no wait at all.
    """
    return settings.BUILD_LOCK_TIMEOUT.get(error=SettingError)


def open_lock_file(path: Path) -> int:
    """Open (creating it, mode 0600) a lock file without following a symbolic link, and check it.

    A lock file is only ever one this library created: a file it makes here (``O_CREAT | O_EXCL``), or one
    it made before, which is then a regular file of this user with one link and mode 0600. Anything else
    at the path is refused before it is written, truncated or chmod-ed: a hard link (its other name is
    someone's data; ``O_NOFOLLOW`` does not see hard links), another user's file, a file with other
    permissions, a directory, a FIFO, a device (these are refused by ``lstat`` before any open, and the
    open is non-blocking, so a FIFO or device swapped in between never blocks it; the descriptor is checked
    again with ``fstat``).

    Args:
        path: the lock file.

    Returns:
        The file descriptor (the caller closes it).

    Raises:
        CacheSecurityError: the path is a symbolic link, not a regular file, a file with more than one
            link, another user's file, or a file whose mode is not 0600; the message names the path and
            the fix (remove it; anyaccel recreates it).
        CacheUnusableError: the lock directory is read-only, full or missing.
    """
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    for _ in range(10):  # the file may be removed between our two opens (cache clean): try again
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:
            pass
        except OSError as exc:
            raise cache_os_error(exc, path, "create the build lock file") from None
        else:
            try:
                if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:  # a umask took bits of our own new file
                    os.fchmod(fd, FILE_MODE)
            except OSError as exc:
                os.close(fd)
                raise cache_os_error(exc, path, "set the mode of the build lock file") from None
            return fd
        try:
            before = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise cache_os_error(exc, path, "inspect the build lock file") from None
        _check_lock_file(path, before)  # a directory, FIFO or device is refused before any open
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise cache_os_error(exc, path, "open the build lock file") from None
        try:
            _check_lock_file(path, os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        return fd
    raise cache_os_error(OSError(errno.ENOENT, "the file keeps disappearing"), path, "open the build lock file")


def _check_lock_file(path: Path, st: os.stat_result) -> None:
    """Refuse ``st`` (of ``path``) unless it is a lock file this library made (see `open_lock_file`).

    Raises:
        CacheSecurityError: what it is instead, and how to clear it.
    """
    remove = f"remove it (`rm '{path}'`); anyaccel recreates it"
    if stat.S_ISLNK(st.st_mode):
        raise CacheSecurityError(
            f"build lock file {path} is a symbolic link (to {_link_target(path)}); anyaccel never follows one (it "
            f"would truncate the target). {remove[0].upper()}{remove[1:]}", path)
    if stat.S_ISDIR(st.st_mode):
        raise CacheSecurityError(f"build lock file {path} is not a regular file but a directory; move it away or "
                                 f"remove it (`rmdir '{path}'`); anyaccel recreates the lock file", path)
    if not stat.S_ISREG(st.st_mode):
        raise CacheSecurityError(f"build lock file {path} is not a regular file (mode {stat.filemode(st.st_mode)}: "
                                 f"a FIFO, socket or device); {remove}", path)
    if st.st_uid != os.geteuid():
        raise CacheSecurityError(f"build lock file {path} is owned by uid {st.st_uid}, not by you (uid "
                                 f"{os.geteuid()}); {remove}, or set ANYACCEL_CACHE_DIR to a directory you own",
                                 path)
    if st.st_nlink > 1:
        raise CacheSecurityError(f"build lock file {path} is a hard link ({st.st_nlink} names for one file), so "
                                 "writing the lock would destroy the data under its other names; anyaccel never "
                                 f"writes it: {remove} (that removes only this name)", path)
    if stat.S_IMODE(st.st_mode) != FILE_MODE:
        raise CacheSecurityError(f"build lock file {path} has mode {stat.S_IMODE(st.st_mode):04o}, not "
                                 f"{FILE_MODE:04o}: anyaccel did not make it, and never changes or truncates a "
                                 f"file it did not make; {remove}", path)


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


class BuildLock:
    """An exclusive ``flock`` on ``path``, used as a context manager.

    Args:
        path: the lock file (created if missing, mode 0600; see `open_lock_file`).
        what: what the lock protects, for log and error messages (e.g. "cpu_adam 1a2b3c").
        timeout_s: seconds to wait before `LockTimeoutError`; `default_timeout_s` (read when
            the lock is first waited for) when None.
        poll_s: seconds between attempts.
        log_every_s: seconds between "waiting for ..." log lines.

    Raises:
        LockTimeoutError: on ``__enter__``, when the lock stays held longer than ``timeout_s``; the
            message names the holder and how long it has held the lock.
        SettingError: on ``__enter__``, a bad ``ANYACCEL_BUILD_LOCK_TIMEOUT``.
        CacheSecurityError, CacheUnusableError: on ``__enter__`` (see `open_lock_file`).
    """

    def __init__(self, path: Path, what: str, timeout_s: float | None = None, poll_s: float = 0.1,
                 log_every_s: float = 10.0) -> None:
        self.path = Path(path)
        self.what = what
        self._timeout_s = timeout_s
        self.poll_s = poll_s
        self.log_every_s = log_every_s
        self._fd: int | None = None

    @property
    def timeout_s(self) -> float:
        """Seconds to wait for the lock (see the class docstring).

        Raises:
            SettingError: a bad ``ANYACCEL_BUILD_LOCK_TIMEOUT``.
        """
        if self._timeout_s is None:
            self._timeout_s = default_timeout_s()
        return self._timeout_s

    def holder(self) -> str:
        """A description of the current holder from the lock file ("pid 12 on host h for 3.2 s")."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
            try:
                raw = os.read(fd, 4096)
            finally:
                os.close(fd)
            info = json.loads(raw or b"{}")
            return (f"pid {info['pid']} on {info['host']} for {time.time() - float(info['since']):.1f} s")
        except (OSError, ValueError, KeyError, TypeError):
            return "an unknown process"

    def acquire(self) -> None:
        """Block until the lock is ours or the timeout passes (see the class docstring)."""
        timeout_s = self.timeout_s
        fd = open_lock_file(self.path)
        start = time.monotonic()
        next_log = start + min(self.log_every_s, 1.0)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    now = time.monotonic()
                    if now - start >= timeout_s:
                        raise LockTimeoutError(
                            f"waited {now - start:.1f} s for the build of {self.what}, held by "
                            f"{self.holder()} (lock {self.path}); if that process is alive and still "
                            f"compiling, wait or raise {TIMEOUT_ENV} (now {timeout_s:g} s); a dead "
                            f"process never holds this lock"
                        ) from None
                    if now >= next_log:
                        logger.info("waiting for the build of %s, held by %s", self.what, self.holder())
                        next_log = now + self.log_every_s
                    time.sleep(self.poll_s)
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                      "since": time.time()}).encode(), 0)
        except OSError as exc:  # a full disk: the lock holds without the holder's note
            logger.debug("could not note the holder in %s: %s", self.path, exc)
        self._fd = fd
        waited = time.monotonic() - start
        if waited > 1.0:
            logger.info("got the build lock of %s after %.1f s", self.what, waited)

    def release(self) -> None:
        """Release the lock (the file stays); a no-op when not held."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass  # the note stays; the lock is released all the same
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def try_acquire(self) -> bool:
        """Take the lock if it is free right now; never waits. Returns whether it is held.

        Raises:
            CacheSecurityError, CacheUnusableError: see `open_lock_file`.
        """
        fd = open_lock_file(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def is_held(self) -> bool:
        """Whether another open file description holds the lock right now (takes and drops it if free)."""
        if not self.try_acquire():
            return True
        fd, self._fd = self._fd, None
        assert fd is not None  # try_acquire succeeded
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        return False

    def __enter__(self) -> BuildLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
