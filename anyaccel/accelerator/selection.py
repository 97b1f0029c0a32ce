"""Choosing the accelerator: ``get_accelerator()``, ``set_accelerator()``, ``explain()``.

Order (documented in ``docs/accelerators.md``):

1. an accelerator given to [`set_accelerator`][anyaccel.accelerator.selection.set_accelerator];
2. ``ANYACCEL_ACCELERATOR``, else DeepSpeed's ``DS_ACCELERATOR`` (so existing launch scripts work): an
   unknown name raises [`UnknownAcceleratorError`][anyaccel.accelerator.selection.UnknownAcceleratorError] listing the
   valid names, an unavailable one raises
   [`AcceleratorUnavailableError`][anyaccel.accelerator.selection.AcceleratorUnavailableError] with the probe's reason;
3. probes in priority order (plug-ins 500 by default, cuda 400, xpu 300, npu 200, mps 100), choosing the
   first whose device is really present;
4. CPU.

A probed stack that is installed but unusable (a CUDA build of torch that sees no GPU, ``torch_npu`` with
zero devices) is logged once with its reason; ``ANYACCEL_STRICT=1`` makes that an error. Nothing happens at
import: the environment and devices are read on the first ``get_accelerator()`` call, so variables a
launcher sets after ``import anyaccel`` are honoured. The choice is cached for the process.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
from typing import Any

from anyaccel import settings
from anyaccel.accelerator.abstract import DeepSpeedAccelerator
from anyaccel.accelerator.errors import (
    AcceleratorUnavailableError,
    InvalidAcceleratorError,
    UnknownAcceleratorError,
)
from anyaccel.accelerator.registry import AcceleratorSpec, ProbeResult, all_accelerator_specs

logger = logging.getLogger(__name__)

__all__ = [
    "OVERRIDE_ENVS",
    "STRICT_ENV",
    "CandidateReport",
    "SelectionReport",
    "get_accelerator",
    "set_accelerator",
    "explain",
    "reset_accelerator",
]

#: Environment variables naming the accelerator, first set wins.
_OVERRIDES = (settings.ACCELERATOR, settings.DS_ACCELERATOR)
OVERRIDE_ENVS: tuple[str, ...] = tuple(s.name for s in _OVERRIDES)
#: ``1``/``true``/``yes`` turns "GPU stack installed but unusable" into an error.
STRICT_ENV = settings.STRICT.name

NOT_PROBED = "not probed: a higher-priority accelerator was chosen first"


@dataclasses.dataclass(frozen=True)
class CandidateReport:
    """One accelerator's probe result as seen by selection.

    Attributes:
        name: the accelerator's name.
        priority: its probe priority (larger first).
        available: True when its device is usable.
        reason: why it is (un)available; `NOT_PROBED` when selection stopped before it.
        source: ``"builtin"``, ``"entry-point"``, ``"registered"``, ``"set_accelerator"`` or ``"env"``.
        probed: False when selection stopped before probing it.
        stack_present: its software stack is installed (see ``ProbeResult``).
    """

    name: str
    priority: int
    available: bool
    reason: str
    source: str
    probed: bool = True
    stack_present: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the fields."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class SelectionReport:
    """Why the accelerator was chosen, for ``anyaccel report`` and for programs.

    Attributes:
        chosen: the chosen accelerator's name.
        reason: one sentence: how it was chosen.
        source: what decided: ``"set_accelerator"``, ``"env"`` (with ``override_env``) or ``"probe"``.
        candidates: every known accelerator, highest priority first.
        override_env: the environment variable that decided, when ``source == "env"``.
        strict: whether ``ANYACCEL_STRICT`` was on.
    """

    chosen: str
    reason: str
    source: str
    candidates: list[CandidateReport]
    override_env: str | None = None
    strict: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (candidates as dicts)."""
        data = dataclasses.asdict(self)
        data["candidates"] = [c.to_dict() for c in self.candidates]
        return data


_lock = threading.RLock()
_accelerator: DeepSpeedAccelerator | None = None
_report: SelectionReport | None = None
_warned_unusable: set = set()


def _strict() -> bool:
    return settings.STRICT.get()


def _override() -> tuple[str | None, str | None]:
    """(variable, lower-cased value) of the first set override variable, or (None, None)."""
    for setting in _OVERRIDES:
        value = setting.get()
        if value:
            return setting.name, value
    return None, None


