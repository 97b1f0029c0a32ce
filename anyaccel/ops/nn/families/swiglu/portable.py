"""Portable torch implementation of the SwiGLU family (every device type), in fp32, with the generated
kernels' output layout."""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.families.swiglu import fakes


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``silu(a) * b`` with broadcasting, rounded once to ``promote(a, b)``."""
    out = fakes.swiglu(a, b)
    out.copy_(torch.nn.functional.silu(a.float()) * b.float())
    return out


def swiglu_backward(grad_y: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Grads of a and b, in the broadcast shape (the autograd formula sums them to the inputs' shapes)."""
    da, db = fakes.swiglu_backward(grad_y, a, b)
    af, g = a.float(), grad_y.float()
    s = torch.sigmoid(af)
    da.copy_(g * b.float() * s * (1.0 + af * (1.0 - s)))
    db.copy_(g * af * s)
    return da, db


def silu(x: torch.Tensor) -> torch.Tensor:
    """``x * sigmoid(x)``."""
    out = fakes.silu(x)
    out.copy_(torch.nn.functional.silu(x.float()))
    return out


def silu_backward(grad_y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``dy * s * (1 + x * (1 - s))``."""
    out = fakes.silu_backward(grad_y, x)
    xf = x.float()
    s = torch.sigmoid(xf)
    out.copy_(grad_y.float() * s * (1.0 + xf * (1.0 - s)))
    return out


def load() -> Any:
    """The portable implementation as ``anyaccel_torch_swiglu::*`` torch ops with autograd."""
    from anyaccel.ops.nn.define import define
    from anyaccel.ops.nn.families.swiglu import autograd
    from anyaccel.ops.nn.families.swiglu.spec import SPEC

    return define(SPEC, "anyaccel_torch_swiglu", {"swiglu": swiglu, "swiglu_backward": swiglu_backward,
                                                  "silu": silu, "silu_backward": silu_backward},
                  triton=False, autograd=autograd.formulas)
