"""An inter-process build lock the kernel releases when its holder dies (user pain P3).

``fcntl.flock`` on a lock file: the kernel drops the lock when the holding process exits for any reason
(SIGKILL and OOM kill included), so a crashed build never blocks the next run, unlike torch's
``FileBaton``, which waits forever on a file left behind. The lock file is never deleted (deleting a
lock file while someone waits on it would let two holders in); a file left by a dead process is simply
acquired again.

The holder writes its pid, host and start time into the file, so waiters can log who holds the build and
for how long; a wait longer than the timeout ends in :class:`LockTimeoutError`.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path
from types import TracebackType

from anyaccel.op_builder.core.errors import LockTimeoutError

logger = logging.getLogger(__name__)

TIMEOUT_ENV = "ANYACCEL_BUILD_LOCK_TIMEOUT"
DEFAULT_TIMEOUT_S = 1800.0


def default_timeout_s() -> float:
    """``ANYACCEL_BUILD_LOCK_TIMEOUT`` in seconds, else 1800.

    Raises:
        ValueError: the variable is not a positive number.
    """
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ValueError(f"{TIMEOUT_ENV}={raw!r} is not a positive number of seconds; e.g. set it to 600")
    return value


class BuildLock:
    """An exclusive ``flock`` on ``path``, used as a context manager.

    Args:
        path: the lock file (created if missing).
        what: what the lock protects, for log and error messages (e.g. "cpu_adam 1a2b3c").
        timeout_s: seconds to wait before :class:`LockTimeoutError`; :func:`default_timeout_s` when None.
        poll_s: seconds between attempts.
        log_every_s: seconds between "waiting for ..." log lines.

    Raises:
        LockTimeoutError: on ``__enter__``, when the lock stays held longer than ``timeout_s``; the
            message names the holder and how long it has held the lock.
    """

    def __init__(self, path: Path, what: str, timeout_s: float | None = None, poll_s: float = 0.1,
                 log_every_s: float = 10.0) -> None:
        self.path = Path(path)
        self.what = what
        self.timeout_s = default_timeout_s() if timeout_s is None else timeout_s
        self.poll_s = poll_s
        self.log_every_s = log_every_s
        self._fd: int | None = None

    def holder(self) -> str:
        """A description of the current holder from the lock file ("pid 12 on host h for 3.2 s")."""
        try:
            info = json.loads(self.path.read_text() or "{}")
            return (f"pid {info['pid']} on {info['host']} for {time.time() - float(info['since']):.1f} s")
        except (OSError, ValueError, KeyError, TypeError):
            return "an unknown process"

    def acquire(self) -> None:
        """Block until the lock is ours or the timeout passes (see the class docstring)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        start = time.monotonic()
        next_log = start + min(self.log_every_s, 1.0)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    now = time.monotonic()
                    if now - start >= self.timeout_s:
                        raise LockTimeoutError(
                            f"waited {now - start:.1f} s for the build of {self.what}, held by "
                            f"{self.holder()} (lock {self.path}); if that process is alive and still "
                            f"compiling, wait or raise {TIMEOUT_ENV} (now {self.timeout_s:g} s); a dead "
                            f"process never holds this lock"
                        ) from None
                    if now >= next_log:
                        logger.info("waiting for the build of %s, held by %s", self.what, self.holder())
                        next_log = now + self.log_every_s
                    time.sleep(self.poll_s)
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                  "since": time.time()}).encode(), 0)
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
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def try_acquire(self) -> bool:
        """Take the lock if it is free right now; never waits. Returns whether it is held."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
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
