"""Several implementations of one op, chosen by availability and priority.

An op such as ``fused_adam`` can run through a compiled CUDA kernel or a Triton kernel. Each is an
:class:`Implementation`: a name, a priority, the device types it serves, a cheap availability check
(no compiler, no process, no device initialisation beyond asking whether one exists) and a loader. The
loader picks, for a device type:

1. the implementation named by the caller (``name=``), else
2. the one named by ``ANYACCEL_IMPL_<OP>`` (e.g. ``ANYACCEL_IMPL_FUSED_ADAM=triton``), else
3. the available implementation of highest priority.

A forced implementation that is unknown or unavailable raises, naming every candidate and its state; it
never falls back silently. Users add their own with :func:`register_implementation`. The model is
ColossalAI's kernel loader (``colossalai/kernel/kernel_loader.py``: extensions with ``is_available`` and
``priority``, forced by name), here with an environment override and explainable choices for
``anyaccel report``.

Every implementation of one op exposes the same functions with the same signatures (for ``fused_adam``:
``adam_step``; for ``fused_lion``: ``lion_step``), so front ends call ``impl.adam_step(...)`` whichever
was chosen.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

logger = logging.getLogger(__name__)

ENV_PREFIX = "ANYACCEL_IMPL_"


class ImplementationError(RuntimeError):
    """Base of the loader's errors."""


class UnknownImplementationError(ImplementationError, ValueError):
    """An op or implementation name that is not registered; the message lists the registered ones."""


class NoImplementationError(ImplementationError):
    """No registered implementation of the op is available on the device type; the message says why
    for each one."""


@dataclass(frozen=True)
class Implementation:
    """One implementation of an op.

    Attributes:
        op: the op's name (``"fused_adam"``).
        name: the implementation's name (``"cuda"``, ``"triton"``), unique per op.
        priority: higher wins among available implementations.
        device_types: torch device types it runs on (``("cuda",)``).
        probe: cheap availability check returning ``(available, reason)``; it must not compile, start a
            process or initialise a device.
        loader: returns an object whose attributes are the op's functions; may compile (called once per
            process, the result cached).
        description: one line for ``anyaccel report``.
    """

    op: str
    name: str
    priority: int
    device_types: tuple[str, ...]
    probe: Callable[[], tuple[bool, str]]
    loader: Callable[[], Any]
    description: str = ""


@dataclass(frozen=True)
class Candidate:
    """One line of :func:`explain`: an implementation and whether it was chosen."""

    name: str
    priority: int
    available: bool
    reason: str
    chosen: bool


#: One row of a table of implementations: (op, implementation name, priority, device types, probe, loader,
#: description), the fields of :class:`Implementation` in order (``_BUILTINS`` and the device modules'
#: ``IMPLEMENTATIONS``).
ImplementationRow = tuple[str, str, int, tuple[str, ...], Callable[[], tuple[bool, str]], Callable[[], Any], str]

_registry: dict[str, dict[str, Implementation]] = {}
_loaded: dict[tuple[str, str], Any] = {}
#: (op, device type, forced name or None) -> the loaded choice, so a step's lookup is one dict access (the
#: probes run once); cleared when an implementation is registered.
_chosen: dict[tuple[str, str, Optional[str]], Any] = {}
_lock = threading.Lock()


def register_implementation(impl: Implementation, override: bool = False) -> None:
    """Adds an implementation.

    Args:
        impl: the implementation.
        override: replace an existing one of the same op and name.

    Raises:
        ValueError: one of that op and name exists and ``override`` is False.
    """
    with _lock:
        per_op = _registry.setdefault(impl.op, {})
        if impl.name in per_op and not override:
            raise ValueError(
                f"implementation {impl.name!r} of op {impl.op!r} is already registered; pass override=True to "
                "replace it"
            )
        per_op[impl.name] = impl
        _loaded.pop((impl.op, impl.name), None)
        _chosen.clear()


def implementations(op: str) -> list[Implementation]:
    """The registered implementations of ``op``, highest priority first.

    Raises:
        UnknownImplementationError: no implementation of ``op`` is registered.
    """
    _register_builtins()
    per_op = _registry.get(op)
    if not per_op:
        raise UnknownImplementationError(f"no implementation of op {op!r} is registered; known ops: {sorted(_registry)}")
    return sorted(per_op.values(), key=lambda i: (-i.priority, i.name))


