"""``enable()``, ``disable()`` and ``use_ops()``: switch the aten-override mode on and off.

Each switch-on creates one registration layer: a ``torch.library.Library("aten", "IMPL")`` holding one
kernel per replaced op (`anyaccel.ops.override.aten_ops`) on the device type's dispatch key (``device=``, by
default ``torch.accelerator.current_accelerator()``, else the CPU: this layer does not reach up to
``anyaccel.get_accelerator()``; a caller above it passes ``device=get_accelerator().device_type``)
(``torch._C._dispatch_key_for_device``: ``CUDA``, ``XPU``, ``PrivateUse1``, ... ; ``CPU`` when the
accelerator is the CPU). Destroying a layer removes exactly its kernels; torch's dispatcher keeps every
registration of an op and key in a list and runs the newest, so removing a layer restores what was there
before it, aten's own kernel included, in whatever order layers are removed: nesting ``use_ops`` inside
``enable`` (or in several threads) unwinds correctly.

Each kernel asks the policy (`anyaccel.ops.override.policy`: the packaged default policy for the device,
refined by its tuning table; which one and why is logged once per process, as a warning when nothing is
replaced) and either runs anyaccel's op or calls aten's original kernel, fetched once with
``torch.library.get_kernel`` before the first layer existed. A thread-local guard sends calls made *while*
anyaccel's op runs to the original kernel, so an implementation that itself uses the op cannot recurse.

What is not thread-safe, and cannot be with ``torch.library``: the registration is process-wide, not
per thread. ``with use_ops():`` in one thread switches the mode on for every thread until it exits, and a
call running in another thread while a layer is added or removed may see either kernel. Only eager
execution is affected: ``torch.compile`` traces with fake tensors (Meta) and Inductor generates its own
kernels, so compiled graphs never call the replaced backend kernels.

Accuracy routes are not speed routes: calls whose sum aten accumulates in 16 bits (a float16/bfloat16
``nll_loss`` mean or sum; a 16-bit ``cross_entropy_loss`` with label smoothing or probability targets) go to
anyaccel's fp32-accumulating op in every policy but ``"never"``, whatever the speed tables say
(`anyaccel.ops.override.aten_ops.AtenOverride.accurate`). Where a family's chosen implementation is the portable
one (the CPU without Triton's interpreter) its op is registered for those accuracy routes only: for speed its
torch ops would call the very aten ops they replace.

``cross_entropy_loss`` is a composite op (no backend kernel; autograd comes from the ops it calls), so its
replacement is registered on the device's autograd key (``AutogradCPU``, ``AutogradCUDA``, ...), as FlagGems
registers it, and records its own autograd graph; that kernel also runs while ``torch.compile`` traces (it
decomposes into fp32 aten ops there).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from anyaccel._compat import dispatcher
from anyaccel.ops.override import aten_ops
from anyaccel.ops.override.policy import Policy

logger = logging.getLogger(__name__)

_LOCK = threading.RLock()
_ENABLED: list[Any] = []  # layers created by enable()
_LAYERS: list[Any] = []  # every live layer (enable() and use_ops())
_REPLACED: dict[int, list[str]] = {}  # id(layer) -> the aten ops it replaced
_ORIGINALS: dict[tuple[str, str], Any] = {}
_TLS = threading.local()


def device_type_of(device: str | torch.device | None = None) -> str:
    """The device type the mode works on: ``device``'s type (``"cuda"``, ``"cuda:1"`` and ``torch.device``
    alike), else torch's current accelerator's (``torch.accelerator``) when one is available, else ``"cpu"``.

    Raises:
        RuntimeError: ``device`` is a string torch does not parse as a device (torch's message names it).
    """
    if device is not None:
        return torch.device(device).type
    accelerator = getattr(torch, "accelerator", None)
    # an available one only: a CUDA build of torch on a machine without a GPU names CUDA unless asked to check
    current = accelerator.current_accelerator(check_available=True) if accelerator is not None else None
    return current.type if current is not None else "cpu"


def _dispatch_key(device_type: str) -> str:
    return dispatcher.dispatch_key_for_device(device_type)


def _device_name(device_type: str) -> str:
    if device_type == "cpu":
        return "cpu"
    try:
        return str(torch.get_device_module(device_type).get_device_name())
    except (AttributeError, RuntimeError, AssertionError):
        return device_type


def _capability(device_type: str) -> tuple[int, int] | None:
    """The current device's compute capability (CUDA's ``get_device_capability``), None where the device module
    has none (the CPU, most other backends)."""
    if device_type == "cpu":
        return None
    try:
        cap = torch.get_device_module(device_type).get_device_capability()
    except (AttributeError, RuntimeError, AssertionError):
        return None
    return (int(cap[0]), int(cap[1]))


def load_policy(mode: str | None = None, table: bool = True, device: str | torch.device | None = None) -> Policy:
    """The policy of ``device`` (`device_type_of`; `Policy.load` with its name and compute capability; without
    its tuning table when ``table`` is False: the shipped default policy alone)."""
    device_type = device_type_of(device)
    return Policy.load(_device_name(device_type), mode, capability=_capability(device_type), table=table)


_LOGGED: set[str] = set()


def _log_once(level: int, message: str) -> None:
    """Log ``message`` the first time it comes in this process."""
    with _LOCK:
        if message in _LOGGED:
            return
        _LOGGED.add(message)
    logger.log(level, "%s", message)


def _original(op: str, dispatch_key: str) -> Any:
    """aten's kernel for ``op`` on ``dispatch_key``, captured before any layer of ours existed."""
    k = (op, dispatch_key)
    if k not in _ORIGINALS:
        if _LAYERS:
            raise RuntimeError(f"override: the original kernel of aten::{op} on {dispatch_key} was not captured "
                               "before the first layer; this is a bug")
        _ORIGINALS[k] = torch.library.get_kernel(f"aten::{op}", dispatch_key)
    return _ORIGINALS[k]


