"""Triton implementation of the RMSNorm family (forward, fused residual add, backward).

Math in `anyaccel.ops.nn.families.rms_norm.spec`. Rows of up to `anyaccel.ops.triton.launch.MAX_TILE`
elements stay in registers (one read of x, one write of y: memory bound at the copy rate); wider rows are
walked in tiles. Several short rows share a program. The weight gradient is reduced in two stages: each
of ``G`` programs accumulates its rows' ``dy * n`` in fp32 registers and writes one partial row, and one more
launch sums the ``G x N`` partials and casts them to the weight's dtype
(`anyaccel.ops.triton.partials.sum_partials`; Liger-Kernel's scheme, ``G`` = the device's multiprocessor
count).

Importing this module imports Triton; the implementation loader imports it only where Triton is
installed.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from anyaccel.ops.nn.families.rms_norm.fakes import check_backward, check_forward, out_dtype
from anyaccel.ops.nn.rows import as_rows
from anyaccel.ops.triton.launch import MAX_TILE, device_of, multiprocessor_count, row_blocks, wrap
from anyaccel.ops.triton.partials import sum_partials


@triton.jit
def _rms_fwd_kernel(X, R, W, Y, H, RSTD, M, N, sxm, sxn, srm, srn, eps, HAS_W: tl.constexpr, HAS_RES: tl.constexpr,
                    LLAMA: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONE_TILE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    if ONE_TILE:
        cols = tl.arange(0, BLOCK_N)
        cmask = cols < N
        mask = rmask[:, None] & cmask[None, :]
        x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
        if HAS_RES:
            r = tl.load(R + rows[:, None] * srm + cols[None, :] * srn, mask=mask, other=0.0).to(tl.float32)
            h = (x + r).to(H.dtype.element_ty)
            tl.store(H + rows[:, None] * N + cols[None, :], h, mask=mask)
            x = h.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
        tl.store(RSTD + rows, rstd, mask=rmask)
        n = x * rstd[:, None]
        if LLAMA:
            n = n.to(X.dtype.element_ty).to(tl.float32)
        if HAS_W:
            w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
            n = n * w[None, :]
        tl.store(Y + rows[:, None] * N + cols[None, :], n.to(Y.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = rmask[:, None] & (cols < N)[None, :]
            x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
            if HAS_RES:
                r = tl.load(R + rows[:, None] * srm + cols[None, :] * srn, mask=mask, other=0.0).to(tl.float32)
                h = (x + r).to(H.dtype.element_ty)
                tl.store(H + rows[:, None] * N + cols[None, :], h, mask=mask)
                x = h.to(tl.float32)
            acc += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / N + eps)
        tl.store(RSTD + rows, rstd, mask=rmask)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            cmask = cols < N
            mask = rmask[:, None] & cmask[None, :]
            if HAS_RES:
                x = tl.load(H + rows[:, None] * N + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            else:
                x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
            n = x * rstd[:, None]
            if LLAMA:
                n = n.to(X.dtype.element_ty).to(tl.float32)
            if HAS_W:
                w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
                n = n * w[None, :]
            tl.store(Y + rows[:, None] * N + cols[None, :], n.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _rms_bwd_kernel(DY, X, W, RSTD, DR, DX, DWP, M, N, sdym, sdyn, sxm, sxn, sdrm, sdrn, blocks_per_prog,
                    HAS_W: tl.constexpr, HAS_DR: tl.constexpr, WANT_DW: tl.constexpr, LLAMA: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONE_TILE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    if ONE_TILE:
        cols = tl.arange(0, BLOCK_N)
        cmask = cols < N
        if HAS_W:
            w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
        dw_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for i in range(0, blocks_per_prog):
            rows = (pid + i * nprog) * BLOCK_M + tl.arange(0, BLOCK_M)
            rmask = rows < M
            mask = rmask[:, None] & cmask[None, :]
            x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + rows[:, None] * sdym + cols[None, :] * sdyn, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(RSTD + rows, mask=rmask, other=0.0)
            n = x * rstd[:, None]
            if HAS_W:
                dn = dy * w[None, :]
            else:
                dn = dy
            c = tl.sum(dn * n, axis=1) / N
            dx = rstd[:, None] * (dn - n * c[:, None])
            if HAS_DR:
                dx += tl.load(DR + rows[:, None] * sdrm + cols[None, :] * sdrn, mask=mask, other=0.0).to(tl.float32)
            tl.store(DX + rows[:, None] * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
            if WANT_DW:
                if LLAMA:
                    n = n.to(X.dtype.element_ty).to(tl.float32)
                dw_acc += tl.sum(dy * n, axis=0)
        if WANT_DW:
            tl.store(DWP + pid * N + cols, dw_acc, mask=cmask)
    else:
        for i in range(0, blocks_per_prog):
            rows = (pid + i * nprog) * BLOCK_M + tl.arange(0, BLOCK_M)
            rmask = rows < M
            rstd = tl.load(RSTD + rows, mask=rmask, other=0.0)
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for start in range(0, N, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                cmask = cols < N
                mask = rmask[:, None] & cmask[None, :]
                x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(DY + rows[:, None] * sdym + cols[None, :] * sdyn, mask=mask, other=0.0).to(tl.float32)
                if HAS_W:
                    dy = dy * tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
                acc += dy * x * rstd[:, None]
            c = tl.sum(acc, axis=1) / N
            for start in range(0, N, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                cmask = cols < N
                mask = rmask[:, None] & cmask[None, :]
                x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(DY + rows[:, None] * sdym + cols[None, :] * sdyn, mask=mask, other=0.0).to(tl.float32)
                n = x * rstd[:, None]
                if HAS_W:
                    dn = dy * tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
                else:
                    dn = dy
                dx = rstd[:, None] * (dn - n * c[:, None])
                if HAS_DR:
                    dx += tl.load(DR + rows[:, None] * sdrm + cols[None, :] * sdrn, mask=mask,
                                  other=0.0).to(tl.float32)
                tl.store(DX + rows[:, None] * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
                if WANT_DW:
                    if LLAMA:
                        n = n.to(X.dtype.element_ty).to(tl.float32)
                    part = tl.load(DWP + pid * N + cols, mask=cmask, other=0.0)
                    tl.store(DWP + pid * N + cols, part + tl.sum(dy * n, axis=0), mask=cmask)


def _forward(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None, eps: float,
             casting: str) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    n = x.shape[-1]
    x2 = as_rows(x, n)
    r2 = as_rows(residual, n) if residual is not None else x2
    m = x2.shape[0]
    y = torch.empty_like(x, dtype=out_dtype(x, weight, casting), memory_format=torch.contiguous_format)
    h = torch.empty_like(x, memory_format=torch.contiguous_format) if residual is not None else None
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    if m == 0:
        return y, h, rstd
    b = row_blocks(m, n, **_forward_tiling(n, m))
    with device_of(x):
        wrap(_rms_fwd_kernel)[(b.grid,)](
            x2, r2, weight if weight is not None else x2, y, h if h is not None else y, rstd, m, n,
            x2.stride(0), x2.stride(1), r2.stride(0), r2.stride(1), eps, HAS_W=weight is not None,
            HAS_RES=residual is not None, LLAMA=casting == "llama", BLOCK_M=b.block_m, BLOCK_N=b.block_n,
            ONE_TILE=b.one_tile, num_warps=b.num_warps)
    return y, h, rstd


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float, casting: str
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm over the last dimension in one pass; returns ``(y, rstd)`` (see the spec)."""
    check_forward("rms_norm", x, weight, eps, casting)
    y, _, rstd = _forward(x, None, weight, eps, casting)
    return y, rstd


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float,
                       casting: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``h = x + residual`` and RMSNorm of ``h`` in one pass; returns ``(y, h, rstd)``."""
    check_forward("fused_add_rms_norm", x, weight, eps, casting, residual)
    y, h, rstd = _forward(x, residual, weight, eps, casting)
    assert h is not None
    return y, h, rstd


def _forward_tiling(n: int, m: int) -> dict[str, int]:
    """The forward's tiling for ``m`` rows of ``n`` elements.

    From 2048 columns, one row per program on at most 8 warps (4 below 4096 columns): the shared default's 16
    warps on 8192 columns and two rows per program on 2048 were the slow cases. Shorter rows keep the shared
    default (several rows per program). With at most 1024 rows, a grid of programs of a few warps is too small
    to keep enough loads in flight: there, up to 16 warps per program, and two rows per program from 4096 to
    8192 columns (within ``MAX_TILE`` elements). The sweeps that chose these are in ``docs/nn_ops.md``
    ("Speed").

    Args:
        n: the row length (elements).
        m: the number of rows.

    Returns:
        Keyword arguments of `anyaccel.ops.triton.launch.row_blocks` (empty: its defaults).
    """
    if n < 2048:
        return {}
    if m <= 1024:
        return {"rows_tile": min(2 * n, MAX_TILE) if n >= 4096 else n, "max_warps": 16}
    return {"rows_tile": 2048, "max_warps": 4 if n < 4096 else 8}


def _backward_tiling(n: int) -> dict[str, int]:
    """The backward's tiling for rows of ``n`` elements.

    Below 8192 columns, up to 16384 elements (several rows) on at most 8 warps per program: fewer, fuller
    programs walking the rows beat the shared default there. From 8192 columns the several-row tiling was
    slower, so the shared default (one row, up to 16 warps) stays. Measurements in ``docs/nn_ops.md``
    ("Speed").

    Args:
        n: the row length (elements).

    Returns:
        Keyword arguments of `anyaccel.ops.triton.launch.row_blocks` (empty: its defaults).
    """
    return {"rows_tile": 16384, "max_warps": 8} if n < 8192 else {}


def rms_norm_backward(grad_y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor,
                      grad_residual: torch.Tensor | None, casting: str, weight_grad: bool
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of x (plus ``grad_residual``) and of weight (empty unless ``weight_grad``), one pass over
    x and grad_y."""
    check_backward(grad_y, x, weight, rstd, grad_residual, casting)
    n = x.shape[-1]
    x2, dy2 = as_rows(x, n), as_rows(grad_y, n)
    dr2 = as_rows(grad_residual, n) if grad_residual is not None else dy2
    m = x2.shape[0]
    want_dw = bool(weight_grad and weight is not None)
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    if m == 0:
        dw = torch.zeros_like(weight) if want_dw and weight is not None else x.new_empty((0,))
        return dx, dw
    b = row_blocks(m, n, **_backward_tiling(n))
    programs = min(b.grid, multiprocessor_count(x.device))
    per_prog = -(-b.grid // programs)
    # the one-tile kernel stores every program's whole row of partials: no zeroing (an aten call, ~10 us of
    # host time); the looped kernel accumulates into it
    alloc = torch.empty if b.one_tile else torch.zeros
    partial = alloc((1, programs, n) if want_dw else (1,), dtype=torch.float32, device=x.device)
    with device_of(x):
        wrap(_rms_bwd_kernel)[(programs,)](
            dy2, x2, weight if weight is not None else x2, rstd, dr2, dx, partial, m, n, dy2.stride(0),
            dy2.stride(1), x2.stride(0), x2.stride(1), dr2.stride(0), dr2.stride(1), per_prog,
            HAS_W=weight is not None, HAS_DR=grad_residual is not None, WANT_DW=want_dw,
            LLAMA=casting == "llama", BLOCK_M=b.block_m, BLOCK_N=b.block_n, ONE_TILE=b.one_tile,
            num_warps=b.num_warps)
    if want_dw and weight is not None:
        (dw,) = sum_partials(partial, (weight.dtype,))  # sum and cast in one launch
    else:
        dw = x.new_empty((0,))
    return dx, dw


def load() -> Any:
    """The Triton implementation as ``anyaccel_triton_rms_norm::*`` torch ops (``triton_op``) with autograd.

    Side effects: imports Triton (at module import); registers the ops once per process.
    """
    from anyaccel.ops.nn.define import define
    from anyaccel.ops.nn.families.rms_norm import autograd
    from anyaccel.ops.nn.families.rms_norm.spec import SPEC

    return define(SPEC, "anyaccel_triton_rms_norm", {"rms_norm": rms_norm, "fused_add_rms_norm": fused_add_rms_norm,
                                                     "rms_norm_backward": rms_norm_backward},
                  triton=True, autograd=autograd.formulas)
