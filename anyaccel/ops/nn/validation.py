"""Argument checks shared by the model ops' front ends, fakes and implementations.

One vocabulary for every op of [`anyaccel.ops.nn`][anyaccel.ops.nn] (messages as described in
`anyaccel.ops.nn.errors`). Checks read only metadata (dtype, device, shape), never data, so they run
unchanged on fake tensors and never synchronise a device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from anyaccel.ops.nn.errors import OpInputError

if TYPE_CHECKING:
    import torch

_Check = TypeVar("_Check", bound=Callable[..., None])

#: Distinct argument metadata remembered per memoized check (then new ones are checked every call).
MEMO_SIZE = 4096


def memoized(check: _Check) -> _Check:
    """``check`` (which returns None or raises) skipped for arguments whose metadata passed it before.

    An eager call's argument checks cost 10-30 us of host time, as much as a small kernel runs; a model
    calls each op with a few argument layouts. The memo key is, per argument, ``(dtype, layout, device,
    shape)`` for a tensor and ``(type, value)`` otherwise (``True`` is not ``1``), so only checks that read
    nothing else of a tensor (no strides, no data, no ``requires_grad``) may be memoized. Failing arguments
    are not remembered (every bad call raises); symbolic sizes (tracing with dynamic shapes) are unhashable
    and always checked.
    """
    import torch

    seen: set[tuple[Any, ...]] = set()

    @functools.wraps(check)
    def run(*args: Any) -> None:
        key = tuple((a.dtype, a.layout, a.device, a.shape) if isinstance(a, torch.Tensor) else (type(a), a)
                    for a in args)
        try:
            if key in seen:
                return
        except TypeError:  # a SymInt
            check(*args)
            return
        check(*args)
        if len(seen) < MEMO_SIZE:
            seen.add(key)

    return run  # type: ignore[return-value]


#: The floating dtypes the model ops compute on (names, for messages).
FLOAT_DTYPE_NAMES = ("float32", "bfloat16", "float16")


def float_dtypes() -> tuple[torch.dtype, ...]:
    """``(torch.float32, torch.bfloat16, torch.float16)``."""
    import torch

    return (torch.float32, torch.bfloat16, torch.float16)


def check_float(op: str, name: str, t: torch.Tensor) -> None:
    """Raise unless ``t`` is a dense tensor of a dtype in `FLOAT_DTYPE_NAMES`.

    Raises:
        OpInputError: naming the op, the argument, its dtype and the accepted ones.
    """
    import torch

    if t.layout != torch.strided:
        raise OpInputError(f"{op}: {name} has layout {t.layout}; accepted: dense (strided) tensors. Convert it "
                           "with .to_dense()")
    if t.dtype not in float_dtypes():
        raise OpInputError(f"{op}: {name} has dtype {_name(t.dtype)}; accepted: {', '.join(FLOAT_DTYPE_NAMES)}. "
                           f"Cast it with .to(torch.float32) (or bfloat16/float16)")


def check_same_device(op: str, tensors: dict[str, torch.Tensor | None]) -> None:
    """Raise unless every given tensor is on one device.

    Raises:
        OpInputError: naming the first tensor on another device than the first one; where one of the two is
            a meta tensor (no data: a weight offloaded by accelerate's hooks outside its module's call, or
            made under ``init_empty_weights``), saying so and how to get its data instead.
    """
    items = [(k, t) for k, t in tensors.items() if t is not None]
    if not items:
        return
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device and "meta" in (t.device.type, first.device.type):
            meta, other = (name, first) if t.device.type == "meta" else (first_name, t)
            raise OpInputError(f"{op}: {meta} is a meta tensor (it has a shape but no data) and the other inputs "
                               f"are on {other.device}; accepted: tensors with data, on one device. A meta "
                               "weight is usually offloaded by accelerate's hooks (read it only inside its "
                               "module's call) or was made under init_empty_weights (load it with "
                               "load_state_dict(..., assign=True))")
        if t.device != first.device:
            raise OpInputError(f"{op}: {name} is on {t.device} but {first_name} is on {first.device}; accepted: "
                               f"every tensor on one device. Move {name} with .to({str(first.device)!r})")


def check_shape(op: str, name: str, t: torch.Tensor, expected: Sequence[int], why: str) -> None:
    """Raise unless ``t.shape == expected``.

    Args:
        why: the rule in words, for the message (``"the last dimension of x"``).

    Raises:
        OpInputError: with both shapes.
    """
    if tuple(t.shape) != tuple(expected):
        raise OpInputError(f"{op}: {name} has shape {list(t.shape)}; accepted: {list(expected)} ({why})")


def check_choice(op: str, name: str, value: Any, accepted: Iterable[Any]) -> None:
    """Raise unless ``value`` is one of ``accepted``.

    Raises:
        OpInputError: with the value and the accepted set.
    """
    options = tuple(accepted)
    if value not in options:
        raise OpInputError(f"{op}: {name}={value!r} is not accepted; accepted: {', '.join(map(repr, options))}")


def check_min_dim(op: str, name: str, t: torch.Tensor, ndim: int) -> None:
    """Raise unless ``t`` has at least ``ndim`` dimensions.

    Raises:
        OpInputError: with the shape.
    """
    if t.dim() < ndim:
        raise OpInputError(f"{op}: {name} has shape {list(t.shape)}; accepted: at least {ndim} dimension(s)")


def check_finite_nonneg(op: str, name: str, value: float, upper: float | None = None) -> None:
    """Raise unless ``value`` is a finite float ``>= 0`` (and ``<= upper`` when given).

    Raises:
        OpInputError: with the value and the range.
    """
    import math

    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    if ok and upper is not None:
        ok = value <= upper
    if not ok:
        rule = f"a finite float in [0, {upper}]" if upper is not None else "a finite float >= 0"
        raise OpInputError(f"{op}: {name}={value!r} is not accepted; accepted: {rule}")


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")
