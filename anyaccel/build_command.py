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
    parser.add_argument("--accelerator", default="*",
                        help="build the builders of this accelerator (default '*': the host ops)")


def run(args: argparse.Namespace) -> int:
    """Build the selected ops into the cache; print a built/skipped/failed table.

    SIGINT and SIGTERM stop the build cleanly: every process it started is killed, its build directory
    removed, nothing is cached; one line (``anyaccel: interrupted; nothing was cached``) is printed, no
    traceback.

    Returns:
        0 when everything asked for was built; 1 when a build failed, or when an op named with ``--ops`` was
        skipped (its toolchain is missing) or has no build for the accelerator; 2 for an unknown op or
        accelerator name (the message lists the valid ones); 130 after SIGINT, 143 after SIGTERM.

    Side effects: SIGTERM raises an interrupt in this process while the command runs.
    """
    import signal
    import threading

    from anyaccel.op_builder.core import interrupt

    main = threading.current_thread() is threading.main_thread()  # only the main thread may set a handler
    previous = signal.signal(signal.SIGTERM, interrupt.raise_interrupt) if main else None
    try:
        return _run(args)
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM as interrupt.BuildInterrupted
        interrupt.report(exc)
        return interrupt.exit_status(exc)
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    from anyaccel.op_builder.cli.aot import build_all, format_table
    from anyaccel.op_builder.errors import UnknownOpError
    from anyaccel.ops.registry import ANY_ACCELERATOR, all_builder_names, get_builder_class

    accelerators = _accelerator_names()
    if args.accelerator != ANY_ACCELERATOR and args.accelerator not in accelerators:
        logger.error("--accelerator %r names no known accelerator; valid names are %s, or '%s' (the host ops, the "
                     "default)", args.accelerator, ", ".join(accelerators), ANY_ACCELERATOR)
        return 2
    explicit = bool(args.ops)
    names = args.ops or all_builder_names()
    classes = []
    missing = []
    for name in names:
        try:
            cls = get_builder_class(name, args.accelerator)
        except UnknownOpError as exc:
            logger.error("%s", exc)
            return 2
        if cls is not None:
            classes.append(cls)
        elif explicit:
            served = [a for a in [ANY_ACCELERATOR, *accelerators] if get_builder_class(name, a) is not None]
            missing.append(name)
            logger.error("op %s has no build for accelerator %r; it has builds for: %s (pass --accelerator)", name,
                         args.accelerator, ", ".join(served) or "none")
    outcomes = build_all(classes, lambda b: str(b.jit_load().path), lambda b: b.compatibility())
    sys.stdout.write(format_table(outcomes) + "\n")
    failures: dict[str, list[str]] = {}  # error -> the ops that failed with it: each error is printed once
    for o in outcomes:
        if o.status == "failed":
            failures.setdefault(o.error, []).append(o.op)
        elif o.status == "skipped" and explicit:
            logger.error("%s was asked for but skipped: %s", o.op, o.detail)
    for error, ops in failures.items():
        logger.error("%s: %s", ", ".join(ops), error)
    bad = any(o.status == "failed" or (explicit and o.status == "skipped") for o in outcomes)
    return 1 if bad or missing else 0


def _accelerator_names() -> list[str]:
    """Every known accelerator name (built-ins, plug-ins, registrations), sorted."""
    from anyaccel.accelerator.registry import all_accelerator_specs

    return sorted(spec.name for spec in all_accelerator_specs())
