"""Triton implementation of the rotary-embedding family (math in :mod:`anyaccel.ops.nn.families.rope.spec`).

The tensor is seen as up to three leading dimensions (any strides, e.g. Hugging Face's ``[B, H, S, D]``
view of a ``[B, S, H, D]`` projection, read in place) and the pair dimension; ``cos``/``sin`` broadcast
with stride 0, so the position table is never expanded in memory. A program rotates ``BLOCK_R`` rows.
Importing this module imports Triton.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from anyaccel.ops.nn.families.rope.fakes import check
from anyaccel.ops.triton.launch import device_of, next_power_of_2, wrap


@triton.jit
def _rope_kernel(X, C, S, Y, R, D1, D2, HALF, sx0, sx1, sx2, sxd, sc0, sc1, sc2, scd, ss0, ss1, ss2, ssd,
                 sy0, sy1, sy2, syd, INTERLEAVED: tl.constexpr, BACKWARD: tl.constexpr, BLOCK_R: tl.constexpr,
                 BLOCK_H: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < R
    i2 = rows % D2
    rest = rows // D2
    i1 = rest % D1
    i0 = rest // D1
    j = tl.arange(0, BLOCK_H)
    mask = rmask[:, None] & (j < HALF)[None, :]
    xo = (i0 * sx0 + i1 * sx1 + i2 * sx2)[:, None]
    yo = (i0 * sy0 + i1 * sy1 + i2 * sy2)[:, None]
    c = tl.load(C + (i0 * sc0 + i1 * sc1 + i2 * sc2)[:, None] + j[None, :] * scd, mask=mask, other=0.0)
    s = tl.load(S + (i0 * ss0 + i1 * ss1 + i2 * ss2)[:, None] + j[None, :] * ssd, mask=mask, other=0.0)
    c = c.to(tl.float32)
    s = s.to(tl.float32)
    if BACKWARD:
        s = -s
    if INTERLEAVED:
        p1 = 2 * j
        p2 = 2 * j + 1
    else:
        p1 = j
        p2 = j + HALF
    x1 = tl.load(X + xo + p1[None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(X + xo + p2[None, :] * sxd, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + yo + p1[None, :] * syd, (x1 * c - x2 * s).to(Y.dtype.element_ty), mask=mask)
    tl.store(Y + yo + p2[None, :] * syd, (x2 * c + x1 * s).to(Y.dtype.element_ty), mask=mask)


def _four_d(t: torch.Tensor) -> torch.Tensor:
    """``t`` as ``[d0, d1, d2, last]``: leading 1s added, or leading dimensions beyond three merged (a copy
    when they do not collapse)."""
    while t.dim() < 4:
        t = t.unsqueeze(0)
    if t.dim() > 4:
        t = t.reshape(-1, *t.shape[-3:])
    return t


def _row_order(x4: torch.Tensor) -> tuple[int, ...]:
    """The leading dimensions of ``x4`` ordered by decreasing stride (size-1 ones first), so the kernel's rows
    run through x in memory order. For Hugging Face's ``view(B, S, H, D).transpose(1, 2)`` queries this puts
    the heads innermost: a program's rows are then contiguous in memory and share their cos/sin row (the
    tables broadcast over heads), instead of striding across the sequence and re-reading the tables per
    head. Identity for symbolic strides (tracing), which must not be compared."""
    strides = x4.stride()[:3]
    if not all(type(v) is int for v in (*strides, *x4.shape[:3])):
        return (0, 1, 2)
    return tuple(sorted(range(3), key=lambda d: -strides[d] if x4.shape[d] > 1 else -float("inf")))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool, backward: bool
            ) -> torch.Tensor:
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
    half = x.shape[-1] // 2
    lead = x.shape[:-1]
    c4 = _four_d(cos.expand(*lead, half))
    s4 = _four_d(sin.expand(*lead, half))
    x4 = _four_d(x)
    # more than 4 dims: write a contiguous buffer (always a view as 4-D), copied into y's layout at the end
    out = y if x.dim() <= 4 else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    y4 = _four_d(out)
    order = _row_order(x4)
    if order != (0, 1, 2):
        x4, c4, s4, y4 = (t.permute(*order, 3) for t in (x4, c4, s4, y4))
    d0, d1, d2, _ = x4.shape
    rows = d0 * d1 * d2
    block_h = next_power_of_2(half)
    block_r = max(1, min(64, 2048 // block_h))
    with device_of(x):
        wrap(_rope_kernel)[(-(-rows // block_r),)](
            x4, c4, s4, y4, rows, d1, d2, half, *x4.stride(), *c4.stride(), *s4.stride(), *y4.stride(),
            INTERLEAVED=interleaved, BACKWARD=backward, BLOCK_R=block_r, BLOCK_H=block_h, num_warps=4)
    if out is not y:
        y.copy_(out)
    return y


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """``x`` with each pair rotated (see the spec); x's layout is kept."""
    check("rope", x, cos, sin)
    return _rotate(x, cos, sin, interleaved, False)


def rope_backward(grad_y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """``grad_y`` rotated by the opposite angle."""
    check("rope_backward", grad_y, cos, sin)
    return _rotate(grad_y, cos, sin, interleaved, True)


def load() -> Any:
    """The Triton implementation as ``anyaccel_triton_rope::*`` torch ops with autograd (imports Triton)."""
    from anyaccel.ops.nn.define import define
    from anyaccel.ops.nn.families.rope import autograd
    from anyaccel.ops.nn.families.rope.spec import SPEC

    return define(SPEC, "anyaccel_triton_rope", {"rope": rope, "rope_backward": rope_backward}, triton=True,
                  autograd=autograd.formulas)
