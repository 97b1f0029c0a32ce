"""Triton implementation of the softmax family (math in `anyaccel.ops.nn.families.softmax.spec`).

Rows up to the tile limit are reduced from registers (one read, one write); wider rows are walked twice
with the online max/sum recurrence. A reduction over another dimension than the last sees the tensor as
``[outer, N, inner]`` and reduces along the strided middle axis in place (a program takes up to 64
neighbouring inner columns, so loads stay coalesced), without moving the dimension last: no copy in or out.
Any strides are read as they are when the dimensions before and after the reduced one each collapse into one
stride (contiguous tensors, slices, transposes of the reduced dimension with its neighbours); other layouts are
copied once. The output is contiguous, as aten's. Importing this module imports Triton.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from anyaccel.ops.nn.families.softmax.fakes import check
from anyaccel.ops.triton.launch import device_of, next_power_of_2, row_blocks, wrap


@triton.jit
def _softmax_fwd_kernel(X, Y, M, N, sxm, sxn, LOG: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        ONE_TILE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    if ONE_TILE:
        cols = tl.arange(0, BLOCK_N)
        mask = rmask[:, None] & (cols < N)[None, :]
        x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=-float("inf")).to(tl.float32)
        mx = tl.max(x, axis=1)
        mx = tl.where(rmask, mx, 0.0)
        e = tl.exp(x - mx[:, None])
        s = tl.where(rmask, tl.sum(e, axis=1), 1.0)
        if LOG:
            y = x - mx[:, None] - tl.log(s)[:, None]
        else:
            y = e / s[:, None]
        tl.store(Y + rows[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    else:
        mx = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
        s = tl.zeros([BLOCK_M], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = rmask[:, None] & (cols < N)[None, :]
            x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask,
                        other=-float("inf")).to(tl.float32)
            new = tl.maximum(mx, tl.max(x, axis=1))
            new = tl.where(rmask, new, 0.0)
            s = s * tl.exp(mx - new) + tl.sum(tl.exp(x - new[:, None]), axis=1)
            mx = new
        lse = mx + tl.log(tl.where(rmask, s, 1.0))
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = rmask[:, None] & (cols < N)[None, :]
            x = tl.load(X + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
            if LOG:
                y = x - lse[:, None]
            else:
                y = tl.exp(x - lse[:, None])
            tl.store(Y + rows[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_bwd_kernel(DY, Y, DX, M, N, sdym, sdyn, sym, syn, LOG: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, ONE_TILE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    if ONE_TILE:
        cols = tl.arange(0, BLOCK_N)
        mask = rmask[:, None] & (cols < N)[None, :]
        dy = tl.load(DY + rows[:, None] * sdym + cols[None, :] * sdyn, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(Y + rows[:, None] * sym + cols[None, :] * syn, mask=mask, other=0.0).to(tl.float32)
        if LOG:
            dx = dy - tl.exp(y) * tl.sum(dy, axis=1)[:, None]
        else:
            dx = y * (dy - tl.sum(dy * y, axis=1)[:, None])
        tl.store(DX + rows[:, None] * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = rmask[:, None] & (cols < N)[None, :]
            dy = tl.load(DY + rows[:, None] * sdym + cols[None, :] * sdyn, mask=mask, other=0.0).to(tl.float32)
            if LOG:
                acc += dy
            else:
                acc += dy * tl.load(Y + rows[:, None] * sym + cols[None, :] * syn, mask=mask,
                                    other=0.0).to(tl.float32)
        c = tl.sum(acc, axis=1)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = rmask[:, None] & (cols < N)[None, :]
            dy = tl.load(DY + rows[:, None] * sdym + cols[None, :] * sdyn, mask=mask, other=0.0).to(tl.float32)
            y = tl.load(Y + rows[:, None] * sym + cols[None, :] * syn, mask=mask, other=0.0).to(tl.float32)
            if LOG:
                dx = dy - tl.exp(y) * c[:, None]
            else:
                dx = y * (dy - c[:, None])
            tl.store(DX + rows[:, None] * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_inner_fwd_kernel(X, Y, N, INNER, n_iblocks, sxo, sxn, sxi, LOG: tl.constexpr, BLOCK_N: tl.constexpr,
                              BLOCK_I: tl.constexpr, ONE_TILE: tl.constexpr):
    # x seen as [outer, N, inner], reduced along N: a program takes BLOCK_I neighbouring columns of one outer
    # index (unit-stride loads along inner for the usual layouts) and walks N; y is contiguous [outer, N, inner]
    pid = tl.program_id(0).to(tl.int64)
    o = pid // n_iblocks
    icols = (pid % n_iblocks) * BLOCK_I + tl.arange(0, BLOCK_I)
    imask = icols < INNER
    xb = X + o * sxo + icols[None, :] * sxi
    yb = Y + o * N * INNER + icols[None, :]
    if ONE_TILE:
        rows = tl.arange(0, BLOCK_N)
        mask = (rows < N)[:, None] & imask[None, :]
        x = tl.load(xb + rows[:, None] * sxn, mask=mask, other=-float("inf")).to(tl.float32)
        mx = tl.where(imask, tl.max(x, axis=0), 0.0)
        e = tl.exp(x - mx[None, :])
        s = tl.where(imask, tl.sum(e, axis=0), 1.0)
        if LOG:
            y = x - mx[None, :] - tl.log(s)[None, :]
        else:
            y = e / s[None, :]
        tl.store(yb + rows[:, None] * INNER, y.to(Y.dtype.element_ty), mask=mask)
    else:
        mx = tl.full([BLOCK_I], -float("inf"), dtype=tl.float32)
        s = tl.zeros([BLOCK_I], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            rows = start + tl.arange(0, BLOCK_N)
            mask = (rows < N)[:, None] & imask[None, :]
            x = tl.load(xb + rows[:, None] * sxn, mask=mask, other=-float("inf")).to(tl.float32)
            new = tl.where(imask, tl.maximum(mx, tl.max(x, axis=0)), 0.0)
            s = s * tl.exp(mx - new) + tl.sum(tl.exp(x - new[None, :]), axis=0)
            mx = new
        lse = mx + tl.log(tl.where(imask, s, 1.0))
        for start in range(0, N, BLOCK_N):
            rows = start + tl.arange(0, BLOCK_N)
            mask = (rows < N)[:, None] & imask[None, :]
            x = tl.load(xb + rows[:, None] * sxn, mask=mask, other=0.0).to(tl.float32)
            if LOG:
                y = x - lse[None, :]
            else:
                y = tl.exp(x - lse[None, :])
            tl.store(yb + rows[:, None] * INNER, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_inner_bwd_kernel(DY, Y, DX, N, INNER, n_iblocks, sdyo, sdyn, sdyi, syo, syn, syi, LOG: tl.constexpr,
                              BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr, ONE_TILE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    o = pid // n_iblocks
    icols = (pid % n_iblocks) * BLOCK_I + tl.arange(0, BLOCK_I)
    imask = icols < INNER
    dyb = DY + o * sdyo + icols[None, :] * sdyi
    yb = Y + o * syo + icols[None, :] * syi
    dxb = DX + o * N * INNER + icols[None, :]
    if ONE_TILE:
        rows = tl.arange(0, BLOCK_N)
        mask = (rows < N)[:, None] & imask[None, :]
        dy = tl.load(dyb + rows[:, None] * sdyn, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(yb + rows[:, None] * syn, mask=mask, other=0.0).to(tl.float32)
        if LOG:
            dx = dy - tl.exp(y) * tl.sum(dy, axis=0)[None, :]
        else:
            dx = y * (dy - tl.sum(dy * y, axis=0)[None, :])
        tl.store(dxb + rows[:, None] * INNER, dx.to(DX.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK_N, BLOCK_I], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            rows = start + tl.arange(0, BLOCK_N)
            mask = (rows < N)[:, None] & imask[None, :]
            dy = tl.load(dyb + rows[:, None] * sdyn, mask=mask, other=0.0).to(tl.float32)
            if LOG:
                acc += dy
            else:
                acc += dy * tl.load(yb + rows[:, None] * syn, mask=mask, other=0.0).to(tl.float32)
        c = tl.sum(acc, axis=0)
        for start in range(0, N, BLOCK_N):
            rows = start + tl.arange(0, BLOCK_N)
            mask = (rows < N)[:, None] & imask[None, :]
            dy = tl.load(dyb + rows[:, None] * sdyn, mask=mask, other=0.0).to(tl.float32)
            y = tl.load(yb + rows[:, None] * syn, mask=mask, other=0.0).to(tl.float32)
            if LOG:
                dx = dy - tl.exp(y) * c[None, :]
            else:
                dx = y * (dy - c[None, :])
            tl.store(dxb + rows[:, None] * INNER, dx.to(DX.dtype.element_ty), mask=mask)


#: Elements of one register tile of the inner-dimension kernels.
INNER_TILE = 4096
#: Most neighbouring inner columns per program.
INNER_COLS = 64


def _inner_blocks(n: int, inner: int) -> tuple[int, int, bool, int]:
    """``(BLOCK_N, BLOCK_I, ONE_TILE, num_warps)`` for a reduction of ``n`` elements over ``inner`` columns."""
    bi = min(INNER_COLS, next_power_of_2(inner))
    bn_all = next_power_of_2(n)
    if bn_all * bi <= INNER_TILE:
        bn, one = bn_all, True
    else:
        bn, one = max(1, INNER_TILE // bi), False
    elems = bn * bi
    return bn, bi, one, 8 if elems >= 4096 else 4 if elems >= 1024 else 2


def _as_3d(t: torch.Tensor, d: int) -> torch.Tensor:
    """``t`` seen as ``[outer, t.shape[d], inner]``: a view with any strides when the dimensions before and after
    ``d`` each collapse (contiguous tensors, slices, transposes that keep them apart), else a contiguous copy."""
    shape = t.shape if t.dim() else (1,)
    outer = 1
    for s in shape[:d]:
        outer *= int(s)
    inner = 1
    for s in shape[d + 1:]:
        inner *= int(s)
    return t.reshape(outer, int(shape[d]), inner)


def _forward(op: str, x: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    d = check(op, x, dim)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # contiguous, as aten's
    if x.numel() == 0:
        return y
    x3 = _as_3d(x, d)
    outer, n, inner = x3.shape
    with device_of(x):
        if inner == 1:  # the reduced dimension is innermost: the row kernel
            x2 = x3[:, :, 0]
            b = row_blocks(outer, n)
            wrap(_softmax_fwd_kernel)[(b.grid,)](x2, y, outer, n, x2.stride(0), x2.stride(1), LOG=log,
                                                 BLOCK_M=b.block_m, BLOCK_N=b.block_n, ONE_TILE=b.one_tile,
                                                 num_warps=b.num_warps)
        else:
            bn, bi, one, warps = _inner_blocks(n, inner)
            nib = -(-inner // bi)
            wrap(_softmax_inner_fwd_kernel)[(outer * nib,)](
                x3, y, n, inner, nib, x3.stride(0), x3.stride(1), x3.stride(2), LOG=log, BLOCK_N=bn, BLOCK_I=bi,
                ONE_TILE=one, num_warps=warps)
    return y


def _backward(op: str, grad_y: torch.Tensor, y: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    d = check(op, y, dim, grad_y)
    dx = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    if y.numel() == 0:
        return dx
    y3, g3 = _as_3d(y, d), _as_3d(grad_y, d)
    outer, n, inner = y3.shape
    with device_of(y):
        if inner == 1:
            y2, g2 = y3[:, :, 0], g3[:, :, 0]
            b = row_blocks(outer, n)
            wrap(_softmax_bwd_kernel)[(b.grid,)](g2, y2, dx, outer, n, g2.stride(0), g2.stride(1), y2.stride(0),
                                                 y2.stride(1), LOG=log, BLOCK_M=b.block_m, BLOCK_N=b.block_n,
                                                 ONE_TILE=b.one_tile, num_warps=b.num_warps)
        else:
            bn, bi, one, warps = _inner_blocks(n, inner)
            nib = -(-inner // bi)
            wrap(_softmax_inner_bwd_kernel)[(outer * nib,)](
                g3, y3, dx, n, inner, nib, g3.stride(0), g3.stride(1), g3.stride(2), y3.stride(0), y3.stride(1),
                y3.stride(2), LOG=log, BLOCK_N=bn, BLOCK_I=bi, ONE_TILE=one, num_warps=warps)
    return dx


def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax along ``dim``."""
    return _forward("softmax", x, dim, False)


def log_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Log-softmax along ``dim``."""
    return _forward("log_softmax", x, dim, True)


def softmax_backward(grad_y: torch.Tensor, y: torch.Tensor, dim: int) -> torch.Tensor:
    """Gradient of x from softmax's output."""
    return _backward("softmax_backward", grad_y, y, dim, False)


def log_softmax_backward(grad_y: torch.Tensor, y: torch.Tensor, dim: int) -> torch.Tensor:
    """Gradient of x from log_softmax's output."""
    return _backward("log_softmax_backward", grad_y, y, dim, True)


def load() -> Any:
    """The Triton implementation as ``anyaccel_triton_softmax::*`` torch ops with autograd (imports Triton)."""
    from anyaccel.ops.nn.define import define
    from anyaccel.ops.nn.families.softmax import autograd
    from anyaccel.ops.nn.families.softmax.spec import SPEC

    return define(SPEC, "anyaccel_triton_softmax",
                  {"softmax": softmax, "log_softmax": log_softmax, "softmax_backward": softmax_backward,
                   "log_softmax_backward": log_softmax_backward}, triton=True, autograd=autograd.formulas)
