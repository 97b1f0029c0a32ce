"""``torch._foreach_*``: one dispatch for a whole list of tensors (the NPU optimizer fallbacks use them).

Private names used (tested on torch 2.10.0, 2.13.0 and 2.15.0): ``torch._foreach_mul_``, ``_foreach_add``,
``_foreach_add_``, ``_foreach_lerp``, ``_foreach_lerp_``, ``_foreach_addcmul_``, ``_foreach_addcdiv_``,
``_foreach_sqrt``, ``_foreach_sign``. Each function here calls torch's list op when it exists and otherwise
loops over the tensors with the public per-tensor op of the same name (the same results, one dispatch per
tensor).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["add", "add_", "addcdiv_", "addcmul_", "lerp", "lerp_", "mul_", "sign", "sqrt"]

Tensors = Sequence[torch.Tensor]


def _op(name: str) -> object | None:
    return getattr(torch, f"_foreach_{name}", None)


def mul_(xs: Tensors, scalar: float) -> None:
    """``x.mul_(scalar)`` for every ``x``."""
    op = _op("mul_")
    if op is not None:
        op(xs, scalar)  # type: ignore[operator]
        return
    for x in xs:
        x.mul_(scalar)


def add(xs: Tensors, ys: Tensors, alpha: float = 1.0) -> list[torch.Tensor]:
    """``x + alpha * y`` for every pair, as new tensors."""
    op = _op("add")
    if op is not None:
        return list(op(xs, ys, alpha=alpha))  # type: ignore[operator]
    return [torch.add(x, y, alpha=alpha) for x, y in zip(xs, ys, strict=True)]


def add_(xs: Tensors, other: Tensors | float, alpha: float = 1.0) -> None:
    """``x.add_(y, alpha=alpha)`` for every pair, or ``x.add_(other)`` for a scalar ``other``."""
    op = _op("add_")
    if op is not None:
        if isinstance(other, (int, float)):
            op(xs, other)  # type: ignore[operator]
        else:
            op(xs, other, alpha=alpha)  # type: ignore[operator]
        return
    if isinstance(other, (int, float)):
        for x in xs:
            x.add_(other)
        return
    for x, y in zip(xs, other, strict=True):
        x.add_(y, alpha=alpha)


def lerp(xs: Tensors, ys: Tensors, weight: float) -> list[torch.Tensor]:
    """``torch.lerp(x, y, weight)`` for every pair, as new tensors."""
    op = _op("lerp")
    if op is not None:
        return list(op(xs, ys, weight))  # type: ignore[operator]
    return [torch.lerp(x, y, weight) for x, y in zip(xs, ys, strict=True)]


def lerp_(xs: Tensors, ys: Tensors, weight: float) -> None:
    """``x.lerp_(y, weight)`` for every pair."""
    op = _op("lerp_")
    if op is not None:
        op(xs, ys, weight)  # type: ignore[operator]
        return
    for x, y in zip(xs, ys, strict=True):
        x.lerp_(y, weight)


def addcmul_(xs: Tensors, ys: Tensors, zs: Tensors, value: float) -> None:
    """``x.addcmul_(y, z, value=value)`` for every triple."""
    op = _op("addcmul_")
    if op is not None:
        op(xs, ys, zs, value=value)  # type: ignore[operator]
        return
    for x, y, z in zip(xs, ys, zs, strict=True):
        x.addcmul_(y, z, value=value)


def addcdiv_(xs: Tensors, ys: Tensors, zs: Tensors, value: float) -> None:
    """``x.addcdiv_(y, z, value=value)`` for every triple."""
    op = _op("addcdiv_")
    if op is not None:
        op(xs, ys, zs, value=value)  # type: ignore[operator]
        return
    for x, y, z in zip(xs, ys, zs, strict=True):
        x.addcdiv_(y, z, value=value)


def sqrt(xs: Tensors) -> list[torch.Tensor]:
    """``torch.sqrt(x)`` for every ``x``, as new tensors."""
    op = _op("sqrt")
    if op is not None:
        return list(op(xs))  # type: ignore[operator]
    return [torch.sqrt(x) for x in xs]


def sign(xs: Tensors) -> list[torch.Tensor]:
    """``torch.sign(x)`` for every ``x``, as new tensors."""
    op = _op("sign")
    if op is not None:
        return list(op(xs))  # type: ignore[operator]
    return [torch.sign(x) for x in xs]