def _kernel(entry: aten_ops.AtenOverride, ns: Any, original: Any, policy: Policy, speed: bool
            ) -> Callable[..., Any]:
    """The registered kernel: anyaccel's op where the policy routes the call for speed (only when ``speed``: a
    kernel of its own, not the portable one) or the call needs anyaccel's fp32 accumulation (accuracy routes
    are not speed routes: no table sends those to aten), else aten's original kernel."""
    accurate = entry.accurate if policy.accuracy_routes else None

    def kernel(keyset: Any, *args: Any) -> Any:
        if getattr(_TLS, "active", False):
            return original.call_boxed(keyset, *args)
        k = entry.describe(args)
        if k is None or not ((speed and policy.use_ours(k)) or (accurate is not None and accurate(args))):
            return original.call_boxed(keyset, *args)
        _TLS.active = True
        try:
            return entry.run(ns, args)
        finally:
            _TLS.active = False

    kernel.__name__ = f"anyaccel_override_{entry.name}"
    return kernel


def _layer(include: Sequence[str] | None, exclude: Sequence[str] | None, policy: str | Policy | None,
           device: str | torch.device | None) -> Any:
    from anyaccel.ops import dispatch

    device_type = device_type_of(device)
    dkey = _dispatch_key(device_type)
    pol = policy if isinstance(policy, Policy) else \
        Policy.load(_device_name(device_type), policy, capability=_capability(device_type))
    selected = aten_ops.select(include, exclude)
    with _LOCK:
        plan = []
        for entry in selected:
            qual = f"aten::{entry.name}"
            key = entry.key_prefix + dkey
            if not (dispatcher.has_kernel(qual, dkey) or entry.key_prefix
                    and dispatcher.has_kernel(qual, "CompositeImplicitAutograd")):
                logger.info("override: aten::%s has no %s kernel here; not replaced", entry.name, dkey)
                continue
            accuracy = entry.accurate is not None and pol.accuracy_routes
            if not (accuracy or pol.registrable(entry.name)):
                logger.info("override: aten::%s not replaced (%s; anyaccel tune measures it)",
                            entry.name, pol.why(entry.name))
                continue
            # the portable implementation calls aten's own ops: it serves the accuracy routes only
            speed = pol.registrable(entry.name) and dispatch.choose(entry.family, device_type).name != "torch"
            if not (speed or accuracy):
                logger.info("override: %s runs the portable torch implementation on %s (it would call aten "
                            "itself); aten::%s not replaced", entry.family, device_type, entry.name)
                continue
            # the implementation's plain functions: the kernel runs below autograd (aten's autograd formula
            # wraps it), and a second trip through the dispatcher would cost more than small ops take
            plan.append((entry, key, speed, dispatch.load(entry.family, device_type).plain,
                         _original(entry.name, key)))
        # nothing to replace: no torch library either, so switching the mode on leaves the dispatcher as it was
        lib: Any = _EmptyLayer()
        if plan:
            lib = torch.library.Library("aten", "IMPL")
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r"(?s).*previously registered kernel")
                for entry, key, speed, ns, original in plan:
                    # a nested layer overrides the enclosing one's kernel: explicit, as torch 2.10's default
                    # is to refuse (2.11 and later allow it by default)
                    lib.impl(entry.name, _kernel(entry, ns, original, pol, speed), key, with_keyset=True,
                             allow_override=True)
        _REPLACED[id(lib)] = [p[0].name for p in plan]
        _LAYERS.append(lib)
        logger.info("override: %d aten ops replaced on %s (policy %s): %s", len(plan), dkey, pol.mode,
                    ", ".join(p[0].name for p in plan))
        if pol.mode == "tuned":
            why = "; ".join(f"{p[0].name}: {_why(p[0], pol, p[2])}" for p in plan)
            _log_once(logging.INFO if plan else logging.WARNING,
                      f"override on {_device_name(device_type)}: policy from {pol.source}; "
                      + (f"replaced {why}" if plan else "nothing replaced (every call goes to aten); run "
                         "`anyaccel tune` to measure this device"))
        return lib


