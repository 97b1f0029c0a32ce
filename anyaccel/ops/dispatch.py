"""Several implementations of one op family, chosen by availability and priority.

An op family such as ``adam`` runs through a compiled CPU kernel, a compiled CUDA kernel, a Triton kernel, a
SYCL kernel or torch_npu. Each is a [`RegisteredImplementation`][anyaccel.ops.registry.RegisteredImplementation]: a
name, a
priority, the device types it serves, a cheap availability probe (no compiler, no process, no device
initialisation beyond asking whether one exists) and a loader. They are the implementation view of the op
registry ([`anyaccel.ops.registry`][anyaccel.ops.registry]: the specs' implementations plus those added with
[`anyaccel.ops.registry.register`][anyaccel.ops.registry.register]). For a device type the loader picks:

1. the implementation named by the caller (``name=``), else
2. the one named by ``ANYACCEL_IMPL_<FAMILY>`` (e.g. ``ANYACCEL_IMPL_ADAM=triton``), else
3. the available implementation of highest priority.

A forced implementation that is unknown or unavailable raises, naming every candidate and its state; it
never falls back silently. The model is ColossalAI's kernel loader (``colossalai/kernel/kernel_loader.py``:
extensions with ``is_available`` and ``priority``, forced by name), here with an environment override and
explainable choices for ``anyaccel report``.

Every implementation of one family offers the spec's functions with the spec's schemas, as torch ops, so
front ends call ``impl.adam_step(...)`` whichever was chosen.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from anyaccel import settings
from anyaccel.op_builder.core.loaded_ops import LOADED_OPS, implementation_key, is_implementation_key
from anyaccel.ops import registry
from anyaccel.ops.registry import ImplementationError, RegisteredImplementation, UnknownImplementationError

logger = logging.getLogger(__name__)

ENV_PREFIX = "ANYACCEL_IMPL_"


class NoImplementationError(ImplementationError):
    """No registered implementation of the op is available on the device type; the message says why
    for each one."""


@dataclass(frozen=True)
class Candidate:
    """One line of [`explain`][anyaccel.ops.dispatch.explain]: an implementation and whether it was chosen."""

    name: str
    priority: int
    available: bool
    reason: str
    chosen: bool


#: (op, device type, the caller's name, else ``ANYACCEL_IMPL_<OP>``'s) -> the key of the chosen implementation's
#: module in the process's table of loaded ops (`LOADED_OPS`). The two names are apart because `choose` treats
#: them apart (the variable applies only where its implementation serves the device type). A memo, so a step's
#: lookup costs two dict reads and the probes run once per choice; a pure lookup into that table (it holds
#: keys, never modules), emptied by its one reset (``LOADED_OPS.clear()``) and when the registry changes.
_chosen: dict[tuple[str, str, str | None, str | None], str] = {}
_lock = threading.RLock()  # reentrant: a loader may reset the table (its callback takes this lock)


def _forget_choices() -> None:
    """Drop every choice (the table was reset)."""
    with _lock:
        _chosen.clear()


def _forget() -> None:
    """Drop every choice, and what hand-registered loaders returned (the registry changed: an implementation or
    a builder row); builds and Python-level ops stay loaded, as their keys say what they are."""
    _forget_choices()
    for key in [k for k in LOADED_OPS if is_implementation_key(k)]:
        LOADED_OPS.discard(key)


LOADED_OPS.on_clear(_forget_choices)
registry.on_change(_forget)


def _serves(impl: RegisteredImplementation, device_type: str) -> bool:
    """Whether ``impl`` runs on ``device_type`` (``"*"``: every device type)."""
    return device_type in impl.device_types or "*" in impl.device_types


def _probe(impl: RegisteredImplementation, device_type: str) -> tuple[bool, str]:
    if not _serves(impl, device_type):
        return False, f"serves {', '.join(impl.device_types)}, not {device_type}"
    try:
        return impl.probe()
    except (ImportError, OSError, RuntimeError, ValueError) as exc:  # a broken probe makes it unavailable
        return False, f"probe failed: {exc}"


def forced_name(op: str, name: str | None = None) -> str | None:
    """The implementation name forced by the caller or by ``ANYACCEL_IMPL_<OP>`` (caller wins)."""
    return name or settings.IMPL.get(name=ENV_PREFIX + op.upper())


def explain(op: str, device_type: str, name: str | None = None) -> list[Candidate]:
    """Every implementation of ``op`` for ``device_type``, its availability, and which one is chosen.

    Side effects: runs each implementation's cheap probe.
    """
    chosen: str | None
    try:
        chosen = choose(op, device_type, name).name
    except ImplementationError:
        chosen = None
    out = []
    for impl in registry.implementations(op):
        ok, reason = _probe(impl, device_type)
        out.append(Candidate(impl.name, impl.priority, ok, reason, impl.name == chosen))
    return out


def choose(op: str, device_type: str, name: str | None = None) -> RegisteredImplementation:
    """The implementation of ``op`` to use on ``device_type`` (see the module docstring for the order).

    Args:
        op: the family's name.
        device_type: a torch device type (``"cuda"``, ``"xpu"``, ``"cpu"``).
        name: force this implementation; else ``ANYACCEL_IMPL_<OP>`` if set and the implementation it names
            serves ``device_type`` (the variable does not apply to other device types).

    Raises:
        UnknownImplementationError: the forced name is not registered for ``op`` (lists those that are).
        NoImplementationError: the forced one is unavailable, or none is available (says why for each).
    """
    impls = registry.implementations(op)
    forced = forced_name(op, name)
    named = [i for i in impls if i.name == forced]
    if forced and not name and named and not any(_serves(i, device_type) for i in named):
        # ANYACCEL_IMPL_<OP> picks among the implementations of the device types the named one serves
        # (ANYACCEL_IMPL_ADAM=triton chooses FusedAdam's GPU kernel; the CPU optimizers keep theirs).
        forced = None
    if forced:
        match = [i for i in impls if i.name == forced]
        if not match:
            raise UnknownImplementationError(
                f"op {op!r} has no implementation {forced!r}; registered: {[i.name for i in impls]} (set by "
                f"{'the caller' if name else ENV_PREFIX + op.upper()})"
            )
        ok, reason = _probe(match[0], device_type)
        if not ok:
            raise NoImplementationError(f"implementation {forced!r} of op {op!r} is unavailable on {device_type}: "
                                        f"{reason}")
        return match[0]
    reasons = []
    for impl in impls:
        ok, reason = _probe(impl, device_type)
        if ok:
            return impl
        reasons.append(f"{impl.name}: {reason}")
    raise NoImplementationError(f"no implementation of op {op!r} is available on {device_type}: " + "; ".join(reasons))


def load(op: str, device_type: str, name: str | None = None) -> Any:
    """Loads (once per process) and returns the chosen implementation's module.

    The module is the one entry of the process's table of loaded ops
    ([`LOADED_OPS`][anyaccel.op_builder.core.loaded_ops.LOADED_OPS]) the implementation's loader filled: for a
    native build the very object its builder's ``load()`` returns, for Python-level ops their definitions; what
    a hand-registered loader returns is entered under ``<family>:<implementation>``. The choice for (op, device
    type, forced name) is made once: later calls, e.g. every optimizer step, cost two dict reads and an
    environment read (``ANYACCEL_IMPL_<OP>`` may change between calls). [`choose`][anyaccel.ops.dispatch.choose]
    names the implementation.

    Returns:
        An object with the op's functions as attributes.

    Raises:
        ImplementationError: the errors of [`choose`][anyaccel.ops.dispatch.choose]; whatever the implementation's
            loader raises (e.g.
            a build error) passes through.

    Side effects: may compile the op (CPU: seconds; CUDA: nvcc, tens of seconds cold; Triton: at first call).
    """
    memo = (op, device_type, name, None if name else forced_name(op))
    key = _chosen.get(memo)
    if key is not None:
        module = LOADED_OPS.get(key)
        if module is not None:
            return module
    impl = choose(op, device_type, name)
    with _lock:
        key = implementation_key(op, impl.name)
        module = LOADED_OPS.get(key)
        if module is None:
            logger.info("op %s: using implementation %r (priority %d)", op, impl.name, impl.priority)
            module = impl.loader()
            held = LOADED_OPS.key_of(module)  # a build's or Python-level ops' entry: the loader filled it
            if held is None:
                LOADED_OPS.load(key, lambda: module)
            else:
                key = held
        _chosen[memo] = key
        return module