def _is_foreign_deepspeed_accelerator(obj: object) -> bool:
    """True for an instance of DeepSpeed's own abstract class, when DeepSpeed is already imported."""
    module = sys.modules.get("deepspeed.accelerator.abstract_accelerator")
    base = getattr(module, "DeepSpeedAccelerator", None)
    return isinstance(base, type) and isinstance(obj, base)


def validate_accelerator(obj: object) -> DeepSpeedAccelerator:
    """Check that ``obj`` can serve as the accelerator and return it.

    Accepts instances of [`DeepSpeedAccelerator`][anyaccel.accelerator.selection.DeepSpeedAccelerator] subclasses,
    including ones whose ``__init__`` never
    calls ``super().__init__()``, and instances of DeepSpeed's own abstract class when DeepSpeed is imported.

    Raises:
        InvalidAcceleratorError: (a ``TypeError``) ``obj`` is a class instead of an instance, is not an
            accelerator, or has no non-empty string ``_name``.
    """
    if isinstance(obj, type):
        raise InvalidAcceleratorError(
            obj, "it is a class, not an instance", f"pass an instance: set_accelerator({obj.__name__}())"
        )
    if not isinstance(obj, DeepSpeedAccelerator) and not _is_foreign_deepspeed_accelerator(obj):
        raise InvalidAcceleratorError(
            obj,
            f"{type(obj).__name__} does not subclass anyaccel.DeepSpeedAccelerator",
            "subclass anyaccel.DeepSpeedAccelerator (or a built-in such as "
            "anyaccel.accelerator.cuda.CUDA_Accelerator) and implement is_available() and "
            "communication_backend_name()",
        )
    name = getattr(obj, "_name", None)
    if not isinstance(name, str) or not name:
        raise InvalidAcceleratorError(
            obj, f"its _name is {name!r}", "set self._name (e.g. 'mydevice') in __init__ or as a class attribute"
        )
    return obj  # type: ignore[return-value]


def _instantiate(spec: AcceleratorSpec) -> DeepSpeedAccelerator:
    """Build the accelerator of ``spec`` and validate it."""
    return validate_accelerator(spec.load()())


def _candidate(spec: AcceleratorSpec, result: ProbeResult | None) -> CandidateReport:
    if result is None:
        return CandidateReport(spec.name, spec.priority, False, NOT_PROBED, spec.source, probed=False)
    return CandidateReport(spec.name, spec.priority, result.available, result.reason, spec.source,
                           stack_present=result.stack_present)


def _report_unusable(candidates: list[CandidateReport], chosen: str, strict: bool) -> None:
    """Warn once per accelerator about installed-but-unusable stacks ranked above ``chosen``; raise if strict.

    ``candidates`` is in priority order; stacks ranked below the chosen accelerator do not matter.
    """
    above = []
    for c in candidates:
        if c.name == chosen:
            break
        above.append(c)
    unusable = [c for c in above if c.probed and c.stack_present and not c.available]
    for c in unusable:
        if c.name not in _warned_unusable:
            _warned_unusable.add(c.name)
            logger.warning("accelerator %r is installed but unusable: %s; using %r", c.name, c.reason, chosen)
    if strict and unusable:
        first = unusable[0]
        raise AcceleratorUnavailableError(
            first.name, first.reason, f"{STRICT_ENV}=1",
            f"Fix the device setup, select another accelerator with ANYACCEL_ACCELERATOR, or unset {STRICT_ENV}.",
        )


def _select(probe_all: bool, build: bool = True) -> tuple[DeepSpeedAccelerator | None, SelectionReport]:
    """Run selection steps 2-4 (the caller handles ``set_accelerator``).

    Args:
        probe_all: probe every candidate (``explain()``) instead of stopping at the first available one.
        build: instantiate the chosen accelerator (False for reports only).

    Returns:
        (accelerator instance, report); the instance is None when ``probe_all`` and nothing was built.
    """
    strict = _strict()
    specs = all_accelerator_specs()
    env, requested = _override()
    if requested is not None:
        by_name = {spec.name: spec for spec in specs}
        if requested not in by_name:
            raise UnknownAcceleratorError(requested, by_name, env or OVERRIDE_ENVS[0])
        spec = by_name[requested]
        result = spec.run_probe()
        candidates = [_candidate(s, result if s is spec else (s.run_probe() if probe_all else None)) for s in specs]
        if not result.available:
            raise AcceleratorUnavailableError(
                requested, result.reason, f"{env}={requested}",
                f"Make the device visible to this process, or unset {env} to let anyaccel detect the device.",
            )
        report = SelectionReport(requested, f"{env}={requested} requested it", "env", candidates, env, strict)
        return (_instantiate(spec) if build else None), report

    results: dict[str, ProbeResult] = {}
    chosen: AcceleratorSpec | None = None
    for spec in specs:
        if chosen is not None and not probe_all:
            break
        results[spec.name] = result = spec.run_probe()
        if chosen is None and result.available:
            chosen = spec
    candidates = [_candidate(s, results.get(s.name)) for s in specs]
    if chosen is None:  # unreachable unless the CPU spec was replaced by a broken plug-in
        raise AcceleratorUnavailableError("cpu", "no accelerator, not even the CPU, probed available",
                                          "probe", "Check the plug-ins registered under anyaccel.accelerators.")
    _report_unusable(candidates, chosen.name, strict)
    fallback = " (fallback: no other accelerator is available)" if chosen.name == "cpu" else ""
    reason = f"highest-priority available accelerator: {results[chosen.name].reason}{fallback}"
    report = SelectionReport(chosen.name, reason, "probe", candidates, None, strict)
    return (_instantiate(chosen) if build else None), report


