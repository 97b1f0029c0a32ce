"""Building several ops one by one, each failure contained (user pain P9).

Shared by ``setup.py`` (``ANYACCEL_BUILD_OPS=1`` / ``ANYACCEL_BUILD_<OP>=1``, into the package's
``_prebuilt`` directory) and ``anyaccel build`` (into the cache): every op ends as built, skipped or
failed, and one failure never stops the others.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional

from anyaccel.op_builder.errors import OpBuilderError
from anyaccel.op_builder.registry import ANY_ACCELERATOR, all_builder_names, any_builder_class, get_builder_class

logger = logging.getLogger(__name__)

ALL_OPS_ENV = "ANYACCEL_BUILD_OPS"


@dataclass(frozen=True)
class BuildOutcome:
    """The result of building one op.

    Attributes:
        op: the op's NAME.
        status: "built", "skipped" or "failed".
        detail: where it went, why it was skipped, or the error's first line.
        seconds: wall time spent, in seconds.
        error: the full error text for failures ("" otherwise).
    """

    op: str
    status: str
    detail: str
    seconds: float
    error: str = ""


def selected_ops(env: Mapping[str, str], names: Optional[Iterable[str]] = None) -> list[str]:
    """The ops an AOT build should build.

    ``ANYACCEL_BUILD_OPS=1`` selects every op; ``ANYACCEL_BUILD_<OP>=1`` (the builder's ``BUILD_VAR``) one
    op; ``ANYACCEL_BUILD_<OP>=0`` removes it from ``ANYACCEL_BUILD_OPS=1``.

    Args:
        env: the environment.
        names: the candidate op names; every registered op when None.
    """
    names = all_builder_names() if names is None else list(names)
    everything = env.get(ALL_OPS_ENV, "0") == "1"
    chosen = []
    for name in names:
        cls = any_builder_class(name)
        var = getattr(cls, "BUILD_VAR", "") if cls is not None else f"ANYACCEL_BUILD_{name.upper()}"
        flag = env.get(var)
        if flag == "1" or (everything and flag != "0"):
            chosen.append(name)
    return chosen


def build_ops(names: Iterable[str], build: Callable[[object], str], accelerator_name: str = ANY_ACCELERATOR
              ) -> list[BuildOutcome]:
    """Build each op with ``build(builder) -> detail``, catching every op-builder error.

    Args:
        names: op names.
        build: called with a builder instance; returns a short description of the result (e.g. a path).
        accelerator_name: which accelerator's builder to use.

    Returns:
        One :class:`BuildOutcome` per name, in order.
    """
    outcomes = []
    for name in names:
        t0 = time.monotonic()
        try:
            cls = get_builder_class(name, accelerator_name)
            if cls is None:
                outcomes.append(BuildOutcome(name, "skipped", f"no builder for accelerator {accelerator_name}", 0.0))
                continue
            builder = cls()
            ok, reason = builder.compatibility()
            if not ok:
                outcomes.append(BuildOutcome(name, "skipped", reason, time.monotonic() - t0))
                continue
            detail = build(builder)
            outcomes.append(BuildOutcome(name, "built", detail, time.monotonic() - t0))
        except (OpBuilderError, OSError, ValueError) as exc:
            logger.debug("building %s failed", name, exc_info=True)
            outcomes.append(BuildOutcome(name, "failed", str(exc).splitlines()[0], time.monotonic() - t0, str(exc)))
    return outcomes


def format_table(outcomes: Iterable[BuildOutcome]) -> str:
    """A plain-text table: op, status, seconds, detail."""
    rows = [("op", "status", "time", "detail")] + [
        (o.op, o.status, f"{o.seconds:.1f}s", o.detail) for o in outcomes]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}" for r in rows)


def build_prebuilt_ops(names: Iterable[str], dest_root: Path) -> list[BuildOutcome]:
    """Build ops into ``dest_root/<NAME>/<key>`` for installation (used by setup.py)."""
    return build_ops(names, lambda b: str(b.build_prebuilt(Path(dest_root))))
