"""Triton implementation of the rotary-embedding family (math in `anyaccel.ops.nn.families.rope.spec`).

The tensor is seen as up to three leading dimensions (any strides, e.g. Hugging Face's ``[B, H, S, D]``
view of a ``[B, S, H, D]`` projection, read in place) and the pair dimension; ``cos``/``sin`` broadcast
with stride 0, so the position table is never expanded in memory. A program rotates ``BLOCK_R`` rows.
Importing this module imports Triton.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

from anyaccel.ops.nn.families.rope.fakes import check, check_qk
from anyaccel.ops.triton.launch import device_of, next_power_of_2, wrap


@triton.jit
def _rope_rows(pid, X, C, S, Y, R, D1, D2, HALF, sx0, sx1, sx2, sxd, sc0, sc1, sc2, scd, ss0, ss1, ss2, ssd,
               sy0, sy1, sy2, syd, INTERLEAVED: tl.constexpr, BACKWARD: tl.constexpr, BLOCK_R: tl.constexpr,
               BLOCK_H: tl.constexpr):
    """Rotate rows ``pid * BLOCK_R ...`` of one tensor seen as ``[R / (D1 * D2), D1, D2, 2 * HALF]``."""
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


@triton.jit
def _rope_kernel(X, C, S, Y, R, D1, D2, HALF, sx0, sx1, sx2, sxd, sc0, sc1, sc2, scd, ss0, ss1, ss2, ssd,
                 sy0, sy1, sy2, syd, INTERLEAVED: tl.constexpr, BACKWARD: tl.constexpr, BLOCK_R: tl.constexpr,
                 BLOCK_H: tl.constexpr):
    _rope_rows(tl.program_id(0).to(tl.int64), X, C, S, Y, R, D1, D2, HALF, sx0, sx1, sx2, sxd, sc0, sc1, sc2,
               scd, ss0, ss1, ss2, ssd, sy0, sy1, sy2, syd, INTERLEAVED, BACKWARD, BLOCK_R, BLOCK_H)


@triton.jit
def _rope_qk_kernel(Q, K, C, S, YQ, YK, RQ, D1Q, D2Q, sq0, sq1, sq2, sqd, scq0, scq1, scq2, scqd, RK, D1K, D2K, sk0,
                    sk1, sk2, skd, sck0, sck1, sck2, sckd, HALF, PROGRAMS_Q, INTERLEAVED: tl.constexpr,
                    BACKWARD: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr):
    """q's rows in the first ``PROGRAMS_Q`` programs, k's in the rest: one launch for both. Each output has
    its input's strides and ``sin`` has ``cos``'s (the common case, and 18 fewer arguments for Triton to
    bind and specialise per launch: `_rotate_qk` launches per tensor otherwise)."""
    pid = tl.program_id(0).to(tl.int64)
    if pid < PROGRAMS_Q:
        _rope_rows(pid, Q, C, S, YQ, RQ, D1Q, D2Q, HALF, sq0, sq1, sq2, sqd, scq0, scq1, scq2, scqd, scq0, scq1,
                   scq2, scqd, sq0, sq1, sq2, sqd, INTERLEAVED, BACKWARD, BLOCK_R, BLOCK_H)
    else:
        _rope_rows(pid - PROGRAMS_Q, K, C, S, YK, RK, D1K, D2K, HALF, sk0, sk1, sk2, skd, sck0, sck1, sck2, sckd,
                   sck0, sck1, sck2, sckd, sk0, sk1, sk2, skd, INTERLEAVED, BACKWARD, BLOCK_R, BLOCK_H)


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


def _views(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, y: torch.Tensor
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x``, the tables expanded to x's rows, and ``y`` (x's shape, at most four dimensions) as 4-D views
    whose leading dimensions are in x's memory order (`_row_order`)."""
    half = x.shape[-1] // 2
    lead = x.shape[:-1]
    x4, c4, s4, y4 = _four_d(x), _four_d(cos.expand(*lead, half)), _four_d(sin.expand(*lead, half)), _four_d(y)
    order = _row_order(x4)
    if order != (0, 1, 2):
        x4, c4, s4, y4 = (t.permute(*order, 3) for t in (x4, c4, s4, y4))
    return x4, c4, s4, y4


def _args(x4: torch.Tensor, c4: torch.Tensor, s4: torch.Tensor, y4: torch.Tensor) -> tuple[int, ...]:
    """One tensor's integer kernel arguments: rows, the two inner leading sizes, strides of x, cos, sin, y."""
    d0, d1, d2, _ = x4.shape
    return (d0 * d1 * d2, d1, d2, *x4.stride(), *c4.stride(), *s4.stride(), *y4.stride())


def _layout(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, y: torch.Tensor) -> tuple[int, ...]:
    """`_args` of ``x``'s views, cached by the four tensors' shapes and strides (the views' arithmetic
    is most of an eager call's host cost, and a model calls rope with a few layouts). The kernel reads
    through the views' strides from the tensors' own data pointers, which the views share (``expand``,
    ``unsqueeze`` and ``permute`` keep the storage offset). Symbolic sizes (tracing with dynamic shapes) are
    not hashable: computed afresh."""
    key = (x.shape, x.stride(), cos.shape, cos.stride(), sin.shape, sin.stride(), y.stride())
    try:
        return _cached_layout(*key)
    except TypeError:  # a SymInt in the key
        return _args(*_views(x, cos, sin, y))


