"""Migrate sources in a worker process, so that libcst's native parser can neither crash nor stall a run.

libcst parses in native code that recurses on the machine stack: on 5,000 nested parentheses, 20,000
``not``-s or an ``a and a and ...`` chain of 10,000 terms it overflows the stack and the process dies with
SIGSEGV, taking every other file of the run with it; a sum of 10,000 terms takes minutes. No check of the
text alone covers these (the ``and`` chain has no nesting at all, and CPython's own parser accepts it), so:

1. CPython's parser runs first (``screen.cpython_refusal``: ``compile(..., PyCF_ONLY_AST)``: C, guarded
   against deep input, well under 1% of libcst's time). A source it refuses as too deep or too long
   (``RecursionError``, ``MemoryError``, "too many nested parentheses", "too many levels of indentation")
   is a ``too-complex`` finding at once; libcst never sees it. Other syntax errors go on to libcst, which
   reports them as before (it accepts newer grammar than the running CPython).
2. Everything else is migrated in one long-lived worker process (``python -c``, libcst imported once per
   run; the texts and results travel as pickles over its stdin/stdout). When the worker dies (a crash of
   the parser) or libcst's parse of one file takes longer than `TIMEOUT_S`, that file gets a ``too-complex``
   finding naming what happened, and the next file gets a new worker.
3. The worker says when the parse is done; the rewrite that follows is linear in the file's length (a
   flat 20,000-line file is long, not deep), so it gets a bound of its own, `TIMEOUT_S` plus
   `REWRITE_S_PER_LINE` per line; past it the file gets a ``too-slow`` finding that says so, not
   ``too-complex``.

Measured on the 14 files of ``tests/migrate/corpus`` (26 KiB; 2 shared cores): migrating them in this
process took 2.25 s, through the worker 2.83 s (its start, once per run), with a process per file 8.84 s.
The screens cost 0.004 s (CPython's parser) and 0.012 s (a bracket-depth count with ``tokenize``, which
would also miss the ``and`` chain), so CPython's parser is the screen, and the worker the guarantee.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
from typing import IO, Any

from anyaccel.migrate.findings import MigrationResult
from anyaccel.migrate.screen import cpython_refusal, too_complex, too_slow

logger = logging.getLogger(__name__)

#: Seconds libcst's parse of one file may take in the worker before it is killed (a normal file takes well
#: under one; the parser's stalls are on deep nesting and long chains, not on length).
TIMEOUT_S = 60.0
#: Seconds per line added to `TIMEOUT_S` for the rewrite after the parse: 2,000 flat lines took 40 s to
#: rewrite (20 ms a line) on 2 cores shared by 8 busy processes; three times that is the allowance.
REWRITE_S_PER_LINE = 0.06
_BOOT = ("import pickle, sys; sys.path[:0] = pickle.load(sys.stdin.buffer); "
         "from anyaccel.migrate.isolated import serve; serve()")


class IsolatedMigrator:
    """``engine.migrate_source`` for one file after another, in a worker process (see the module docstring).

    Args:
        torch_accelerator: passed to ``migrate_source`` (the ``torch.accelerator`` members rewrites may
            target); None detects them once, here, so the worker never imports torch.
        timeout_s: seconds libcst's parse of one file may take in the worker; the rewrite after it gets
            ``timeout_s + rewrite_s_per_line * lines``.
        rewrite_s_per_line: see ``timeout_s``.

    Use as a context manager, or call `close`; the worker is started on the first file.
    """

    #: the worker's command line after the interpreter (``python -c``)
    _WORKER: tuple[str, ...] = ("-c", _BOOT)

    def __init__(self, torch_accelerator: frozenset[str] | None = None, timeout_s: float = TIMEOUT_S,
                 rewrite_s_per_line: float = REWRITE_S_PER_LINE) -> None:
        if torch_accelerator is None:
            from anyaccel.migrate.torch_api import torch_accelerator_members

            torch_accelerator = torch_accelerator_members()
        self._torch_accelerator = torch_accelerator
        self.timeout_s = timeout_s
        self.rewrite_s_per_line = rewrite_s_per_line
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    def migrate(self, source: str, path: str) -> MigrationResult:
        """Migrate ``source`` (named ``path`` in findings) as ``engine.migrate_source`` does.

        Returns:
            The ``MigrationResult``; ``error`` is a ``too-complex`` finding when CPython refuses the source as
            too deep, the parser crashed on it, its parse took longer than ``timeout_s`` or Python's recursion
            limit was reached while rewriting it; a ``too-slow`` finding when the rewrite after the parse took
            longer than its bound (see the class).

        Raises:
            RuntimeError: the codemod itself failed on the file (a bug; the message names the file), as
                ``migrate_source`` raises it.
        """
        why = cpython_refusal(source)
        if why is not None:
            return too_complex(source, path, why)
        proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
        assert proc.stdin is not None and proc.stdout is not None
        ready: list[Any] = []
        reply = None
        parsed = False
        lines = source.count("\n") + 1
        rewrite_s = self.timeout_s + self.rewrite_s_per_line * lines
        try:
            pickle.dump((source, path, self._torch_accelerator), proc.stdin)
            proc.stdin.flush()
            while reply is None:
                ready, _, _ = select.select([proc.stdout], [], [], rewrite_s if parsed else self.timeout_s)
                if not ready:
                    break
                message = _receive(proc.stdout.fileno())
                if message[0] == "parsed":
                    parsed = True
                else:
                    reply = message
        except (OSError, EOFError, pickle.UnpicklingError):
            ready = [proc.stdout]  # the worker died: not a timeout
        if reply is None:
            if parsed and not ready:
                self._stop(timed_out=True)
                return too_slow(source, path, f"libcst parsed it, but the rewrite of its {lines} lines took longer "
                                f"than {rewrite_s:g} s")
            return too_complex(source, path, self._stop(timed_out=not ready))
        status, payload = reply
        if status == "ok":
            return payload
        if status == "recursion":
            return too_complex(source, path, f"Python's recursion limit was reached while rewriting it: {payload}")
        raise RuntimeError(payload)

    def _start(self) -> subprocess.Popen[bytes]:
        self._stop(timed_out=False)
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen([sys.executable, *self._WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr)
        assert self._proc.stdin is not None
        pickle.dump([p for p in sys.path if p], self._proc.stdin)
        self._proc.stdin.flush()
        return self._proc

    def _stop(self, timed_out: bool) -> str:
        """End the worker (killed when ``timed_out`` or still running) and say how it ended."""
        proc, self._proc = self._proc, None
        if proc is None:
            return "no worker"
        if proc.poll() is None:
            proc.kill()
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        code = proc.wait()
        last = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
            last = lines[-1] if lines else ""
            self._stderr.close()
            self._stderr = None
        if timed_out:
            return f"libcst's parser took longer than {self.timeout_s:g} s"
        name = signal.Signals(-code).name if code < 0 and -code in signal.Signals._value2member_map_ else str(code)
        return f"libcst's parser crashed: the worker process died with {name}" + (f" ({last})" if last else "")

    def close(self) -> None:
        """Stop the worker (idempotent)."""
        proc = self._proc
        if proc is not None and proc.stdin is not None and proc.poll() is None:
            try:
                proc.stdin.close()  # the worker ends on end of input
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._stop(timed_out=False)

    def __enter__(self) -> IsolatedMigrator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve() -> None:
    """The worker's loop: read ``(source, path, torch_accelerator)`` pickles from stdin, write ``("parsed",
    None)`` once libcst has parsed the source, then ``("ok", MigrationResult)``, ``("recursion", message)`` or
    ``("error", message)``, as `send` frames them, to stdout, until end of input."""
    from anyaccel.migrate.engine import migrate_source

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but replies on the reply channel
    while True:
        try:
            source, path, members = pickle.load(stdin)
        except EOFError:
            return
        reply: tuple[str, Any]

        def parsed() -> None:
            send(stdout, ("parsed", None))

        try:
            reply = ("ok", migrate_source(source, path, torch_accelerator=members, on_parsed=parsed))
        except RecursionError as exc:
            reply = ("recursion", str(exc))
        except Exception as exc:  # the codemod's own failure: the parent raises it for this file
            reply = ("error", str(exc) or type(exc).__name__)
        send(stdout, reply)



def send(stream: IO[bytes], message: Any) -> None:
    """Write ``message`` to ``stream`` as one frame: 8 bytes of length (little-endian), then its pickle.

    The parent waits for a frame with ``select`` on the pipe and reads it with `_receive`, byte-exact and
    unbuffered: a buffered reader could swallow the next frame with this one, and ``select`` would then wait
    for bytes already read.
    """
    data = pickle.dumps(message)
    stream.write(len(data).to_bytes(8, "little") + data)
    stream.flush()


def _receive(fd: int) -> Any:
    """Read one frame of `send` from ``fd`` (blocking until the whole frame is there).

    Raises:
        EOFError: the pipe ended inside a frame or before one (the worker died).
    """
    size = int.from_bytes(_read_exact(fd, 8), "little")
    return pickle.loads(_read_exact(fd, size))


def _read_exact(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            raise EOFError("the worker's pipe ended")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
