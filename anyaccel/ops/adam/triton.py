"""Triton implementation of the fused multi-tensor Adam / AdamW step (one launch per step).

Same op, same signature and same math as the CUDA kernel (``anyaccel/csrc/adam/fused_adam_cuda.cu``):
see that file for the update rule and its sources (torch.optim.AdamW, DeepSpeed FusedAdam, Kingma & Ba
2015, Loshchilov & Hutter 2019). Triton runs on CUDA and Intel XPU devices.

Importing this module imports Triton; import it only where Triton is known to be installed (the
implementation loader, :mod:`anyaccel.ops.dispatch`, does so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from anyaccel.ops.triton import multi_tensor
from anyaccel.ops.triton.launch import device_of

#: Elements per Triton program and warps per program (16 elements, four 16-byte fp32 accesses per
#: thread and array).
BLOCK = 4096
NUM_WARPS = 8


@triton.jit
def _adam_update(p_ptr, g_ptr, m_ptr, v_ptr, c_ptr, offs, n, decay, wd, beta1, beta2, omb1, omb2, eps, step_size,
                 inv_bc2_sqrt, ADAMW: tl.constexpr, HAS_COPY: tl.constexpr, MASKED: tl.constexpr):
    if MASKED:
        mask = offs < n
        p = tl.load(p_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        m = tl.load(m_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    else:
        p = tl.load(p_ptr + offs, eviction_policy="evict_first").to(tl.float32)
        g = tl.load(g_ptr + offs, eviction_policy="evict_first").to(tl.float32)
        m = tl.load(m_ptr + offs, eviction_policy="evict_first").to(tl.float32)
        v = tl.load(v_ptr + offs, eviction_policy="evict_first").to(tl.float32)
    if ADAMW:
        p = p * decay
    else:
        g = g + wd * p
    m = beta1 * m + omb1 * g
    v = beta2 * v + omb2 * g * g
    denom = tl.sqrt_rn(v) * inv_bc2_sqrt + eps
    p = p - step_size * tl.div_rn(m, denom)
    if MASKED:
        tl.store(p_ptr + offs, p.to(p_ptr.dtype.element_ty), mask=mask)
        tl.store(m_ptr + offs, m.to(m_ptr.dtype.element_ty), mask=mask)
        tl.store(v_ptr + offs, v.to(v_ptr.dtype.element_ty), mask=mask)
        if HAS_COPY:
            tl.store(c_ptr + offs, p.to(c_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(p_ptr + offs, p.to(p_ptr.dtype.element_ty), eviction_policy="evict_first")
        tl.store(m_ptr + offs, m.to(m_ptr.dtype.element_ty), eviction_policy="evict_first")
        tl.store(v_ptr + offs, v.to(v_ptr.dtype.element_ty), eviction_policy="evict_first")
        if HAS_COPY:
            tl.store(c_ptr + offs, p.to(c_ptr.dtype.element_ty), eviction_policy="evict_first")


@triton.jit
def _adam_kernel(p_base, g_base, m_base, v_base, c_base, rows_ptr, chunks_ptr, decay, wd, beta1, beta2, omb1, omb2, eps,
                 step_size, inv_bc2_sqrt, ADAMW: tl.constexpr, HAS_COPY: tl.constexpr, ALIGNED: tl.constexpr,
                 BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    t = tl.load(chunks_ptr + 2 * pid)
    start = tl.load(chunks_ptr + 2 * pid + 1) * BLOCK
    row = rows_ptr + 6 * t
    dp = tl.load(row + 0)
    dg = tl.load(row + 1)
    dm = tl.load(row + 2)
    dv = tl.load(row + 3)
    dc = tl.load(row + 4)
    n = tl.load(row + 5)
    if ALIGNED:
        dp = tl.multiple_of(dp, 8)
        dg = tl.multiple_of(dg, 8)
        dm = tl.multiple_of(dm, 8)
        dv = tl.multiple_of(dv, 8)
        dc = tl.multiple_of(dc, 8)
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n:
        _adam_update(p_base + dp, g_base + dg, m_base + dm, v_base + dv, c_base + dc, offs, n, decay, wd, beta1,
                     beta2, omb1, omb2, eps, step_size, inv_bc2_sqrt, ADAMW, HAS_COPY, False)
    else:
        _adam_update(p_base + dp, g_base + dg, m_base + dm, v_base + dv, c_base + dc, offs, n, decay, wd, beta1,
                     beta2, omb1, omb2, eps, step_size, inv_bc2_sqrt, ADAMW, HAS_COPY, True)


def adam_step(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    exp_avgs: Sequence[torch.Tensor],
    exp_avg_sqs: Sequence[torch.Tensor],
    model_copies: Sequence[torch.Tensor],
    step: int,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    bias_correction: bool,
    adamw_mode: bool,
) -> None:
    """One Adam/AdamW step over many tensors in place, in one Triton launch.

    Args:
        params: parameters (fp32, bf16 or fp16; or fp32 master weights when ``model_copies`` is given),
            contiguous, one dtype, one CUDA/XPU device. Updated in place.
        grads: one gradient per parameter, same element count; the params' dtype (or bf16/fp16 matching
            the model copies in master-weight mode).
        exp_avgs: first moments, one per parameter, float32 or the params' 16-bit dtype; updated in place.
        exp_avg_sqs: second moments, like ``exp_avgs``; updated in place.
        model_copies: empty, or one bf16/fp16 tensor per fp32 parameter, overwritten with the updated
            parameter rounded to nearest.
        step: the step count including this one (>= 1), for bias correction.
        lr: learning rate. beta1, beta2: moment decay rates in [0, 1). eps: added to the denominator.
        weight_decay: decoupled (AdamW) when ``adamw_mode`` else added to the gradient (L2).
        bias_correction: divide the moments by ``1 - beta**step``.
        adamw_mode: decoupled weight decay.

    Raises:
        RuntimeError: a scalar out of range or a bad list entry (the op spec's rules, as the CUDA kernel).

    Side effects: compiles the Triton kernel on first use per dtype combination (cached by Triton).
    """
    from anyaccel.ops.adam.spec import SPEC

    launches = multi_tensor.prepare(
        SPEC.function("adam_step"), SPEC,
        dict(step=step, lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay),
        params, grads, {"exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs}, model_copies)
    bc1 = 1.0 - beta1**step if bias_correction else 1.0
    bc2 = 1.0 - beta2**step if bias_correction else 1.0
    for lists in launches:
        has_copy = len(lists) == 5
        table = multi_tensor.work_table(lists, BLOCK)
        p, g, m, v = (lst[0] for lst in lists[:4])
        with device_of(p):
            _adam_kernel[(table.num_chunks,)](
                p, g, m, v, lists[4][0] if has_copy else p, table.rows, table.chunks,
                1.0 - lr * weight_decay, weight_decay, beta1, beta2, 1.0 - beta1, 1.0 - beta2, eps, lr / bc1,
                1.0 / math.sqrt(bc2), ADAMW=adamw_mode, HAS_COPY=has_copy, ALIGNED=table.aligned, BLOCK=BLOCK,
                num_warps=NUM_WARPS,
            )


def load() -> Any:
    """The Triton implementation as a torch op, ``anyaccel_triton_adam::adam_step`` (the spec's schema and
    fake), registered for CUDA and XPU.

    Side effects: imports Triton (at module import) and registers the op once per process.
    """
    from anyaccel.ops import python_ops
    from anyaccel.ops.adam.spec import SPEC

    return python_ops.define(SPEC, "anyaccel_triton_adam", {"adam_step": adam_step}, ("cuda", "xpu"),
                             ("cuda", "xpu"))
