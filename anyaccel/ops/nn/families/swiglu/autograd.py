"""Backward formulas of ``swiglu`` and ``silu`` (save the inputs, recompute the sigmoid)."""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.define import Formula


def _reduce_to(grad: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Sum a broadcast gradient (float32, see ``fakes.grad_dtype``) back to ``like``'s shape and dtype."""
    return grad if grad.shape == like.shape else grad.sum_to_size(like.shape).to(like.dtype)


def formulas(ns: Any) -> dict[str, Formula]:
    """Backward formulas of ``swiglu`` and ``silu``, calling ``ns``'s backward ops."""

    def setup_swiglu(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(*inputs)

    def backward_swiglu(ctx: Any, grad_y: torch.Tensor) -> tuple[Any, ...]:
        a, b = ctx.saved_tensors
        da, db = ns.swiglu_backward(grad_y, a, b)
        return _reduce_to(da, a), _reduce_to(db, b)

    def setup_silu(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(inputs[0])

    def backward_silu(ctx: Any, grad_y: torch.Tensor) -> tuple[Any, ...]:
        (x,) = ctx.saved_tensors
        return (_reduce_to(ns.silu_backward(grad_y, x), x),)

    return {"swiglu": (setup_swiglu, backward_swiglu), "silu": (setup_silu, backward_silu)}
