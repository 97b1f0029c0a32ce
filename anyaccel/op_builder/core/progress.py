"""What a user sees while an op compiles: the op, its variant, the elapsed time and the steps done.

A cold build takes seconds (a CPU op) to minutes (a CUDA op for several archs); silence for that long reads
as a hang. `BuildProgress` writes to standard error, never to standard output (which belongs to the
user's program):

- on a terminal, one line redrawn in place as ninja reports finished steps and every half second
  (``anyaccel: building cpu_adam [avx2]  3.1 s  [1/3] compile cpu_adam_kernel.cpp``), replaced at the end by
  the outcome;
- elsewhere (a log file, CI, a pipe), exactly one line per op build, when it ends
  (``anyaccel: built op cpu_adam [avx2] in 6.2 s (3 steps)``), so logs stay short.

The line is also logged at DEBUG on this module's logger.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from collections.abc import Callable
from typing import TextIO

from anyaccel.op_builder.toolchains.ninja import STATUS_LINE

logger = logging.getLogger(__name__)

#: Seconds between redraws of the terminal line when nothing else happens.
REDRAW_S = 0.5


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # a closed or replaced stream
        return False


class BuildProgress:
    """The progress display of one op build.

    Args:
        op: the op's ``NAME``.
        variant: what distinguishes this build of the op ("avx2", "sm_90", ...; "" for none).
        stream: where to write; ``sys.stderr`` (as it is at construction) when None.
        clock: seconds, monotonic (tests pass a fake one).

    Side effects: writes to ``stream``; never raises from a failed write.
    """

    def __init__(self, op: str, variant: str = "", stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.op = op
        self.variant = variant
        self.stream = sys.stderr if stream is None else stream
        self.tty = _isatty(self.stream)
        self.clock = clock
        self.done = 0
        self.total = 0
        self.last_step = ""
        self._t0 = clock()
        self._drawn_at = -1.0

    @property
    def label(self) -> str:
        """``cpu_adam [avx2]`` (the op and its variant)."""
        return f"{self.op} [{self.variant}]" if self.variant else self.op

    @property
    def elapsed(self) -> float:
        """Seconds since the build started."""
        return self.clock() - self._t0

    def start(self) -> None:
        """Show that the build began (terminal only)."""
        self._draw()

    def on_line(self, line: str) -> None:
        """Take one line of ninja's output; a ``[k/N] step`` status line advances the display."""
        m = STATUS_LINE.match(line)
        if m is not None:
            self.done, self.total, self.last_step = int(m[1]), int(m[2]), m[3]
            self._draw()

    def on_tick(self) -> None:
        """Redraw the elapsed time (terminal only, at most every `REDRAW_S` seconds)."""
        if self.clock() - self._drawn_at >= REDRAW_S:
            self._draw()

    def finish(self, ok: bool, detail: str = "") -> str:
        """Write the outcome line (on a terminal it replaces the live line).

        Args:
            ok: whether the build succeeded.
            detail: for a failure, the diagnosis code.

        Returns:
            The line written (without the newline).
        """
        steps = f" ({self.total} steps)" if self.total else ""
        if ok:
            line = f"anyaccel: built op {self.label} in {self.elapsed:.1f} s{steps}"
        else:
            line = f"anyaccel: building op {self.label} failed after {self.elapsed:.1f} s" + (
                f" [{detail}]" if detail else "")
        self._write(("\r\x1b[K" if self.tty else "") + line + "\n")
        logger.debug("%s", line)
        return line

    def clear(self) -> None:
        """Erase the live line (terminal only; elsewhere nothing was written): an interrupted build."""
        if self.tty:
            self._write("\r\x1b[K")

    def _draw(self) -> None:
        if not self.tty:
            return
        self._drawn_at = self.clock()
        steps = f"  [{self.done}/{self.total}] {self.last_step}" if self.total else ""
        text = f"anyaccel: building {self.label}  {self.elapsed:5.1f} s{steps}"
        width = shutil.get_terminal_size((100, 24)).columns - 1
        self._write("\r\x1b[K" + text[:max(width, 20)])

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed stderr must not fail a build
            pass
