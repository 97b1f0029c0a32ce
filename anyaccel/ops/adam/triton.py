"""Triton implementation of the fused multi-tensor Adam / AdamW step (one launch per step).

Same op, same signature and same math as the CUDA kernel (``anyaccel/csrc/adam/fused_adam_cuda.cu``):
see that file for the update rule and its sources (torch.optim.AdamW, DeepSpeed FusedAdam, Kingma & Ba
2015, Loshchilov & Hutter 2019). Triton runs on CUDA and Intel XPU devices.

Importing this module imports Triton; import it only where Triton is known to be installed (the
implementation loader, [`anyaccel.ops.dispatch`][anyaccel.ops.dispatch], does so).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from anyaccel._compat.triton_launch import fast
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
    for lists in launches:
        _launch(tuple(lst[0] for lst in lists), multi_tensor.work_table(lists, BLOCK), step, lr, beta1, beta2, eps,
                weight_decay, bias_correction, adamw_mode)


def _launch(bases: tuple[torch.Tensor, ...], table: multi_tensor.WorkTable, step: int, lr: float, beta1: float,
            beta2: float, eps: float, weight_decay: float, bias_correction: bool, adamw_mode: bool) -> None:
    """One launch of the kernel over one dtype combination's tensors.

    Args:
        bases: the first tensor of each list in kernel order (params, grads, exp_avgs, exp_avg_sqs,
            [model copies]); the others are reached through ``table``'s deltas.
        table: the launch's work table. The scalars: as `adam_step`, already validated.
    """
    bc1 = 1.0 - beta1**step if bias_correction else 1.0
    bc2 = 1.0 - beta2**step if bias_correction else 1.0
    has_copy = len(bases) == 5
    p, g, m, v = bases[:4]
    with device_of(p):
        fast(_adam_kernel)[(table.num_chunks,)](
            p, g, m, v, bases[4] if has_copy else p, table.rows, table.chunks,
            1.0 - lr * weight_decay, weight_decay, beta1, beta2, 1.0 - beta1, 1.0 - beta2, eps, lr / bc1,
            1.0 / math.sqrt(bc2), ADAMW=adamw_mode, HAS_COPY=has_copy, ALIGNED=table.aligned, BLOCK=BLOCK,
            num_warps=NUM_WARPS,
        )


def adam_plan(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], exp_avgs: Sequence[torch.Tensor],
              exp_avg_sqs: Sequence[torch.Tensor], model_copies: Sequence[torch.Tensor]) -> torch.Tensor:
    """Validates one dtype combination's lists once; the plan `adam_step_planned` launches from.

    Args:
        params, grads, exp_avgs, exp_avg_sqs, model_copies: as `adam_step`; their tensors with
            elements must share one dtype combination.

    Returns:
        An int64 tensor of ``4 + 9 * T`` words on the params' device (T: tensors with elements) whose
        header ``[magic, combo, T, chunks]`` has the CUDA plan's meaning
        (`anyaccel.ops.triton.multi_tensor.make_plan`).

    Raises:
        RuntimeError: a bad list entry (``adam_step``'s rules, named ``adam_plan``), or more or fewer than one
            dtype combination among the tensors with elements.

    Side effects: host-to-device copies of the tables; holds the storage of every tensor of the plan while
    the plan tensor lives (so a planned step never writes freed memory). A tensor given a new storage after
    planning (``p.data = ...``) would be updated in its old one, so build a new plan when a data pointer moves
    (anyaccel's optimizers do; a planned step raises when a list's first tensor moved).
    """
    from anyaccel.ops.adam.spec import SPEC

    return multi_tensor.make_plan(SPEC.function("adam_plan"), SPEC, BLOCK, params, grads,
                                  {"exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs}, model_copies)


def adam_step_planned(plan: torch.Tensor, combo: int, count: int, chunks: int, step: int, lr: float, beta1: float,
                      beta2: float, eps: float, weight_decay: float, bias_correction: bool, adamw_mode: bool) -> None:
    """`adam_step` over a plan's tensors, at a host cost independent of their number.

    Same kernel and arguments as the unplanned step, so the results are the same bit for bit.

    Args:
        plan: the tensor `adam_plan` returned. combo, count, chunks: its header words 1-3.
        step, lr, beta1, beta2, eps, weight_decay, bias_correction, adamw_mode: as `adam_step`.

    Raises:
        RuntimeError: a scalar out of range (the spec's ranges); ``plan`` not a live plan of this
            implementation, header words that are not the plan's, or a list's first tensor moved
            (`anyaccel.ops.triton.multi_tensor.planned`).

    Side effects: updates the plan's params, moments and model copies in place.
    """
    from anyaccel.ops import validation
    from anyaccel.ops.adam.spec import SPEC

    fn = SPEC.function("adam_step_planned")
    validation.check_scalars(fn, dict(combo=combo, count=count, chunks=chunks, step=step, lr=lr, beta1=beta1,
                                      beta2=beta2, eps=eps, weight_decay=weight_decay))
    record = multi_tensor.planned(fn.name, SPEC.family, plan, combo, count, chunks)
    _launch(record.bases, record.table, step, lr, beta1, beta2, eps, weight_decay, bias_correction, adamw_mode)


def load() -> Any:
    """The Triton implementation as torch ops, ``anyaccel_triton_adam::adam_step``, ``adam_plan`` and
    ``adam_step_planned`` (the spec's schemas and fakes), registered for CUDA and XPU.

    Side effects: imports Triton (at module import) and registers the op once per process.
    """
    from anyaccel.ops import python_ops
    from anyaccel.ops.adam.spec import SPEC

    impls: dict[str, Callable[..., Any]] = {
        "adam_step": adam_step, "adam_plan": adam_plan, "adam_step_planned": adam_step_planned}
    return python_ops.define_custom_ops(SPEC, "anyaccel_triton_adam", impls, ("cuda", "xpu"), ("cuda", "xpu"))
