"""The ``anyaccel`` command line: ``report``, ``build``, ``cache``, ``migrate`` and ``tune``.

Each subcommand lives in the module that owns its concern; this file only wires them together. A
subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> int`` and is imported only when
its subcommand is named, so ``anyaccel --help`` imports none of them (and no torch), and
``anyaccel migrate --help`` only the migrate command's.
"""

from __future__ import annotations

import argparse
import importlib
import io
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any, TextIO, cast

from typing_extensions import override

logger = logging.getLogger(__name__)

# subcommand -> (module, one-line help). Adding a command is one row here.
SUBCOMMANDS = {
    "report": ("anyaccel.report", "show the chosen accelerator, toolchain, SIMD level, cache and ops"),
    "build": ("anyaccel.build_command", "build ops into the cache ahead of time"),
    "cache": ("anyaccel.op_builder.cli.cache", "list or clean the op cache"),
    "migrate": ("anyaccel.migrate.cli", "rewrite torch.cuda-only code to the accelerator API"),
    "tune": ("anyaccel.tune_command", "measure the aten-override mode's per-shape policy on this device"),
}

#: Warnings that torch emits at import and that a user of this command cannot act on, as (message regex,
#: category). torch warns "Failed to initialize NumPy: No module named 'numpy'" when numpy is absent;
#: anyaccel needs no numpy, so on such a machine every command printed it for nothing.
UNACTIONABLE_WARNINGS = ((r"Failed to initialize NumPy", UserWarning),)


def ignore_unactionable_warnings() -> None:
    """Filter out `UNACTIONABLE_WARNINGS`, exactly those; must run before torch is first imported.

    Side effects: adds entries to this process's ``warnings`` filters (not to child processes).
    """
    for message, category in UNACTIONABLE_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)


#: Loggers whose INFO records a command does not print (``-v`` shows them): the accelerator selection logs
#: its choice at INFO, which ``anyaccel report`` prints in full and no other command needs on every run.
QUIET_LOGGERS = ("anyaccel.accelerator.selection",)

#: The parser's description: plain text (``--help`` prints it as it is, so no markup).
DESCRIPTION = "anyaccel's command line: report, build, cache, migrate and tune."


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (its first word that is not an option), or None when it names none.

    Only ``-v``/``--verbose`` and ``-h``/``--help`` come before the subcommand, and neither takes a value, so
    the first word not starting with ``-`` is the subcommand (or a usage error argparse reports).
    """
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in SUBCOMMANDS else None
    return None


def build_parser(command: str | None = "*") -> argparse.ArgumentParser:
    """Return the top-level parser with one subparser per entry of ``SUBCOMMANDS``.

    Args:
        command: the subcommand whose arguments to declare; ``"*"`` (the default): every subcommand's; None:
            none (enough for ``anyaccel --help`` and for usage errors before a subcommand).

    Side effects: imports the module of each subcommand whose arguments it declares (so ``anyaccel --help``
    imports none, and ``anyaccel migrate --help`` only ``anyaccel.migrate.cli``: no torch).
    """
    parser = argparse.ArgumentParser(prog="anyaccel", description=DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        if command in ("*", name):
            module = importlib.import_module(module_name)
            module.add_arguments(sp)
        sp.set_defaults(_module=module_name)
    return parser


class StdoutError(OSError):
    """Writing the command's output to stdout failed: a full disk or ``/dev/full`` (ENOSPC), an I/O error, a
    file descriptor that is not open for writing. Not raised for a reader that left (``BrokenPipeError``)."""


class GuardedStdout(io.TextIOBase):
    """``sys.stdout`` while a subcommand runs: a ``write`` or ``flush`` that fails raises
    [`StdoutError`][anyaccel.cli.StdoutError], so [`main`][anyaccel.cli.main] tells a failure of the output
    from an ``OSError`` of the command's own work (a file it could not read). Anything else goes to ``stream``.

    Args:
        stream: the real stdout.
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream

    @override
    def write(self, text: str) -> int:
        """Write ``text`` to the stream; returns what the stream returns.

        Raises:
            StdoutError: the stream's write failed with an ``OSError`` other than ``BrokenPipeError``.
            BrokenPipeError: the reader left.
        """
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutError(exc.errno, exc.strerror) from exc

    @override
    def flush(self) -> None:
        """Flush the stream (raises as [`write`][anyaccel.cli.GuardedStdout.write])."""
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutError(exc.errno, exc.strerror) from exc

    @override
    def fileno(self) -> int:
        return self._stream.fileno()

    @override
    def isatty(self) -> bool:
        return self._stream.isatty()

    @override
    def writable(self) -> bool:
        return True

    @property
    @override
    def encoding(self) -> str:  # type: ignore[override]  # io.TextIOBase declares it an attribute
        return self._stream.encoding

    def __getattr__(self, name: str) -> Any:  # buffer, errors, newlines, reconfigure, ...
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``anyaccel`` console script and of ``python -m anyaccel``.

    Args:
        argv: the arguments without the program name; ``sys.argv[1:]`` when None.

    Returns:
        The process exit status: 0 on success (also when the reader of stdout goes away, as in
        ``anyaccel cache clean | head -1``: quietly), 2 for a usage error, 1 or a subcommand's own code otherwise.
        1 also when stdout is closed (checked before the subcommand starts, so it changes nothing) or writing
        to it fails (a full disk, ``/dev/full``): one line on stderr names the cause, no traceback.

    Side effects: configures logging (``basicConfig``); while the subcommand runs, lowers the loggers of
    ``QUIET_LOGGERS`` to WARNING unless ``-v`` and puts a [`GuardedStdout`][anyaccel.cli.GuardedStdout] in
    ``sys.stdout``; on a closed or failed stdout, points stdout at ``/dev/null``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    ignore_unactionable_warnings()  # before a subcommand's module imports torch
    parser = build_parser(command_of(argv))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="anyaccel: %(levelname)s: %(message)s",
    )
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    stdout = sys.stdout
    if stdout is None:  # the process started with file descriptor 1 closed (`anyaccel report >&-`)
        logger.error("standard output is closed; run 'anyaccel %s' with stdout open (redirect it to a file, or to "
                     "/dev/null to discard it)", args.command)
        return 1
    quiet = {} if args.verbose else {name: logging.getLogger(name) for name in QUIET_LOGGERS}
    levels = {name: quiet_logger.level for name, quiet_logger in quiet.items()}
    for quiet_logger in quiet.values():
        quiet_logger.setLevel(logging.WARNING)
    sys.stdout = cast(TextIO, GuardedStdout(stdout))
    try:
        status = int(importlib.import_module(args._module).run(args) or 0)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left (`anyaccel cache clean | head -1`): no traceback, no error
        _silence_stdout()
        return 0
    except StdoutError as exc:
        _silence_stdout()
        logger.error("cannot write the output of 'anyaccel %s' to stdout: %s; free space where it goes, or "
                     "redirect it elsewhere", args.command, exc.strerror or exc)
        return 1
    finally:  # main() called in a process that goes on (a test, a wrapper) leaves its loggers as they were
        sys.stdout = stdout
        for name, level in levels.items():
            quiet[name].setLevel(level)
    return status


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush into a closed pipe stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor behind stdout (a test's StringIO): nothing to flush
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
