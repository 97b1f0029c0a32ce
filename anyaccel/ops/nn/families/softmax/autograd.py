"""Backward formulas of ``softmax`` and ``log_softmax`` (saving only the output y)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch


def attach(ns: SimpleNamespace) -> None:
    """Register autograd on ``ns.defs["softmax"]`` and ``ns.defs["log_softmax"]``."""

    def setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(output)
        ctx.dim = inputs[1]

    def backward_softmax(ctx: Any, grad_y: torch.Tensor) -> tuple[Any, ...]:
        (y,) = ctx.saved_tensors
        return ns.softmax_backward(grad_y, y, ctx.dim), None

    def backward_log_softmax(ctx: Any, grad_y: torch.Tensor) -> tuple[Any, ...]:
        (y,) = ctx.saved_tensors
        return ns.log_softmax_backward(grad_y, y, ctx.dim), None

    ns.defs["softmax"].register_autograd(backward_softmax, setup_context=setup)
    ns.defs["log_softmax"].register_autograd(backward_log_softmax, setup_context=setup)