def get_accelerator() -> DeepSpeedAccelerator:
    """The accelerator of this process, selected on the first call and cached.

    Returns:
        The accelerator instance (the same object on every call until
        [`set_accelerator`][anyaccel.accelerator.selection.set_accelerator] or
        [`reset_accelerator`][anyaccel.accelerator.selection.reset_accelerator]).

    Raises:
        UnknownAcceleratorError: ``ANYACCEL_ACCELERATOR``/``DS_ACCELERATOR`` names no known accelerator.
        AcceleratorUnavailableError: the override names an unavailable accelerator, or ``ANYACCEL_STRICT=1``
            and an installed GPU stack is unusable.

    Side effects (first call only): reads the environment; probes device runtimes (``device_count``
    queries, no device context); imports installed vendor packages it probes (``torch_npu``); reads
    installed plug-ins' entry points; logs the decision at INFO.
    """
    global _accelerator, _report
    if _accelerator is not None:
        return _accelerator
    with _lock:
        if _accelerator is None:
            accelerator, report = _select(probe_all=False)
            logger.info("accelerator: %s (%s)", report.chosen, report.reason)
            _accelerator, _report = accelerator, report
    return _accelerator  # type: ignore[return-value]


def set_accelerator(accel_obj: Any) -> None:
    """Use ``accel_obj`` as the accelerator of this process, replacing any earlier choice.

    Args:
        accel_obj: an accelerator instance (see `validate_accelerator`).

    Raises:
        InvalidAcceleratorError: (a ``TypeError``) ``accel_obj`` is not an accelerator instance.
    """
    global _accelerator, _report
    accelerator = validate_accelerator(accel_obj)
    with _lock:
        _accelerator = accelerator
        priority = int(getattr(accelerator, "accelerator_priority", 0))
        candidate = CandidateReport(str(accelerator._name), priority, True,
                                    f"set_accelerator({type(accelerator).__name__}())", "set_accelerator")
        _report = SelectionReport(str(accelerator._name), "set by set_accelerator()", "set_accelerator",
                                  [candidate], None, _strict())


def explain(probe_all: bool = True) -> SelectionReport:
    """Why this process's accelerator is (or would be) chosen, with every candidate's probe result.

    Args:
        probe_all: probe every candidate, also those below the chosen one (the CLI's report); False returns
            the report of the cached choice as it was made.

    Returns:
        A [`SelectionReport`][anyaccel.accelerator.selection.SelectionReport]; ``.to_dict()`` is JSON-able.

    Raises:
        AcceleratorError: the errors of [`get_accelerator`][anyaccel.accelerator.selection.get_accelerator] when no
            accelerator is chosen yet and selection
            fails.

    Side effects: like [`get_accelerator`][anyaccel.accelerator.selection.get_accelerator]; with ``probe_all``, probes
    every installed stack. Does not
    change the cached choice.
    """
    get_accelerator()
    with _lock:
        report = _report
    assert report is not None
    if not probe_all or report.source == "set_accelerator":
        return report
    _, full = _select(probe_all=True, build=False)
    return dataclasses.replace(full, chosen=report.chosen, reason=report.reason, source=report.source,
                               override_env=report.override_env)


def reset_accelerator() -> None:
    """Forget the cached choice (and the once-only warnings) so the next call selects again. For tests."""
    global _accelerator, _report
    with _lock:
        _accelerator = None
        _report = None
        _warned_unusable.clear()
