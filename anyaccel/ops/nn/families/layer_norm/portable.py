"""Portable torch implementation of the LayerNorm family (every device type); math in the spec, in fp32."""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.families.layer_norm.fakes import check_backward, check_forward


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LayerNorm over the last dimension; returns ``(y, mean, rstd)``."""
    check_forward("layer_norm", x, weight, bias, eps)
    xf = x.float()
    mean = xf.mean(-1)
    xc = xf - mean.unsqueeze(-1)
    rstd = torch.rsqrt(xc.square().mean(-1) + eps)
    y = xc * rstd.unsqueeze(-1)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype).contiguous(), mean.contiguous(), rstd.contiguous()


def layer_norm_backward(grad_y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
                        rstd: torch.Tensor, weight_grad: bool, bias_grad: bool
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of x, weight and bias (the last two empty unless asked for)."""
    check_backward(grad_y, x, weight, mean, rstd)
    n = x.shape[-1]
    r = rstd.unsqueeze(-1)
    nrm = (x.float() - mean.unsqueeze(-1)) * r
    dy = grad_y.float()
    dn = dy * weight.float() if weight is not None else dy
    dx = r * (dn - dn.mean(-1, keepdim=True) - nrm * (dn * nrm).mean(-1, keepdim=True))
    pdtype = weight.dtype if weight is not None else x.dtype
    dw = (dy * nrm).reshape(-1, n).sum(0).to(pdtype) if weight_grad else x.new_empty((0,), dtype=pdtype)
    db = dy.reshape(-1, n).sum(0).to(pdtype) if bias_grad else x.new_empty((0,), dtype=pdtype)
    return dx.to(x.dtype).contiguous(), dw, db


def load() -> Any:
    """The portable implementation as ``anyaccel_torch_layer_norm::*`` torch ops with autograd."""
    from anyaccel.ops.nn.define import define
    from anyaccel.ops.nn.families.layer_norm import autograd
    from anyaccel.ops.nn.families.layer_norm.spec import SPEC

    return define(SPEC, "anyaccel_torch_layer_norm",
                  {"layer_norm": layer_norm, "layer_norm_backward": layer_norm_backward},
                  triton=False, autograd=autograd.formulas)
