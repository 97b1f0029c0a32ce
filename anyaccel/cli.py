"""The ``anyaccel`` command line: ``report``, ``build``, ``cache``, ``migrate`` and ``tune``.

Each subcommand lives in the module that owns its concern; this file only wires them together. A
subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> int`` and is imported only when
its subcommand is named, so ``anyaccel --help`` imports none of them (and no torch), and
``anyaccel migrate --help`` only the migrate command's.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Sequence

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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``anyaccel`` console script and of ``python -m anyaccel``.

    Args:
        argv: the arguments without the program name; ``sys.argv[1:]`` when None.

    Returns:
        The process exit status: 0 on success (also when the reader of stdout goes away, as in
        ``anyaccel cache clean | head -1``: quietly), 2 for a usage error, 1 or a subcommand's own code otherwise.

    Side effects: configures logging (``basicConfig``); while the subcommand runs, lowers the loggers of
    ``QUIET_LOGGERS`` to WARNING unless ``-v``; on a closed stdout, points stdout at ``/dev/null``.
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
    quiet = {} if args.verbose else {name: logging.getLogger(name) for name in QUIET_LOGGERS}
    levels = {name: logger.level for name, logger in quiet.items()}
    for logger in quiet.values():
        logger.setLevel(logging.WARNING)
    try:
        status = int(importlib.import_module(args._module).run(args) or 0)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left (`anyaccel cache clean | head -1`): no traceback, no error
        _silence_stdout()
        return 0
    finally:  # main() called in a process that goes on (a test, a wrapper) leaves its loggers as they were
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
