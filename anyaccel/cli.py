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
import sys
import warnings
from collections.abc import Sequence

# subcommand -> (module, one-line help). Adding a command is one row here.
SUBCOMMANDS = {
    "report": ("anyaccel.report", "show the chosen accelerator, toolchain, SIMD level, cache and ops"),
    "build": ("anyaccel.build_command", "build ops into the cache ahead of time"),
    "cache": ("anyaccel.op_builder.cli.cache", "list or clean the op cache"),
    "migrate": ("anyaccel.migrate.cli", "rewrite torch.cuda-only code to the accelerator API"),
    "tune": ("anyaccel.ops.tune", "measure the aten-override mode's per-shape policy on this device"),
}

#: Warnings that torch emits at import and that a user of this command cannot act on, as (message regex,
#: category). torch warns "Failed to initialize NumPy: No module named 'numpy'" when numpy is absent;
#: anyaccel needs no numpy, so on such a machine every command printed it for nothing.
UNACTIONABLE_WARNINGS = ((r"Failed to initialize NumPy", UserWarning),)


def ignore_unactionable_warnings() -> None:
    """Filter out :data:`UNACTIONABLE_WARNINGS`, exactly those; must run before torch is first imported.

    Side effects: adds entries to this process's ``warnings`` filters (not to child processes).
    """
    for message, category in UNACTIONABLE_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)


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
        The process exit status: 0 on success, 2 for a usage error, 1 or a subcommand's own code otherwise.
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
    return int(importlib.import_module(args._module).run(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