def _probe(impl: Implementation, device_type: str) -> tuple[bool, str]:
    if device_type not in impl.device_types:
        return False, f"serves {', '.join(impl.device_types)}, not {device_type}"
    try:
        return impl.probe()
    except (ImportError, OSError, RuntimeError) as exc:  # a broken probe makes the candidate unavailable
        return False, f"probe failed: {exc}"


def forced_name(op: str, name: Optional[str] = None) -> Optional[str]:
    """The implementation name forced by the caller or by ``ANYACCEL_IMPL_<OP>`` (caller wins)."""
    return name or os.environ.get(ENV_PREFIX + op.upper()) or None


def explain(op: str, device_type: str, name: Optional[str] = None) -> list[Candidate]:
    """Every implementation of ``op`` for ``device_type``, its availability, and which one is chosen.

    Side effects: runs each implementation's cheap probe.
    """
    chosen: Optional[str]
    try:
        chosen = choose(op, device_type, name).name
    except ImplementationError:
        chosen = None
    out = []
    for impl in implementations(op):
        ok, reason = _probe(impl, device_type)
        out.append(Candidate(impl.name, impl.priority, ok, reason, impl.name == chosen))
    return out


def choose(op: str, device_type: str, name: Optional[str] = None) -> Implementation:
    """The implementation of ``op`` to use on ``device_type`` (see the module docstring for the order).

    Args:
        op: the op's name.
        device_type: a torch device type (``"cuda"``, ``"xpu"``).
        name: force this implementation; else ``ANYACCEL_IMPL_<OP>`` if set.

    Raises:
        UnknownImplementationError: the forced name is not registered for ``op`` (lists those that are).
        NoImplementationError: the forced one is unavailable, or none is available (says why for each).
    """
    impls = implementations(op)
    forced = forced_name(op, name)
    if forced:
        match = [i for i in impls if i.name == forced]
        if not match:
            raise UnknownImplementationError(
                f"op {op!r} has no implementation {forced!r}; registered: {[i.name for i in impls]} (set by "
                f"{'the caller' if name else ENV_PREFIX + op.upper()})"
            )
        ok, reason = _probe(match[0], device_type)
        if not ok:
            raise NoImplementationError(f"implementation {forced!r} of op {op!r} is unavailable on {device_type}: {reason}")
        return match[0]
    reasons = []
    for impl in impls:
        ok, reason = _probe(impl, device_type)
        if ok:
            return impl
        reasons.append(f"{impl.name}: {reason}")
    raise NoImplementationError(f"no implementation of op {op!r} is available on {device_type}: " + "; ".join(reasons))


def load(op: str, device_type: str, name: Optional[str] = None) -> Any:
    """Loads (once per process) and returns the chosen implementation's functions.

    The choice for (op, device type, forced name) is made once: later calls, e.g. every optimizer step,
    cost a dict lookup and an environment read (``ANYACCEL_IMPL_<OP>`` may change between calls).

    Returns:
        An object with the op's functions as attributes, and ``impl_name`` set to the chosen name.

    Raises:
        The errors of :func:`choose`, and whatever the implementation's loader raises (e.g. a build error).

    Side effects: may compile the op (CUDA: nvcc, tens of seconds cold; Triton: at first call).
    """
    chosen_key = (op, device_type, forced_name(op, name))
    hit = _chosen.get(chosen_key)
    if hit is not None:
        return hit
    impl = choose(op, device_type, name)
    key = (op, impl.name)
    with _lock:
        if key not in _loaded:
            logger.info("op %s: using implementation %r (priority %d)", op, impl.name, impl.priority)
            _loaded[key] = _Bound(impl.name, impl.loader())
        _chosen[chosen_key] = _loaded[key]
        return _loaded[key]


class _Bound:
    """A loaded implementation: forwards attributes to the loader's result and records its name."""

    def __init__(self, impl_name: str, target: Any) -> None:
        self.impl_name = impl_name
        self._target = target

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self._target, attr)


# ---- built-in implementations ----------------------------------------------------------------------


