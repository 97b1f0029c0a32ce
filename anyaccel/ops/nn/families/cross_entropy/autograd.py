"""Backward formulas of ``cross_entropy`` and ``fused_linear_cross_entropy``."""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.define import Formula
from anyaccel.ops.nn.errors import UnsupportedOpError


def formulas(ns: Any) -> dict[str, Formula]:
    """Backward formulas of ``cross_entropy`` (saves logits, target and lse; ``ns``'s backward op recomputes
    the softmax), ``fused_linear_cross_entropy`` (saves the gradients computed in the forward and scales
    them by the incoming gradient) and ``nll_loss`` (saves logp, target, weight and the total weight; the
    gradient reaches logp only)."""

    # an implementation's in-place ``t *= g`` for the eager backward (`define`'s eager helpers), if it has one
    scale_in_place = getattr(ns, "scale_in_place", None)

    def setup_ce(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
        logits, target, ignore_index, label_smoothing = inputs
        ctx.save_for_backward(logits, target, output[1])
        ctx.ignore_index, ctx.label_smoothing = ignore_index, label_smoothing

    def backward_ce(ctx: Any, grad_loss: torch.Tensor, _grad_lse: Any) -> tuple[Any, ...]:
        logits, target, lse = ctx.saved_tensors
        dz = ns.cross_entropy_backward(grad_loss, logits, target, lse, ctx.ignore_index, ctx.label_smoothing)
        return dz, None, None, None

    def setup_fused(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
        hidden, weight, _target, bias, _ii, _ls, _red, compute_grad, _accum = inputs
        ctx.compute_grad = compute_grad
        ctx.consumed = False
        # the gradient outputs take no gradient: without this autograd would hand the backward a zero tensor
        # of each of their sizes (a second weight-sized buffer)
        ctx.set_materialize_grads(False)
        ctx.has_bias = bias is not None
        ctx.save_for_backward(output[1], output[2], output[3])

    def backward_fused(ctx: Any, grad_loss: torch.Tensor, *_unused: Any) -> tuple[Any, ...]:
        if not ctx.compute_grad:
            raise UnsupportedOpError(
                "fused_linear_cross_entropy: backward called on a loss computed with compute_grad=False; the "
                "front end sets it from torch.is_grad_enabled() and requires_grad: compute the loss with "
                "grad enabled")
        if grad_loss is None:  # only the gradient outputs were used: nothing flows back
            return (None,) * 9
        if ctx.consumed:
            raise UnsupportedOpError(
                "fused_linear_cross_entropy: backward ran a second time over one loss (retain_graph=True); the "
                "first backward scaled the gradients computed in the forward in place. Compute the loss again "
                "for a second backward")
        gh, gw, gb = ctx.saved_tensors
        # eager: scale the saved gradients in place (they are used once), so the weight gradient is not
        # copied; traced (torch.compile, AOT or fake tensors), out of place: a backward graph may not mutate
        # its inputs
        ctx.consumed = in_place = _eager(gw)

        def scale(t: torch.Tensor) -> torch.Tensor:
            if in_place and scale_in_place is not None and t.numel():
                scale_in_place(t, grad_loss)  # the implementation's one-pass kernel (eager helper)
                return t
            return scaled(t, grad_loss, t if in_place else None)

        dh = scale(gh) if ctx.needs_input_grad[0] else None
        dw = scale(gw) if ctx.needs_input_grad[1] else None
        db = scale(gb) if ctx.has_bias and ctx.needs_input_grad[3] else None
        return dh, dw, None, db, None, None, None, None, None

    def setup_nll(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
        logp, target, weight, reduction, ignore_index = inputs
        ctx.save_for_backward(logp, target, weight, output[1])
        ctx.reduction, ctx.ignore_index = reduction, ignore_index

    def backward_nll(ctx: Any, grad_out: torch.Tensor, _grad_total: Any) -> tuple[Any, ...]:
        logp, target, weight, total = ctx.saved_tensors
        return (ns.nll_loss_backward(grad_out, logp, target, weight, ctx.reduction, ctx.ignore_index, total),
                None, None, None, None)

    return {"cross_entropy": (setup_ce, backward_ce), "fused_linear_cross_entropy": (setup_fused, backward_fused),
            "nll_loss": (setup_nll, backward_nll)}


def _eager(t: torch.Tensor) -> bool:
    """Whether ``t`` is a plain tensor outside any tracing (`tracing`;
    tensor subclasses such as FakeTensor or FunctionalTensor count as traced)."""
    from anyaccel.ops.nn.implementations import tracing

    return type(t) is torch.Tensor and not tracing()


#: Elements per fp32 temporary in `scaled` (16 Mi elements: 64 MiB).
SCALE_CHUNK = 1 << 24


def scaled(t: torch.Tensor, g: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``t * g`` for a 0-dim gradient ``g``, computed in fp32 and rounded once to ``t``'s dtype, into ``out``
    (a new tensor when None; ``t`` itself to scale in place).

    ``t * g`` directly would round ``g`` to a 16-bit ``t``'s dtype first (a 0.4% error for scales such as
    ``1 / num_items``); this walks ``t`` in row chunks so the fp32 temporaries stay at most 64 MiB.
    """
    out = torch.empty_like(t) if out is None else out
    if t.numel() == 0:
        return out
    if t.dtype == torch.float32:
        return torch.mul(t, g.float(), out=out)
    rows = max(1, SCALE_CHUNK // max(1, t[0].numel())) if t.dim() > 0 else 1
    for src, dst in zip(t.split(rows), out.split(rows), strict=True):
        dst.copy_(src.float() * g.float())
    return out
