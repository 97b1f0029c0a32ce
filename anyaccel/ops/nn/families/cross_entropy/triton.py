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

from anyaccel.ops.nn.families.cross_entropy import chunked, nll
from anyaccel.ops.nn.families.cross_entropy.fakes import check_backward, check_logits, check_nll
from anyaccel.ops.nn.families.cross_entropy.targets import check_target_values
from anyaccel.ops.triton.launch import device_of, next_power_of_2, wrap
from anyaccel.ops.triton.pointwise import pointwise

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
    check_target_values("cross_entropy", target, logits.shape[1], ignore_index)
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


#: Rows per program of the nll kernels.
NLL_ROWS = 1024


@triton.jit
def _nll_fwd_kernel(LP, T, W, LOSS, WROW, M, C, S, sln, slc, sls, st, ignore_index, HAS_W: tl.constexpr,
                    BLOCK: tl.constexpr):
    # logp is [N, C, S] (any strides), row r = n * S + s reads logp[n, t_r, s]
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    rmask = rows < M
    t = tl.load(T + rows * st, mask=rmask, other=ignore_index).to(tl.int64)
    valid = rmask & (t != ignore_index) & (t >= 0) & (t < C)
    if HAS_W:
        w = tl.load(W + t, mask=valid, other=0.0).to(tl.float32)
    else:
        w = tl.where(valid, 1.0, 0.0)
    lp = tl.load(LP + (rows // S) * sln + t * slc + (rows % S) * sls, mask=valid, other=0.0).to(tl.float32)
    tl.store(LOSS + rows, -w * lp, mask=rmask)
    tl.store(WROW + rows, w, mask=rmask)


@triton.jit
def _nll_bwd_kernel(G, T, W, DLP, M, C, S, sg, st, ignore_index, HAS_W: tl.constexpr, BLOCK: tl.constexpr):
    # DLP is zero-filled and contiguous [N, C, S]: each row gets its one non-zero, -w[t] * g
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    rmask = rows < M
    t = tl.load(T + rows * st, mask=rmask, other=ignore_index).to(tl.int64)
    valid = rmask & (t != ignore_index) & (t >= 0) & (t < C)
    if HAS_W:
        w = tl.load(W + t, mask=valid, other=0.0).to(tl.float32)
    else:
        w = tl.where(valid, 1.0, 0.0)
    g = tl.load(G + rows * sg, mask=valid, other=0.0).to(tl.float32)
    tl.store(DLP + (rows // S) * C * S + t * S + rows % S, (-w * g).to(DLP.dtype.element_ty), mask=valid)


def nll_loss(logp: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
             ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """aten's ``nll_loss_forward`` / ``nll_loss2d_forward`` with fp32 accumulation: one kernel reads each row's
    target element and weight (any strides of ``[N, C, S]``); the sums run in fp32. A target outside ``[0, C)``
    other than ``ignore_index`` fails as torch's does (`check_target_values`: a device-side assertion on a GPU,
    `TargetIndexError` on the CPU), not read as an ignored row."""
    check_nll("nll_loss", logp, target, weight, reduction)
    lp, t = nll.as_3d(logp, target)
    n, classes, spatial = lp.shape
    check_target_values("nll_loss", target, classes, ignore_index)
    rows = n * spatial
    loss = torch.empty((rows,), dtype=torch.float32, device=lp.device)
    wrow = torch.empty_like(loss)
    if rows:
        with device_of(lp):
            wrap(_nll_fwd_kernel)[(triton.cdiv(rows, NLL_ROWS),)](
                lp, t, weight if weight is not None else loss, loss, wrow, rows, classes, spatial, lp.stride(0),
                lp.stride(1), lp.stride(2), t.stride(0), ignore_index, HAS_W=weight is not None, BLOCK=NLL_ROWS)
    return nll.finish(loss, wrow, reduction, logp.dtype, target.shape)


def nll_loss_backward(grad_output: torch.Tensor, logp: torch.Tensor, target: torch.Tensor,
                      weight: torch.Tensor | None, reduction: int, ignore_index: int,
                      total_weight: torch.Tensor) -> torch.Tensor:
    """aten's ``nll_loss_backward`` / ``nll_loss2d_backward``: a zero-filled gradient (logp's dtype,
    contiguous) and one kernel writing ``-w[t] * g`` (fp32, rounded once) at each row's target."""
    check_nll("nll_loss_backward", logp, target, weight, reduction)
    lp, t = nll.as_3d(logp, target)
    n, classes, spatial = lp.shape
    rows = n * spatial
    out = torch.zeros(logp.shape, dtype=logp.dtype, device=logp.device)
    if rows:
        g = nll.row_grad(grad_output, reduction, total_weight, rows)
        with device_of(lp):
            wrap(_nll_bwd_kernel)[(triton.cdiv(rows, NLL_ROWS),)](
                g, t, weight if weight is not None else g, out, rows, classes, spatial, g.stride(0), t.stride(0),
                ignore_index, HAS_W=weight is not None, BLOCK=NLL_ROWS)
    return out


@pointwise(num_inputs=2)
@triton.jit
def _scaled_grad(g, s):
    return g * s


def scale_in_place(t: torch.Tensor, g: torch.Tensor) -> None:
    """``t *= g`` for a 0-dim fp32 gradient ``g`` on ``t``'s device, computed in fp32 and rounded once to
    ``t``'s dtype, in one pass over ``t`` (the element-wise generator computes 16-bit operands in fp32 and
    reads ``g`` unrounded). The fused loss's eager backward scales its saved gradients with it
    (`anyaccel.ops.nn.families.cross_entropy.autograd`), with the same result as the portable
    `anyaccel.ops.nn.families.cross_entropy.autograd.scaled`, which walks ``t`` through fp32 temporaries: five
    times the memory traffic (measured in ``docs/nn_ops.md``).

    Args:
        t: any shape, float32/bfloat16/float16, overwritten.
        g: 0-dim, on ``t``'s device (or a 0-dim CPU tensor).

    Raises:
        anyaccel.ops.triton.pointwise.PointwiseError: ``g`` on another device.
        RuntimeError: ``g`` not 0-dim and not broadcastable to ``t`` (torch's message).
    """
    _scaled_grad(t, g, out=(t,))


def load() -> Any:
    """The Triton implementation as ``anyaccel_triton_cross_entropy::*`` torch ops with autograd (imports
    Triton)."""
    from anyaccel.ops.nn.define import define
    from anyaccel.ops.nn.families.cross_entropy import autograd
    from anyaccel.ops.nn.families.cross_entropy.spec import SPEC

    return define(SPEC, "anyaccel_triton_cross_entropy",
                  {"cross_entropy": cross_entropy, "cross_entropy_backward": cross_entropy_backward,
                   "fused_linear_cross_entropy": fused_linear_cross_entropy, "nll_loss": nll_loss,
                   "nll_loss_backward": nll_loss_backward}, triton=True,
                  autograd=autograd.formulas, eager_helpers={"scale_in_place": scale_in_place})
