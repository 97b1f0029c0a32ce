"""Building several ops one by one, each failure contained.

Shared by ``setup.py`` (``ANYACCEL_BUILD_OPS=1`` / ``ANYACCEL_BUILD_<NAME>=1``, into the package's
``_prebuilt`` directory, for wheels) and ``anyaccel build`` (into the cache): every build ends as built,
skipped or failed, and one failure never stops the others. The builds are the op specs' builds
([`anyaccel.op_builder.classes.spec_builds`][anyaccel.op_builder.classes.spec_builds]); a CPU build is built once per
SIMD level this machine's
compiler can target (x86-64: AVX-512, AVX2, portable; aarch64: NEON, portable), so one wheel serves every
CPU and the loader picks the level the CPU reports.
"""

from __future__ import annotations

import functools
import logging
import platform
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyaccel import settings
from anyaccel.op_builder.errors import OpBuilderError

logger = logging.getLogger(__name__)

ALL_OPS_ENV = settings.BUILD_OPS.name


@dataclass(frozen=True)
class BuildOutcome:
    """The result of building one op variant.

    Attributes:
        op: the build's NAME, with its variant (``"cpu_adam[avx2]"``).
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


def selected_builds(env: Mapping[str, str]) -> list[Any]:
    """The builder classes an AOT build should build.

    ``ANYACCEL_BUILD_OPS=1`` selects every build; ``ANYACCEL_BUILD_<NAME>=1`` (the build's variable, e.g.
    ``ANYACCEL_BUILD_CPU_ADAM``) one build; ``ANYACCEL_BUILD_<NAME>=0`` removes it from ``ANYACCEL_BUILD_OPS=1``.

    Returns:
        Builder classes, in spec order.
    """
    from anyaccel.op_builder.classes import builder_class, spec_builds

    everything = settings.BUILD_OPS.get(env)
    chosen = []
    for s, b in spec_builds():
        flag = settings.BUILD.state(env, name=b.build_var)
        if flag or (everything and flag is not False):
            chosen.append(builder_class(s.family, b.name))
    return chosen


def isa_variants(machine: str | None = None) -> tuple[str, ...]:
    """The SIMD levels a wheel built on ``machine`` carries (``platform.machine()`` when None)."""
    from anyaccel.op_builder.toolchains.cpu_isa import ISA_LEVELS

    machine = platform.machine() if machine is None else machine
    return tuple(name for name, lvl in ISA_LEVELS.items() if not lvl.machines or machine in lvl.machines)


def variants(cls: Any) -> list[tuple[str, Callable[[], Any]]]:
    """``(label, make_builder)`` per variant of a builder class: one per ISA level for CPU builds (those its
    spec implements), one otherwise."""
    build = getattr(cls, "BUILD", None)
    if getattr(cls, "BACKEND", "") == "cpu" and build is not None and build.isa_levels:
        levels = [lv for lv in isa_variants() if lv in build.isa_levels or lv == "portable"]
        return [(f"{cls.NAME}[{lv}]", functools.partial(cls, isa=lv)) for lv in levels]
    return [(str(cls.NAME), cls)]


def build_all(classes: Iterable[type], build: Callable[[Any], str],
              check: Callable[[Any], tuple[bool, str]]) -> list[BuildOutcome]:
    """Build every variant of ``classes`` with ``build(builder) -> detail``, catching every op-builder error.

    Args:
        classes: builder classes.
        build: builds one builder; returns a short description of the result (e.g. a path).
        check: ``(ok, reason)`` deciding whether to build or skip (``buildability`` or ``compatibility``).

    Returns:
        One `BuildOutcome` per variant, in order.
    """
    outcomes = []
    for cls in classes:
        for label, make in variants(cls):
            t0 = time.monotonic()
            try:
                builder = make()
                ok, reason = check(builder)
                if not ok:
                    outcomes.append(BuildOutcome(label, "skipped", reason, time.monotonic() - t0))
                    continue
                outcomes.append(BuildOutcome(label, "built", build(builder), time.monotonic() - t0))
            except (OpBuilderError, OSError, ValueError, ImportError) as exc:
                logger.debug("building %s failed", label, exc_info=True)
                outcomes.append(BuildOutcome(label, "failed", str(exc).splitlines()[0], time.monotonic() - t0,
                                             str(exc)))
    return outcomes


def format_table(outcomes: Iterable[BuildOutcome]) -> str:
    """A plain-text table: op, status, seconds, detail."""
    rows = [("op", "status", "time", "detail")] + [
        (o.op, o.status, f"{o.seconds:.1f}s", o.detail) for o in outcomes]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}" for r in rows)


def build_prebuilt_ops(classes: Iterable[type], dest_root: Path) -> list[BuildOutcome]:
    """Build every variant into ``dest_root/<NAME>/<key>`` for installation (used by setup.py); a build is
    attempted when its toolchain is present (`buildability`), not only where it could run."""
    return build_all(classes, lambda b: str(b.build_prebuilt(Path(dest_root))), lambda b: b.buildability())
