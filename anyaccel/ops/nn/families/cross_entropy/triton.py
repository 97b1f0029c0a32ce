"""Triton implementation of the cross-entropy family (math in
`anyaccel.ops.nn.families.cross_entropy.spec`).

One program per row walks the vocabulary in tiles with the online max/sum recurrence (one read of the row
for the loss; a second for the gradient, served mostly from L2). In the fused linear + cross-entropy the
gradient pass overwrites the chunk's logits in place (Liger-Kernel's trick), so a chunk needs no second
buffer. Targets outside ``[0, V)`` other than ``ignore_index`` read no memory (masked) and give an
undefined loss, where torch's CUDA kernel asserts. Importing this module imports Triton.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from anyaccel.ops.nn.families.cross_entropy import chunked
from anyaccel.ops.nn.families.cross_entropy.fakes import check_backward, check_logits
from anyaccel.ops.triton.launch import device_of, next_power_of_2, wrap

#: Vocabulary tile per loop step.
BLOCK_V = 4096


@triton.jit
def _ce_fwd_kernel(Z, T, LOSS, LSE, SCALE, V, szm, szn, st, ignore_index, smoothing, HAS_SMOOTH: tl.constexpr,
                   WRITE_GRAD: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    zrow = Z + row * szm
    t = tl.load(T + row * st).to(tl.int64)
    mx = tl.full([], -float("inf"), tl.float32)  # loop-carried: typed fp32 scalars, not constexprs
    s = tl.full([], 0.0, tl.float32)
    zsum = tl.full([], 0.0, tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < V
        z = tl.load(zrow + cols * szn, mask=mask, other=-float("inf")).to(tl.float32)
        new = tl.maximum(mx, tl.max(z, axis=0))
        s = s * tl.exp(mx - new) + tl.sum(tl.exp(z - new), axis=0)
        mx = new
        if HAS_SMOOTH:
            zsum += tl.sum(tl.where(mask, z, 0.0), axis=0)
    lse = mx + tl.log(s)
    valid = t != ignore_index
    in_range = valid & (t >= 0) & (t < V)
    zt = tl.load(zrow + t * szn, mask=in_range, other=0.0).to(tl.float32)
    loss = lse - zt
    if HAS_SMOOTH:
        loss = (1.0 - smoothing) * loss + smoothing * (lse - zsum / V)
    loss = tl.where(valid, loss, 0.0)
    tl.store(LOSS + row, loss)
    tl.store(LSE + row, lse)
    if WRITE_GRAD:
        scale = tl.where(valid, tl.load(SCALE).to(tl.float32), 0.0)
        for start in range(0, V, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < V
            z = tl.load(zrow + cols * szn, mask=mask, other=0.0).to(tl.float32)
            g = tl.exp(z - lse) - tl.where(cols == t, 1.0 - smoothing, 0.0)
            if HAS_SMOOTH:
                g = g - smoothing / V
            tl.store(zrow + cols * szn, (g * scale).to(Z.dtype.element_ty), mask=mask)


@triton.jit
def _ce_bwd_kernel(Z, T, LSE, GL, DZ, V, szm, szn, st, sgl, ignore_index, smoothing, HAS_SMOOTH: tl.constexpr,
                   BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    zrow = Z + row * szm
    t = tl.load(T + row * st).to(tl.int64)
    lse = tl.load(LSE + row).to(tl.float32)
    g_row = tl.where(t != ignore_index, tl.load(GL + row * sgl).to(tl.float32), 0.0)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < V
        z = tl.load(zrow + cols * szn, mask=mask, other=0.0).to(tl.float32)
        g = tl.exp(z - lse) - tl.where(cols == t, 1.0 - smoothing, 0.0)
        if HAS_SMOOTH:
            g = g - smoothing / V
        tl.store(DZ + row * V + cols, (g * g_row).to(DZ.dtype.element_ty), mask=mask)


def _block(vocab: int) -> tuple[int, int]:
    block = min(BLOCK_V, next_power_of_2(vocab))
    return block, 16 if block >= 4096 else 8 if block >= 1024 else 4


def _launch_fwd(z: torch.Tensor, target: torch.Tensor, ignore_index: int, label_smoothing: float,
                scale: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    rows, vocab = z.shape
    loss = torch.empty((rows,), dtype=torch.float32, device=z.device)
    lse = torch.empty_like(loss)
    if rows == 0:
        return loss, lse
    block, warps = _block(vocab)
    with device_of(z):
        wrap(_ce_fwd_kernel)[(rows,)](
            z, target, loss, lse, scale if scale is not None else loss, vocab, z.stride(0), z.stride(1),
            target.stride(0), ignore_index, label_smoothing, HAS_SMOOTH=label_smoothing > 0,
            WRITE_GRAD=scale is not None, BLOCK=block, num_warps=warps)
    return loss, lse


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int, label_smoothing: float
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row loss and lse (fp32) of ``logits [rows, V]`` (any strides), one read of the logits."""
    check_logits("cross_entropy", logits, target, label_smoothing)
    return _launch_fwd(logits, target, ignore_index, label_smoothing, None)


def cross_entropy_backward(grad_loss: torch.Tensor, logits: torch.Tensor, target: torch.Tensor,
                           lse: torch.Tensor, ignore_index: int, label_smoothing: float) -> torch.Tensor:
    """Gradient of the logits (logits' dtype, contiguous) from the per-row loss gradient."""
    check_backward(grad_loss, logits, target, lse, label_smoothing)
    rows, vocab = logits.shape
    dz = torch.empty((rows, vocab), dtype=logits.dtype, device=logits.device)
    if rows == 0:
        return dz
    block, warps = _block(vocab)
    with device_of(logits):
        wrap(_ce_bwd_kernel)[(rows,)](
            logits, target, lse, grad_loss, dz, vocab, logits.stride(0), logits.stride(1), target.stride(0),
            grad_loss.stride(0), ignore_index,
            label_smoothing, HAS_SMOOTH=label_smoothing > 0, BLOCK=block, num_warps=warps)
    return dz


def _ce_chunk(z: torch.Tensor, target: torch.Tensor, ignore_index: int, label_smoothing: float,
              scale: torch.Tensor | None) -> torch.Tensor:
    return _launch_fwd(z, target, ignore_index, label_smoothing, scale)[0]


def fused_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                               bias: torch.Tensor | None, ignore_index: int, label_smoothing: float, reduction: str,
                               compute_grad: bool, accum_dtype: torch.dtype
                               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chunked linear + cross-entropy with the Triton loss/gradient kernel per chunk."""
    return chunked.fused_linear_cross_entropy(hidden, weight, target, bias, ignore_index, label_smoothing,
                                              reduction, compute_grad, accum_dtype, ce_chunk=_ce_chunk)


def load() -> Any:
    """The Triton implementation as ``anyaccel_triton_cross_entropy::*`` torch ops with autograd (imports
    Triton)."""
    from anyaccel.ops.nn.define import define
    from anyaccel.ops.nn.families.cross_entropy import autograd
    from anyaccel.ops.nn.families.cross_entropy.spec import SPEC

    return define(SPEC, "anyaccel_triton_cross_entropy",
                  {"cross_entropy": cross_entropy, "cross_entropy_backward": cross_entropy_backward,
                   "fused_linear_cross_entropy": fused_linear_cross_entropy}, triton=True,
                  autograd=autograd.formulas)