@functools.lru_cache(maxsize=256)
def _cached_layout(x_shape: torch.Size, x_stride: tuple[int, ...], c_shape: torch.Size,
                   c_stride: tuple[int, ...], s_shape: torch.Size, s_stride: tuple[int, ...],
                   y_stride: tuple[int, ...]) -> tuple[int, ...]:
    def meta(shape: torch.Size, stride: tuple[int, ...]) -> torch.Tensor:
        return torch.empty_strided(shape, stride, device="meta")

    return _args(*_views(meta(x_shape, x_stride), meta(c_shape, c_stride), meta(s_shape, s_stride),
                         meta(x_shape, y_stride)))


def _blocks(half: int) -> tuple[int, int, int]:
    """``(BLOCK_R, BLOCK_H, num_warps)``: rows per program, the pair block and warps: about 1024 pairs per
    program on 2 warps, chosen in a sweep of ``rope_qk`` (head size 128, bf16) where it beat 2048 pairs on 4
    warps by 1-3% and 4096 pairs or 8 warps were slower (``docs/nn_ops.md``, "Speed")."""
    block_h = next_power_of_2(half)
    return max(1, min(64, 1024 // block_h)), block_h, 2


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool, backward: bool
            ) -> torch.Tensor:
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
    # more than 4 dims: write a contiguous buffer (always a view as 4-D), copied into y's layout at the end
    out = y if x.dim() <= 4 else torch.empty_like(x, memory_format=torch.contiguous_format)
    if x.dim() <= 4:
        tensors: tuple[torch.Tensor, ...] = (x, cos, sin, out)
        layout = _layout(x, cos, sin, out)
    else:  # merging leading dimensions may copy x or the tables: the kernel gets the views' own pointers
        tensors = _views(x, cos, sin, out)
        layout = _args(*tensors)
    block_r, block_h, warps = _blocks(x.shape[-1] // 2)
    with device_of(x):
        wrap(_rope_kernel)[(-(-layout[0] // block_r),)](
            *tensors, *layout[:3], x.shape[-1] // 2, *layout[3:], INTERLEAVED=interleaved, BACKWARD=backward,
            BLOCK_R=block_r, BLOCK_H=block_h, num_warps=warps)
    if out is not y:
        y.copy_(out)
    return y


def _rotate_qk(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool,
               backward: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k rotated in one kernel launch; one launch each when either is empty or has more than 4 dims,
    or an output's strides differ from its input's (inputs with gaps or overlaps), or sin's from cos's."""
    if q.numel() and k.numel() and q.dim() <= 4 and k.dim() <= 4:
        yq, yk = torch.empty_like(q), torch.empty_like(k)
        ql, kl = _layout(q, cos, sin, yq), _layout(k, cos, sin, yk)
        if _fusable(ql) and _fusable(kl):
            block_r, block_h, warps = _blocks(q.shape[-1] // 2)
            programs_q = -(-ql[0] // block_r)
            with device_of(q):
                wrap(_rope_qk_kernel)[(programs_q + -(-kl[0] // block_r),)](
                    q, k, cos, sin, yq, yk, *ql[:11], *kl[:11], q.shape[-1] // 2, programs_q,
                    INTERLEAVED=interleaved, BACKWARD=backward, BLOCK_R=block_r, BLOCK_H=block_h, num_warps=warps)
            return yq, yk
    return _rotate(q, cos, sin, interleaved, backward), _rotate(k, cos, sin, interleaved, backward)


def _fusable(layout: tuple[int, ...]) -> bool:
    """Whether a `_layout` (rows, d1, d2, then the strides of x, cos, sin and y, four each) fits
    `_rope_qk_kernel`: y strided as x, sin as cos."""
    return layout[3:7] == layout[15:19] and layout[7:11] == layout[11:15]


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """``x`` with each pair rotated (see the spec); x's layout is kept."""
    check("rope", x, cos, sin)
    return _rotate(x, cos, sin, interleaved, False)


def rope_backward(grad_y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """``grad_y`` rotated by the opposite angle."""
    check("rope_backward", grad_y, cos, sin)
    return _rotate(grad_y, cos, sin, interleaved, True)


def rope_qk(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """``q`` and ``k`` rotated by one table, in one launch; each keeps its layout."""
    check_qk("rope_qk", q, k, cos, sin)
    return _rotate_qk(q, k, cos, sin, interleaved, False)


def rope_qk_backward(grad_q: torch.Tensor, grad_k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     interleaved: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``grad_q`` and ``grad_k`` rotated back, in one launch."""
    check_qk("rope_qk_backward", grad_q, grad_k, cos, sin)
    return _rotate_qk(grad_q, grad_k, cos, sin, interleaved, True)


def load() -> Any:
    """The Triton implementation as ``anyaccel_triton_rope::*`` torch ops with autograd (imports Triton)."""
    from anyaccel.ops.nn.define import define
    from anyaccel.ops.nn.families.rope import autograd
    from anyaccel.ops.nn.families.rope.spec import SPEC

    return define(SPEC, "anyaccel_triton_rope", {"rope": rope, "rope_backward": rope_backward, "rope_qk": rope_qk,
                                                 "rope_qk_backward": rope_qk_backward},
                  triton=True, autograd=autograd.formulas)
