"""``anyaccel tune`` / ``python -m anyaccel.tune_command``: measure the override mode's per-shape policy on the
selected accelerator (`anyaccel.ops.tune`).

This command sits above the accelerator layer, so it is what asks for ``anyaccel.get_accelerator()`` and passes
it down: the op layer's tuner does not reach up for it. Cheap to import (``anyaccel --help`` lists it): torch and
the tuner are imported when the command runs.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The tuner's options (`anyaccel.ops.tune.add_arguments`)."""
    from anyaccel.ops import tune

    tune.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Measure on ``anyaccel.get_accelerator()``; returns the exit status (`anyaccel.ops.tune.run`)."""
    from anyaccel.accelerator import get_accelerator
    from anyaccel.ops import tune

    return tune.run(args, get_accelerator())


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m anyaccel.tune_command``."""
    from anyaccel.ops import tune

    parser = argparse.ArgumentParser(prog="python -m anyaccel.tune_command",
                                     description=(tune.__doc__ or "").splitlines()[0])
    add_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="anyaccel: %(message)s")
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