def _why(entry: aten_ops.AtenOverride, pol: Policy, speed: bool) -> str:
    """Why ``entry`` is replaced, for the log: its speed routes (`Policy.why`) and its accuracy route."""
    parts = [pol.why(entry.name)] if speed else []
    if entry.accurate is not None:
        parts.append("16-bit sums and means in fp32 (accuracy route)")
    return ", ".join(parts)


class _EmptyLayer:
    """The layer of a switch-on that replaced nothing (see `_layer`)."""

    def _destroy(self) -> None:
        """Nothing was registered."""


def _drop(lib: Any) -> None:
    with _LOCK:
        if lib in _LAYERS:
            _LAYERS.remove(lib)
            _REPLACED.pop(id(lib), None)
            lib._destroy()


def enable(include: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
           policy: str | Policy | None = None, device: str | torch.device | None = None) -> list[str]:
    """Replace aten ops on ``device``'s type by anyaccel's, per the per-shape policy, until
    [`disable`][anyaccel.ops.override.mode.disable].

    Args:
        include: aten op names (``"_softmax"``, ``"native_layer_norm"``, ``"nll_loss_forward"``, ...) or family
            names (``"softmax"``, ``"layer_norm"``, ``"rms_norm"``, ``"swiglu"``, ``"cross_entropy"``) to
            replace; all when None.
        exclude: names not to replace.
        policy: ``"tuned"`` (default, or ``ANYACCEL_OVERRIDE_POLICY``: anyaccel where the device's tuning table
            measured it faster, and elsewhere as the packaged default policy's entry for the device, or its
            size rule for unknown devices, says: `anyaccel.ops.override.policy`), ``"always"``,
            ``"never"``, or a `Policy`.
        device: the device (type) whose dispatch key is replaced (`device_type_of`: default torch's current
            accelerator, else the CPU).

    Returns:
        The aten ops replaced (ops without a kernel on this device, or served by the portable
        implementation, are left to aten).

    Raises:
        ValueError: an unknown name in include/exclude, or an unknown policy mode.

    Side effects: registers kernels with torch's dispatcher for the whole process (see the module
    docstring); a second ``enable()`` replaces the first's registrations.
    """
    with _LOCK:
        disable()
        lib = _layer(include, exclude, policy, device)
        _ENABLED.append(lib)
        return list(_REPLACED[id(lib)])


def disable() -> None:
    """Undo [`enable`][anyaccel.ops.override.mode.enable]: remove its registrations, restoring aten's kernels (layers of
    ``use_ops``
    contexts still open stay until they exit). Does nothing when the mode is off."""
    with _LOCK:
        while _ENABLED:
            _drop(_ENABLED.pop())


@contextlib.contextmanager
def use_ops(include: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
            policy: str | Policy | None = None, device: str | torch.device | None = None) -> Iterator[list[str]]:
    """Within the block, replace aten ops as [`enable`][anyaccel.ops.override.mode.enable] does; restore exactly what
    was there on exit
    (nested blocks and an enclosing ``enable()`` included). Arguments as for
    [`enable`][anyaccel.ops.override.mode.enable].

    Yields:
        The aten ops replaced by this block.
    """
    lib = _layer(include, exclude, policy, device)
    try:
        yield list(_REPLACED[id(lib)])
    finally:
        _drop(lib)


def replaced_ops() -> list[str]:
    """The aten ops currently replaced by any live layer (``enable`` or ``use_ops``), sorted."""
    with _LOCK:
        return sorted({name for lib in _LAYERS for name in _REPLACED[id(lib)]})
