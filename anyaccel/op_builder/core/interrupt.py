"""Interrupted builds end cleanly: SIGINT and SIGTERM during a build leave no process, no build directory and
nothing cached, print one line, and end the process with the signal's status.

SIGINT already raises ``KeyboardInterrupt`` in Python's main thread; SIGTERM's default action kills the
process on the spot, leaving ninja, the compilers (in a session of their own, which the signal does not reach)
and the private build directory behind. `terminate_as_interrupt` turns SIGTERM into
`BuildInterrupted` (a ``KeyboardInterrupt``) for the duration of a build, so the cleanup that already
runs for Ctrl-C (``run_ninja`` kills every process of the build, the build directory is removed, the lock is
released) runs for SIGTERM too; then the process dies of SIGTERM as it would have (exit status 143).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

#: The one line an interrupted build prints on standard error.
INTERRUPTED_LINE = "anyaccel: interrupted; nothing was cached"


class BuildInterrupted(KeyboardInterrupt):
    """SIGTERM (or another signal turned into an interrupt) arrived during a build.

    Attributes:
        signum: the signal's number.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def exit_status(exc: KeyboardInterrupt) -> int:
    """The shell's exit status for a process ended by ``exc``: 128 + the signal (130 for SIGINT, 143 for
    SIGTERM)."""
    return 128 + getattr(exc, "signum", signal.SIGINT)


def report(exc: KeyboardInterrupt) -> None:
    """Print `INTERRUPTED_LINE` on standard error, once per interrupt (marks ``exc``)."""
    if getattr(exc, "anyaccel_reported", False):
        return
    exc.anyaccel_reported = True  # type: ignore[attr-defined]
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(INTERRUPTED_LINE + "\n")
        sys.stderr.flush()


def raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """A signal handler: raise `BuildInterrupted` for ``signum`` in the main thread."""
    raise BuildInterrupted(signum)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Run a build with SIGTERM raising `BuildInterrupted`, and report an interrupt.

    The handler is installed only in the main thread and only where SIGTERM has its default action (a program
    that handles SIGTERM keeps its handler; ``anyaccel build`` installs `raise_interrupt` itself). On an
    interrupt (SIGINT's ``KeyboardInterrupt`` or SIGTERM's `BuildInterrupted`) the cleanup inside has run
    when it reaches here; `INTERRUPTED_LINE` is printed, and then, for a SIGTERM this function turned
    into an exception, the default action is restored and the signal sent again: the process ends with status
    143, as SIGTERM's default would have ended it. A ``KeyboardInterrupt`` propagates to the caller's program.

    Side effects: changes the SIGTERM disposition of the process while the build runs.
    """
    installed = (threading.current_thread() is threading.main_thread()
                 and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
    if installed:
        signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    except KeyboardInterrupt as exc:
        report(exc)
        if installed and isinstance(exc, BuildInterrupted) and exc.signum == signal.SIGTERM:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            installed = False
            os.kill(os.getpid(), signal.SIGTERM)
        raise
    finally:
        if installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
