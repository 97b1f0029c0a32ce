"""Backward formulas of ``softmax`` and ``log_softmax`` (saving only the output y)."""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.define import Formula


def formulas(ns: Any) -> dict[str, Formula]:
    """Backward formulas of ``softmax`` and ``log_softmax``, calling ``ns``'s backward ops."""

    def setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(output)
        ctx.dim = inputs[1]

    def backward_softmax(ctx: Any, grad_y: torch.Tensor) -> tuple[Any, ...]:
        (y,) = ctx.saved_tensors
        return ns.softmax_backward(grad_y, y, ctx.dim), None

    def backward_log_softmax(ctx: Any, grad_y: torch.Tensor) -> tuple[Any, ...]:
        (y,) = ctx.saved_tensors
        return ns.log_softmax_backward(grad_y, y, ctx.dim), None

    return {"softmax": (setup, backward_softmax), "log_softmax": (setup, backward_log_softmax)}
