"""Backward formulas of ``rope`` and ``rope_qk``: rotate the incoming gradients back (``rope_backward``,
``rope_qk_backward``)."""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.define import Formula


def formulas(ns: Any) -> dict[str, Formula]:
    """Backward formulas of ``rope`` and ``rope_qk``, calling ``ns``'s backward ops (save cos and sin only)."""

    def setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        _x, cos, sin, interleaved = inputs
        ctx.save_for_backward(cos, sin)
        ctx.interleaved = interleaved

    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[Any, ...]:
        cos, sin = ctx.saved_tensors
        return ns.rope_backward(grad_y, cos, sin, ctx.interleaved), None, None, None

    def setup_qk(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
        _q, _k, cos, sin, interleaved = inputs
        ctx.save_for_backward(cos, sin)
        ctx.interleaved = interleaved
        ctx.set_materialize_grads(False)  # an unused output brings None, not a tensor of zeros to rotate

    def backward_qk(ctx: Any, grad_q: torch.Tensor | None, grad_k: torch.Tensor | None) -> tuple[Any, ...]:
        cos, sin = ctx.saved_tensors
        if grad_q is not None and grad_k is not None:
            dq, dk = ns.rope_qk_backward(grad_q, grad_k, cos, sin, ctx.interleaved)
        else:  # one output unused: no gradient flows into the other input (None is autograd's zero)
            dq = ns.rope_backward(grad_q, cos, sin, ctx.interleaved) if grad_q is not None else None
            dk = ns.rope_backward(grad_k, cos, sin, ctx.interleaved) if grad_k is not None else None
        return dq, dk, None, None, None

    return {"rope": (setup, backward), "rope_qk": (setup_qk, backward_qk)}
