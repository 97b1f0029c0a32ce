"""Backward formulas of the RMSNorm ops, shared by every implementation (each calls its own
``rms_norm_backward``)."""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.define import Formula


def formulas(ns: Any) -> dict[str, Formula]:
    """Backward formulas of ``rms_norm`` and ``fused_add_rms_norm``, calling ``ns``'s backward ops.

    What is saved: x (or h), weight and rstd (fp32, one per row); nothing of size N x rows in fp32.
    No gradient flows through the returned rstd (it is a statistic for the backward). Gradients are not
    materialised (``set_materialize_grads(False)``): an output nobody used brings None, not a tensor of
    zeros that autograd would allocate and fill on every backward (rstd's always, ``h``'s when unused).
    """

    def setup_rms(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
        x, weight, _eps, casting = inputs
        ctx.save_for_backward(x, weight, output[1])
        ctx.casting = casting
        ctx.set_materialize_grads(False)

    def backward_rms(ctx: Any, grad_y: torch.Tensor | None, _grad_rstd: Any) -> tuple[Any, ...]:
        if grad_y is None:  # only rstd was used, and no gradient flows through it
            return None, None, None, None
        x, weight, rstd = ctx.saved_tensors
        need_w = weight is not None and ctx.needs_input_grad[1]
        dx, dw = ns.rms_norm_backward(grad_y, x, weight, rstd, None, ctx.casting, need_w)
        return dx, (dw if need_w else None), None, None

    def setup_fused(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
        _x, _residual, weight, _eps, casting = inputs
        ctx.save_for_backward(output[1], weight, output[2])
        ctx.casting = casting
        ctx.set_materialize_grads(False)

    def backward_fused(ctx: Any, grad_y: torch.Tensor | None, grad_h: torch.Tensor | None, _grad_rstd: Any
                       ) -> tuple[Any, ...]:
        if grad_y is None:  # y unused: h = x + residual passes its gradient (or none) straight to both
            return grad_h, grad_h, None, None, None
        h, weight, rstd = ctx.saved_tensors
        need_w = weight is not None and ctx.needs_input_grad[2]
        dh, dw = ns.rms_norm_backward(grad_y, h, weight, rstd, grad_h, ctx.casting, need_w)
        return dh, dh, (dw if need_w else None), None, None

    return {"rms_norm": (setup_rms, backward_rms), "fused_add_rms_norm": (setup_fused, backward_fused)}
