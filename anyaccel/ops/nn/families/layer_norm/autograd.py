"""Backward formula of ``layer_norm``, shared by every implementation (each calls its own
``layer_norm_backward``)."""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.define import Formula


def formulas(ns: Any) -> dict[str, Formula]:
    """Backward formula of ``layer_norm``, calling ``ns``'s backward ops. Saves x, weight, mean and rstd (fp32 per row).
    The bias gradient is computed by the backward op when bias requires grad (its dtype is weight's).
    No gradient flows through mean and rstd, and gradients are not materialised
    (``set_materialize_grads(False)``): autograd would otherwise allocate and fill two tensors of zeros for
    them on every backward."""

    def setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
        x, weight, bias, _eps = inputs
        ctx.save_for_backward(x, weight, output[1], output[2])
        ctx.bias_dtype = bias.dtype if bias is not None else None
        ctx.set_materialize_grads(False)

    def backward(ctx: Any, grad_y: torch.Tensor | None, _gm: Any, _gr: Any) -> tuple[Any, ...]:
        if grad_y is None:  # only the statistics were used
            return None, None, None, None
        x, weight, mean, rstd = ctx.saved_tensors
        need_w = weight is not None and ctx.needs_input_grad[1]
        need_b = ctx.bias_dtype is not None and ctx.needs_input_grad[2]
        dx, dw, db = ns.layer_norm_backward(grad_y, x, weight, mean, rstd, need_w, need_b)
        return dx, (dw if need_w else None), (db.to(ctx.bias_dtype) if need_b else None), None

    return {"layer_norm": (setup, backward)}
