"""Portable torch implementation of the RMSNorm family: torch ops only, so it runs on every device type
(CPU, CUDA, XPU, NPU, MPS, ...). Math and sources in `anyaccel.ops.nn.families.rms_norm.spec`; computed in fp32.
"""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.families.rms_norm.fakes import check_backward, check_forward, out_dtype


def _forward(x: torch.Tensor, weight: torch.Tensor | None, eps: float, casting: str
             ) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.float()
    rstd = torch.rsqrt(xf.square().mean(-1) + eps)
    n = xf * rstd.unsqueeze(-1)
    if casting == "llama":
        n = n.to(x.dtype).float()
    if weight is not None:
        n = n * weight.float()
    return n.to(out_dtype(x, weight, casting)).contiguous(), rstd.contiguous()


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float, casting: str
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm over the last dimension; returns ``(y, rstd)`` (see the spec)."""
    check_forward("rms_norm", x, weight, eps, casting)
    return _forward(x, weight, eps, casting)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float,
                       casting: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``h = x + residual`` (in x's dtype) and RMSNorm of ``h``; returns ``(y, h, rstd)``."""
    check_forward("fused_add_rms_norm", x, weight, eps, casting, residual)
    h = (x.float() + residual.float()).to(x.dtype).contiguous()
    y, rstd = _forward(h, weight, eps, casting)
    return y, h, rstd


def rms_norm_backward(grad_y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor,
                      grad_residual: torch.Tensor | None, casting: str, weight_grad: bool
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of x (plus ``grad_residual``) and of weight (empty unless ``weight_grad``)."""
    check_backward(grad_y, x, weight, rstd, grad_residual, casting)
    xf = x.float()
    r = rstd.unsqueeze(-1)
    n = xf * r
    dy = grad_y.float()
    dn = dy * weight.float() if weight is not None else dy
    dx = r * (dn - n * (dn * n).mean(-1, keepdim=True))
    if grad_residual is not None:
        dx = dx + grad_residual.float()
    if weight_grad and weight is not None:
        nw = n.to(x.dtype).float() if casting == "llama" else n
        dw = (dy * nw).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
    else:
        dw = x.new_empty((0,))
    return dx.to(x.dtype).contiguous(), dw


def load() -> Any:
    """The portable implementation as ``anyaccel_torch_rms_norm::*`` torch ops with autograd.

    Side effects: registers the ops once per process.
    """
    from anyaccel.ops.nn.define import define
    from anyaccel.ops.nn.families.rms_norm import autograd
    from anyaccel.ops.nn.families.rms_norm.spec import SPEC

    return define(SPEC, "anyaccel_torch_rms_norm", {"rms_norm": rms_norm, "fused_add_rms_norm": fused_add_rms_norm,
                                                    "rms_norm_backward": rms_norm_backward},
                  triton=False, autograd=autograd.formulas)
