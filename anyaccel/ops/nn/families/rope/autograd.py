"""Backward formula of ``rope``: rotate the incoming gradient back (``rope_backward``)."""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.define import Formula


def formulas(ns: Any) -> dict[str, Formula]:
    """Backward formula of ``rope``, calling ``ns``'s backward ops (saves cos and sin only)."""

    def setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        _x, cos, sin, interleaved = inputs
        ctx.save_for_backward(cos, sin)
        ctx.interleaved = interleaved

    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[Any, ...]:
        cos, sin = ctx.saved_tensors
        return ns.rope_backward(grad_y, cos, sin, ctx.interleaved), None, None, None

    return {"rope": (setup, backward)}