def _triton_probe() -> tuple[bool, str]:
    if importlib.util.find_spec("triton") is None:
        return False, "the triton package is not installed"
    return True, "triton is installed"


def _cuda_probe(builder_name: str) -> Callable[[], tuple[bool, str]]:
    def probe() -> tuple[bool, str]:
        module = importlib.import_module(f"anyaccel.op_builder.{_BUILDER_MODULES[builder_name]}")
        return getattr(module, builder_name)().compatibility()

    return probe


def _cuda_loader(builder_name: str) -> Callable[[], Any]:
    def loader() -> Any:
        module = importlib.import_module(f"anyaccel.op_builder.{_BUILDER_MODULES[builder_name]}")
        return getattr(module, builder_name)().load()

    return loader


def builder_probe(builder_class: type) -> Callable[[], tuple[bool, str]]:
    """An :attr:`Implementation.probe` asking a fresh ``builder_class()`` for its ``compatibility()``.

    For the device tables (``xpu_ops.IMPLEMENTATIONS``, ``npu_ops.IMPLEMENTATIONS``) whose implementations
    are op builders. The builder is instantiated at each probe, so a patched class attribute is seen.

    Args:
        builder_class: An ``OpBuilder`` subclass.

    Returns:
        A no-argument callable returning ``(available, reason)``; it compiles nothing.
    """
    return lambda: builder_class().compatibility()


def builder_loader(builder_class: type) -> Callable[[], Any]:
    """An :attr:`Implementation.loader` returning ``builder_class().load()`` (an ``OpModule``, or for
    delegating builders a Python module).

    Args:
        builder_class: An ``OpBuilder`` subclass.

    Returns:
        A no-argument callable; calling it may compile the op (the builder's ``load`` errors propagate).
    """
    return lambda: builder_class().load()


def _module_loader(module_name: str) -> Callable[[], Any]:
    return lambda: importlib.import_module(module_name)


_BUILDER_MODULES = {"FusedAdamBuilder": "fused_adam", "FusedLionBuilder": "fused_lion"}

#: (op, implementation, priority, device types, probe, loader, description). The CUDA kernels rank above
#: Triton: they need no per-dtype JIT at first step and can be prebuilt; Triton serves XPU and CUDA
#: machines without nvcc.
_BUILTINS: tuple[tuple[str, str, int, tuple[str, ...], Callable[[], Any], Callable[[], Any], str], ...] = (
    ("fused_adam", "cuda", 20, ("cuda",), _cuda_probe("FusedAdamBuilder"), _cuda_loader("FusedAdamBuilder"),
     "CUDA C++ multi-tensor kernel (csrc/adam/fused_adam_cuda.cu)"),
    ("fused_adam", "triton", 10, ("cuda", "xpu"), _triton_probe, _module_loader("anyaccel.ops.triton.adam"),
     "Triton multi-tensor kernel (anyaccel/ops/triton/adam.py)"),
    ("fused_lion", "cuda", 20, ("cuda",), _cuda_probe("FusedLionBuilder"), _cuda_loader("FusedLionBuilder"),
     "CUDA C++ multi-tensor kernel (csrc/lion/fused_lion_cuda.cu)"),
    ("fused_lion", "triton", 10, ("cuda", "xpu"), _triton_probe, _module_loader("anyaccel.ops.triton.lion"),
     "Triton multi-tensor kernel (anyaccel/ops/triton/lion.py)"),
)
#: Modules whose ``IMPLEMENTATIONS`` table (same row shape as ``_BUILTINS``) adds other devices' kernels:
#: SYCL for XPU, torch_npu-backed implementations for NPU. Imported on the first lookup, not at import.
_DEVICE_TABLES = ("anyaccel.op_builder.xpu_ops", "anyaccel.op_builder.npu_ops")
_builtins_done = False


def _register_builtins() -> None:
    global _builtins_done
    with _lock:
        if _builtins_done:
            return
        _builtins_done = True
    rows = list(_BUILTINS)
    for module_name in _DEVICE_TABLES:
        rows.extend(importlib.import_module(module_name).IMPLEMENTATIONS)
    for op, name, priority, device_types, probe, loader, description in rows:
        if name not in _registry.get(op, {}):
            register_implementation(Implementation(op, name, priority, device_types, probe, loader, description))
