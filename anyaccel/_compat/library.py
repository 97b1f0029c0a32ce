"""``torch._library.triton``: the switch that makes ``torch.library.wrap_triton`` trace or pass kernels through.

Private names used (tested on torch 2.10.0, 2.13.0 and 2.15.0): ``torch._library.triton.wrap_triton_enabled``
(a thread-local), ``wrap_triton_enabled_default`` and ``is_wrap_triton_enabled``. ``triton_op`` turns the
switch off around its eager calls, so ``wrap_triton(kernel)`` returns the plain kernel there; anyaccel does the
same around its eager fast path (`untraced`) and reads the switch before calling ``wrap_triton``
(`wrap_triton_enabled`).

An interpreted kernel (``TRITON_INTERPRET=1``) is launched as it is, as ``wrap_triton`` does from torch
2.11 on (torch 2.10's refuses it).

Fallbacks where the names are missing: `untraced` returns the function unchanged (its launches then go
through the traceable wrapper: correct, slower), and `wrap` asks the public ``torch.library.wrap_triton``,
which returns the kernel itself when the switch is off.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["untraced", "wrap", "wrap_triton_enabled"]


@functools.cache
def _module() -> Any:
    """``torch._library.triton``, or None where torch has no such module."""
    try:
        import torch._library.triton as module
    except ImportError:
        return None
    return module


def _switch() -> tuple[Any, bool] | None:
    """(the thread-local switch, its default), or None where torch has neither."""
    module = _module()
    state = getattr(module, "wrap_triton_enabled", None)
    default = getattr(module, "wrap_triton_enabled_default", None)
    if state is None or not isinstance(default, bool):
        return None
    return state, default


def wrap_triton_enabled() -> bool | None:
    """Whether ``torch.library.wrap_triton`` returns the traceable wrapper now (inside a ``triton_op`` being
    traced); None where torch cannot tell (callers then ask `wrap`)."""
    query = getattr(_module(), "is_wrap_triton_enabled", None)
    return None if query is None else bool(query())


def wrap(kernel: Any, eager: Callable[[Any], Any]) -> Any:
    """``torch.library.wrap_triton(kernel)`` while tracing, else ``eager(kernel)`` (an eager launcher).

    Only calls ``wrap_triton`` (several imports per call) when the switch is on, where the switch is readable.

    Raises:
        RuntimeError: ``kernel`` is not a ``triton.jit``/``triton.autotune`` kernel (torch's message).
    """
    enabled = wrap_triton_enabled()
    if enabled is False or _interpreted(kernel):
        return eager(kernel)
    wrapped = torch.library.wrap_triton(kernel)
    return eager(kernel) if wrapped is kernel else wrapped


def _interpreted(kernel: Any) -> bool:
    """Whether ``kernel`` is a Triton interpreter kernel (``TRITON_INTERPRET=1``), which ``wrap_triton`` passes
    through from torch 2.11 and refuses in torch 2.10; it is launched as is either way."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return False
    return isinstance(kernel, InterpretedFunction)


def untraced(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with ``wrap_triton`` returning the plain kernel while it runs (what ``triton_op`` does around its
    eager calls); ``fn`` itself where torch has no such switch.

    ``functools.wraps`` keeps ``fn``'s signature visible (``__wrapped__``), which the eager
    ``autograd.Function``'s ``apply`` uses to bind keyword arguments to positions.
    """
    switch = _switch()
    if switch is None:
        return fn
    state, default = switch

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        prev = getattr(state, "value", default)
        state.value = False
        try:
            return fn(*args)
        finally:
            state.value = prev

    return call
