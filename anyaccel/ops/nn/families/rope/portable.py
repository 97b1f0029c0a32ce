"""Portable torch implementation of the rotary-embedding family (every device type), in fp32."""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.families.rope.fakes import check, check_qk


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool, sign: float
            ) -> torch.Tensor:
    half = x.shape[-1] // 2
    xf = x.float()
    if interleaved:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
    else:
        x1, x2 = xf[..., :half], xf[..., half:]
    c, s = cos.float(), sin.float() * sign
    o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
    out = torch.stack((o1, o2), dim=-1).flatten(-2) if interleaved else torch.cat((o1, o2), dim=-1)
    result = torch.empty_like(x)
    result.copy_(out)
    return result


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """``x`` with each pair rotated (see the spec)."""
    check("rope", x, cos, sin)
    return _rotate(x, cos, sin, interleaved, 1.0)


def rope_backward(grad_y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """``grad_y`` rotated by the opposite angle."""
    check("rope_backward", grad_y, cos, sin)
    return _rotate(grad_y, cos, sin, interleaved, -1.0)


def rope_qk(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """``q`` and ``k`` rotated by one table."""
    check_qk("rope_qk", q, k, cos, sin)
    return _rotate(q, cos, sin, interleaved, 1.0), _rotate(k, cos, sin, interleaved, 1.0)


def rope_qk_backward(grad_q: torch.Tensor, grad_k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     interleaved: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``grad_q`` and ``grad_k`` rotated back."""
    check_qk("rope_qk_backward", grad_q, grad_k, cos, sin)
    return _rotate(grad_q, cos, sin, interleaved, -1.0), _rotate(grad_k, cos, sin, interleaved, -1.0)


def load() -> Any:
    """The portable implementation as ``anyaccel_torch_rope::*`` torch ops with autograd."""
    from anyaccel.ops.nn.define import define
    from anyaccel.ops.nn.families.rope import autograd
    from anyaccel.ops.nn.families.rope.spec import SPEC

    return define(SPEC, "anyaccel_torch_rope", {"rope": rope, "rope_backward": rope_backward, "rope_qk": rope_qk,
                                                "rope_qk_backward": rope_qk_backward},
                  triton=False, autograd=autograd.formulas)
