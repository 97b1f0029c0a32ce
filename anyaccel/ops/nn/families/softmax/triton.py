"""Triton implementation of the softmax family (math in `anyaccel.ops.nn.families.softmax.spec`).

Rows up to the tile limit are reduced from registers (one read, one write); wider rows are walked twice
with the online max/sum recurrence. A reduction over another dimension than the last moves it last first
(one copy in, one out: FlagGems's inner-dimension kernels avoid them; the override mode leaves such calls
to aten). Importing this module imports Triton.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from anyaccel.ops.nn.families.softmax.fakes import check
from anyaccel.ops.nn.rows import as_rows
from anyaccel.ops.triton.launch import device_of, row_blocks, wrap


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


def _last(t: torch.Tensor, d: int) -> torch.Tensor:
    """``t`` with dimension ``d`` last (a view; the kernels take any strides of the 2-D row view)."""
    if t.dim() == 0:
        return t.reshape(1)
    return t if d == t.dim() - 1 else t.movedim(d, -1)


def _restore(out: torch.Tensor, like: torch.Tensor, d: int) -> torch.Tensor:
    """The kernel's output (``like`` with dimension ``d`` moved last, contiguous) back in ``like``'s shape,
    contiguous."""
    if like.dim() == 0:
        return out.reshape(())
    return out if d == like.dim() - 1 else out.movedim(-1, d).contiguous()


def _forward(op: str, x: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    d = check(op, x, dim)
    xl = _last(x, d)
    n = xl.shape[-1]
    y = torch.empty_like(xl, memory_format=torch.contiguous_format)
    if xl.numel() > 0:
        x2 = as_rows(xl, n)
        m = x2.shape[0]
        b = row_blocks(m, n)
        with device_of(x):
            wrap(_softmax_fwd_kernel)[(b.grid,)](x2, y, m, n, x2.stride(0), x2.stride(1), LOG=log,
                                                 BLOCK_M=b.block_m, BLOCK_N=b.block_n, ONE_TILE=b.one_tile,
                                                 num_warps=b.num_warps)
    return _restore(y, x, d)


def _backward(op: str, grad_y: torch.Tensor, y: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    d = check(op, y, dim, grad_y)
    yl, gl = _last(y, d), _last(grad_y, d)
    n = yl.shape[-1]
    dx = torch.empty_like(yl, memory_format=torch.contiguous_format)
    if yl.numel() > 0:
        y2, g2 = as_rows(yl, n), as_rows(gl, n)
        m = y2.shape[0]
        b = row_blocks(m, n)
        with device_of(y):
            wrap(_softmax_bwd_kernel)[(b.grid,)](g2, y2, dx, m, n, g2.stride(0), g2.stride(1), y2.stride(0),
                                                 y2.stride(1), LOG=log, BLOCK_M=b.block_m, BLOCK_N=b.block_n,
                                                 ONE_TILE=b.one_tile, num_warps=b.num_warps)
    return _restore(dx, y, d)


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
