"""Triton implementation of the LayerNorm family (math in `anyaccel.ops.nn.families.layer_norm.spec`).

Same structure as the RMSNorm kernels (`anyaccel.ops.nn.families.rms_norm.triton`): whole rows in
registers up to the tile limit (exact two-pass variance from registers), tiled walks beyond, weight and
bias gradients reduced through per-program fp32 partial rows. Importing this module imports Triton.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from anyaccel.ops.nn.families.layer_norm.fakes import check_backward, check_forward
from anyaccel.ops.nn.rows import as_rows
from anyaccel.ops.triton.launch import device_of, multiprocessor_count, row_blocks, wrap
from anyaccel.ops.triton.partials import sum_partials


@triton.jit
def _ln_fwd_kernel(X, W, B, Y, MEAN, RSTD, M, N, sxm, sxn, eps, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONE_TILE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    if ONE_TILE:
        cols = tl.arange(0, BLOCK_N)
        cmask = cols < N
        mask = rmask[:, None] & cmask[None, :]
        x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=1) / N
        xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / N + eps)
        y = xc * rstd[:, None]
        if HAS_W:
            y = y * tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
        if HAS_B:
            y = y + tl.load(B + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
        tl.store(Y + rows[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = rmask[:, None] & (cols < N)[None, :]
            acc += tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=1) / N
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = rmask[:, None] & (cols < N)[None, :]
            x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
            xc = tl.where(mask, x - mean[:, None], 0.0)
            acc += xc * xc
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / N + eps)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            cmask = cols < N
            mask = rmask[:, None] & cmask[None, :]
            x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
            y = (x - mean[:, None]) * rstd[:, None]
            if HAS_W:
                y = y * tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
            if HAS_B:
                y = y + tl.load(B + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
            tl.store(Y + rows[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(MEAN + rows, mean, mask=rmask)
    tl.store(RSTD + rows, rstd, mask=rmask)


@triton.jit
def _ln_bwd_kernel(DY, X, W, MEAN, RSTD, DX, DWP, DBP, M, N, sdym, sdyn, sxm, sxn, blocks_per_prog,
                   HAS_W: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, ONE_TILE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    if ONE_TILE:
        cols = tl.arange(0, BLOCK_N)
        cmask = cols < N
        if HAS_W:
            w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
        dw_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        db_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for i in range(0, blocks_per_prog):
            rows = (pid + i * nprog) * BLOCK_M + tl.arange(0, BLOCK_M)
            rmask = rows < M
            mask = rmask[:, None] & cmask[None, :]
            x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + rows[:, None] * sdym + cols[None, :] * sdyn, mask=mask, other=0.0).to(tl.float32)
            mean = tl.load(MEAN + rows, mask=rmask, other=0.0)
            rstd = tl.load(RSTD + rows, mask=rmask, other=0.0)
            n = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
            if HAS_W:
                dn = dy * w[None, :]
            else:
                dn = dy
            c1 = tl.sum(dn, axis=1) / N
            c2 = tl.sum(dn * n, axis=1) / N
            dx = rstd[:, None] * (dn - c1[:, None] - n * c2[:, None])
            tl.store(DX + rows[:, None] * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
            if WANT_DW:
                dw_acc += tl.sum(dy * n, axis=0)
            if WANT_DB:
                db_acc += tl.sum(dy, axis=0)
        if WANT_DW:
            tl.store(DWP + pid * N + cols, dw_acc, mask=cmask)
        if WANT_DB:
            tl.store(DBP + pid * N + cols, db_acc, mask=cmask)
    else:
        for i in range(0, blocks_per_prog):
            rows = (pid + i * nprog) * BLOCK_M + tl.arange(0, BLOCK_M)
            rmask = rows < M
            mean = tl.load(MEAN + rows, mask=rmask, other=0.0)
            rstd = tl.load(RSTD + rows, mask=rmask, other=0.0)
            a1 = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            a2 = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for start in range(0, N, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                cmask = cols < N
                mask = rmask[:, None] & cmask[None, :]
                x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(DY + rows[:, None] * sdym + cols[None, :] * sdyn, mask=mask, other=0.0).to(tl.float32)
                if HAS_W:
                    dy = dy * tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
                n = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
                a1 += dy
                a2 += dy * n
            c1 = tl.sum(a1, axis=1) / N
            c2 = tl.sum(a2, axis=1) / N
            for start in range(0, N, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                cmask = cols < N
                mask = rmask[:, None] & cmask[None, :]
                x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(DY + rows[:, None] * sdym + cols[None, :] * sdyn, mask=mask, other=0.0).to(tl.float32)
                n = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
                if HAS_W:
                    dn = dy * tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
                else:
                    dn = dy
                dx = rstd[:, None] * (dn - c1[:, None] - n * c2[:, None])
                tl.store(DX + rows[:, None] * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
                if WANT_DW:
                    part = tl.load(DWP + pid * N + cols, mask=cmask, other=0.0)
                    tl.store(DWP + pid * N + cols, part + tl.sum(dy * n, axis=0), mask=cmask)
                if WANT_DB:
                    part = tl.load(DBP + pid * N + cols, mask=cmask, other=0.0)
                    tl.store(DBP + pid * N + cols, part + tl.sum(dy, axis=0), mask=cmask)


#: The forward's tiling: about 8192 elements and at most 8 warps per program. In a sweep of tile sizes it was
#: up to 5% faster than the shared default (4096 elements, 16 warps from 8192 columns) at large shapes and
#: level with it at small ones (``docs/nn_ops.md``, "Speed").
_FORWARD_TILING = {"rows_tile": 8192, "max_warps": 8}
#: The backward's tiling: up to 16384 elements (several rows) and at most 8 warps per program, one program
#: per multiprocessor walking the rows. In a sweep it beat the shared default (4096 elements, up to 16 warps)
#: at every shape, halving the kernel's time at some, and aten's ``native_layer_norm_backward`` too; two
#: programs per multiprocessor won at fewer shapes than they lost (``docs/nn_ops.md``, "Speed").
_BACKWARD_TILING = {"rows_tile": 16384, "max_warps": 8}


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LayerNorm over the last dimension; returns ``(y, mean, rstd)``."""
    check_forward("layer_norm", x, weight, bias, eps)
    n = x.shape[-1]
    x2 = as_rows(x, n)
    m = x2.shape[0]
    # empty_like: 1 us of host time against 2-3 for torch.empty(shape, dtype=, device=)
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    mean = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    rstd = torch.empty_like(mean)
    if m == 0:
        return y, mean, rstd
    b = row_blocks(m, n, **_FORWARD_TILING)
    with device_of(x):
        wrap(_ln_fwd_kernel)[(b.grid,)](
            x2, weight if weight is not None else x2, bias if bias is not None else x2, y, mean, rstd, m, n,
            x2.stride(0), x2.stride(1), eps, HAS_W=weight is not None, HAS_B=bias is not None, BLOCK_M=b.block_m,
            BLOCK_N=b.block_n, ONE_TILE=b.one_tile, num_warps=b.num_warps)
    return y, mean, rstd


