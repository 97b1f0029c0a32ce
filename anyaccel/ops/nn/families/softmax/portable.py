"""Portable torch implementation of the softmax family (every device type): torch's own kernels, computed
in fp32 for 16-bit inputs, returned contiguous in x's dtype."""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.families.softmax.fakes import check


def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax along ``dim``."""
    d = check("softmax", x, dim)
    return torch.softmax(x.float(), d).to(x.dtype).contiguous()


def log_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Log-softmax along ``dim``."""
    d = check("log_softmax", x, dim)
    return torch.log_softmax(x.float(), d).to(x.dtype).contiguous()


def softmax_backward(grad_y: torch.Tensor, y: torch.Tensor, dim: int) -> torch.Tensor:
    """``y * (dy - sum(dy * y))`` along ``dim``."""
    d = check("softmax_backward", y, dim, grad_y)
    yf, gf = y.float(), grad_y.float()
    return (yf * (gf - (gf * yf).sum(d, keepdim=True))).to(y.dtype).contiguous()


def log_softmax_backward(grad_y: torch.Tensor, y: torch.Tensor, dim: int) -> torch.Tensor:
    """``dy - exp(y) * sum(dy)`` along ``dim``."""
    d = check("log_softmax_backward", y, dim, grad_y)
    gf = grad_y.float()
    return (gf - torch.exp(y.float()) * gf.sum(d, keepdim=True)).to(y.dtype).contiguous()


def load() -> Any:
    """The portable implementation as ``anyaccel_torch_softmax::*`` torch ops with autograd."""
    from anyaccel.ops.nn.define import define
    from anyaccel.ops.nn.families.softmax import autograd
    from anyaccel.ops.nn.families.softmax.spec import SPEC

    return define(SPEC, "anyaccel_torch_softmax",
                  {"softmax": softmax, "log_softmax": log_softmax, "softmax_backward": softmax_backward,
                   "log_softmax_backward": log_softmax_backward}, triton=False, autograd=autograd.formulas)
