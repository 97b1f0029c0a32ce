"""Portable torch implementation of the SwiGLU family (every device type), in fp32, with the generated
kernels' output layout."""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.families.swiglu import fakes


def swiglu_fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``silu(a) * b`` in fp32 (broadcast shape), before the one rounding: shared by `swiglu` and
    `swiglu_backward_recompute`, so both round the same values."""
    return torch.nn.functional.silu(a.float()) * b.float()


def grads_fp32(grad_y: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(da, db)`` in fp32 (broadcast shape), before the one rounding: shared by `swiglu_backward` and
    `swiglu_backward_recompute`."""
    af, g = a.float(), grad_y.float()
    s = torch.sigmoid(af)
    return g * b.float() * s * (1.0 + af * (1.0 - s)), g * af * s


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``silu(a) * b`` with broadcasting, rounded once to ``promote(a, b)``."""
    out = fakes.swiglu(a, b)
    out.copy_(swiglu_fp32(a, b))
    return out


def swiglu_backward(grad_y: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Grads of a and b, in the broadcast shape (the autograd formula sums them to the inputs' shapes)."""
    da, db = fakes.swiglu_backward(grad_y, a, b)
    da32, db32 = grads_fp32(grad_y, a, b)
    da.copy_(da32)
    db.copy_(db32)
    return da, db


def swiglu_backward_recompute(grad_y: torch.Tensor, a: torch.Tensor, b: torch.Tensor
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`swiglu_backward`'s grads of a and b and `swiglu`'s ``silu(a) * b``, the same values bit for bit (the
    same fp32 expressions, rounded once); all three in the broadcast shape of the three inputs."""
    da, db, y = fakes.swiglu_backward_recompute(grad_y, a, b)
    da32, db32 = grads_fp32(grad_y, a, b)
    da.copy_(da32)
    db.copy_(db32)
    y.copy_(swiglu_fp32(a, b))
    return da, db, y


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
                                                  "swiglu_backward_recompute": swiglu_backward_recompute,
                                                  "silu": silu, "silu_backward": silu_backward},
                  triton=False, autograd=autograd.formulas)