def layer_norm_backward(grad_y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
                        rstd: torch.Tensor, weight_grad: bool, bias_grad: bool
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of x, weight and bias (the last two empty unless asked for)."""
    check_backward(grad_y, x, weight, mean, rstd)
    n = x.shape[-1]
    x2, dy2 = as_rows(x, n), as_rows(grad_y, n)
    m = x2.shape[0]
    pdtype = weight.dtype if weight is not None else x.dtype
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    b = row_blocks(max(m, 1), n, **_BACKWARD_TILING)
    programs = min(b.grid, multiprocessor_count(x.device))
    per_prog = -(-b.grid // programs)
    # per-program partial sums of dw and db in one buffer (one allocation; one launch sums and casts both). In
    # the one-tile kernel every program stores its whole row of partials, so the buffer needs no zeroing; the
    # looped kernel accumulates into it.
    want = int(weight_grad) + int(bias_grad)
    alloc = torch.empty if b.one_tile and m > 0 else torch.zeros
    parts = alloc((want, programs, n) if want else (1,), dtype=torch.float32, device=x.device)
    dwp = parts[0] if weight_grad else parts
    dbp = parts[want - 1] if bias_grad else parts
    if m > 0:
        with device_of(x):
            wrap(_ln_bwd_kernel)[(programs,)](
                dy2, x2, weight if weight is not None else x2, mean, rstd, dx, dwp, dbp, m, n, dy2.stride(0),
                dy2.stride(1), x2.stride(0), x2.stride(1), per_prog, HAS_W=weight is not None, WANT_DW=weight_grad,
                WANT_DB=bias_grad, BLOCK_M=b.block_m, BLOCK_N=b.block_n, ONE_TILE=b.one_tile,
                num_warps=b.num_warps)
    # the partials' column sums, cast, in one launch (two separate tensors: a torch op's outputs must not alias)
    sums = sum_partials(parts, (pdtype,) * want) if want else ()
    dw = sums[0] if weight_grad else x.new_empty((0,), dtype=pdtype)
    db = sums[want - 1] if bias_grad else x.new_empty((0,), dtype=pdtype)
    return dx, dw, db


def load() -> Any:
    """The Triton implementation as ``anyaccel_triton_layer_norm::*`` torch ops with autograd (imports Triton)."""
    from anyaccel.ops.nn.define import define
    from anyaccel.ops.nn.families.layer_norm import autograd
    from anyaccel.ops.nn.families.layer_norm.spec import SPEC

    return define(SPEC, "anyaccel_triton_layer_norm",
                  {"layer_norm": layer_norm, "layer_norm_backward": layer_norm_backward},
                  triton=True, autograd=autograd.formulas)
