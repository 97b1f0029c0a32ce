"""``anyaccel build [--ops NAME ...] [--accelerator NAME]``: build ops into the cache, with a table.

Cheap to import (``anyaccel --help`` imports it): the builders are imported when the command runs.
"""

from __future__ import annotations

import argparse
import logging
import sys

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``--ops`` (default: every op) and ``--accelerator`` (default: every accelerator's host ops)."""
    parser.add_argument("--ops", nargs="+", metavar="NAME", help="ops to build (default: all)")
    parser.add_argument("--accelerator", default="*", help="build the builders of this accelerator (default: host ops)")


def run(args: argparse.Namespace) -> int:
    """Build the selected ops into the cache; print a built/skipped/failed table.

    Returns:
        0 when nothing failed, 1 otherwise; 2 for an unknown op name.
    """
    from anyaccel.op_builder.cli.aot import build_all, format_table
    from anyaccel.op_builder.core.errors import UnknownOpError
    from anyaccel.op_builder.registry import all_builder_names, get_builder_class

    names = args.ops or all_builder_names()
    for name in names:
        try:
            get_builder_class(name, args.accelerator)
        except UnknownOpError as exc:
            logger.error("%s", exc)
            return 2
    classes = [get_builder_class(name, args.accelerator) for name in names]
    outcomes = build_all([c for c in classes if c is not None], lambda b: str(b.jit_load().path),
                         lambda b: b.compatibility())
    sys.stdout.write(format_table(outcomes) + "\n")
    for o in outcomes:
        if o.status == "failed":
            logger.error("%s", o.error)
    return 1 if any(o.status == "failed" for o in outcomes) else 0
