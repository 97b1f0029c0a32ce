"""Triton implementation of the fused multi-tensor Lion step (one launch per step).

Same op, signature and math as the CUDA kernel (``anyaccel/csrc/lion/fused_lion_cuda.cu``; Chen et al.
2023, "Symbolic Discovery of Optimization Algorithms", Algorithm 2). Importing this module imports Triton.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from anyaccel._compat.triton_launch import fast
from anyaccel.ops.triton import multi_tensor
from anyaccel.ops.triton.launch import device_of

BLOCK = 4096
NUM_WARPS = 8


@triton.jit
def _lion_update(p_ptr, g_ptr, m_ptr, c_ptr, offs, n, decay, lr, beta1, beta2, omb1, omb2, HAS_COPY: tl.constexpr,
                 MASKED: tl.constexpr):
    if MASKED:
        mask = offs < n
        p = tl.load(p_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        m = tl.load(m_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    else:
        p = tl.load(p_ptr + offs, eviction_policy="evict_first").to(tl.float32)
        g = tl.load(g_ptr + offs, eviction_policy="evict_first").to(tl.float32)
        m = tl.load(m_ptr + offs, eviction_policy="evict_first").to(tl.float32)
    c = beta1 * m + omb1 * g
    sgn = tl.where(c > 0, 1.0, tl.where(c < 0, -1.0, 0.0))
    p = p * decay - lr * sgn
    m = beta2 * m + omb2 * g
    if MASKED:
        tl.store(p_ptr + offs, p.to(p_ptr.dtype.element_ty), mask=mask)
        tl.store(m_ptr + offs, m.to(m_ptr.dtype.element_ty), mask=mask)
        if HAS_COPY:
            tl.store(c_ptr + offs, p.to(c_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(p_ptr + offs, p.to(p_ptr.dtype.element_ty), eviction_policy="evict_first")
        tl.store(m_ptr + offs, m.to(m_ptr.dtype.element_ty), eviction_policy="evict_first")
        if HAS_COPY:
            tl.store(c_ptr + offs, p.to(c_ptr.dtype.element_ty), eviction_policy="evict_first")


@triton.jit
def _lion_kernel(p_base, g_base, m_base, c_base, rows_ptr, chunks_ptr, decay, lr, beta1, beta2, omb1, omb2,
                 HAS_COPY: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    t = tl.load(chunks_ptr + 2 * pid)
    start = tl.load(chunks_ptr + 2 * pid + 1) * BLOCK
    row = rows_ptr + 6 * t
    dp = tl.load(row + 0)
    dg = tl.load(row + 1)
    dm = tl.load(row + 2)
    dc = tl.load(row + 3)
    n = tl.load(row + 5)
    if ALIGNED:
        dp = tl.multiple_of(dp, 8)
        dg = tl.multiple_of(dg, 8)
        dm = tl.multiple_of(dm, 8)
        dc = tl.multiple_of(dc, 8)
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n:
        _lion_update(p_base + dp, g_base + dg, m_base + dm, c_base + dc, offs, n, decay, lr, beta1, beta2, omb1, omb2,
                     HAS_COPY, False)
    else:
        _lion_update(p_base + dp, g_base + dg, m_base + dm, c_base + dc, offs, n, decay, lr, beta1, beta2, omb1, omb2,
                     HAS_COPY, True)


def lion_step(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    exp_avgs: Sequence[torch.Tensor],
    model_copies: Sequence[torch.Tensor],
    lr: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
) -> None:
    """One Lion step over many tensors in place, in one Triton launch.

    Args:
        params: parameters (fp32/bf16/fp16, or fp32 master weights with ``model_copies``), contiguous,
            one dtype, one device. Updated in place.
        grads: one gradient per parameter, same element count (dtype rules as for ``adam_step``).
        exp_avgs: momentum, one per parameter, float32 or the params' 16-bit dtype; updated in place.
        model_copies: empty, or one bf16/fp16 tensor per fp32 parameter, overwritten with the update.
        lr: learning rate. beta1: interpolation for the update sign; beta2: momentum decay; both in
            [0, 1]. weight_decay: decoupled weight decay.

    Raises:
        RuntimeError: a scalar out of range or a bad list entry (the op spec's rules, as the CUDA kernel).

    Side effects: compiles the Triton kernel on first use per dtype combination.
    """
    from anyaccel.ops.lion.spec import SPEC

    launches = multi_tensor.prepare(SPEC.function("lion_step"), SPEC,
                                    dict(lr=lr, beta1=beta1, beta2=beta2, weight_decay=weight_decay),
                                    params, grads, {"exp_avgs": exp_avgs}, model_copies)
    for lists in launches:
        _launch(tuple(lst[0] for lst in lists), multi_tensor.work_table(lists, BLOCK), lr, beta1, beta2,
                weight_decay)


def _launch(bases: tuple[torch.Tensor, ...], table: multi_tensor.WorkTable, lr: float, beta1: float, beta2: float,
            weight_decay: float) -> None:
    """One launch of the kernel over one dtype combination's tensors.

    Args:
        bases: the first tensor of each list in kernel order (params, grads, exp_avgs, [model copies]); the
            others are reached through ``table``'s deltas.
        table: the launch's work table. The scalars: as `lion_step`, already validated.
    """
    has_copy = len(bases) == 4
    p, g, m = bases[:3]
    with device_of(p):
        fast(_lion_kernel)[(table.num_chunks,)](
            p, g, m, bases[3] if has_copy else p, table.rows, table.chunks, 1.0 - lr * weight_decay, lr,
            beta1, beta2, 1.0 - beta1, 1.0 - beta2, HAS_COPY=has_copy, ALIGNED=table.aligned, BLOCK=BLOCK,
            num_warps=NUM_WARPS,
        )


def lion_plan(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], exp_avgs: Sequence[torch.Tensor],
              model_copies: Sequence[torch.Tensor]) -> torch.Tensor:
    """Validates one dtype combination's lists once; the plan `lion_step_planned` launches from.

    Args:
        params, grads, exp_avgs, model_copies: as `lion_step`; their tensors with elements must
            share one dtype combination.

    Returns:
        An int64 tensor of ``4 + 9 * T`` words on the params' device (T: tensors with elements) whose
        header ``[magic, combo, T, chunks]`` has the CUDA plan's meaning
        (`anyaccel.ops.triton.multi_tensor.make_plan`).

    Raises:
        RuntimeError: a bad list entry (``lion_step``'s rules, named ``lion_plan``), or more or fewer than one
            dtype combination among the tensors with elements.

    Side effects: host-to-device copies of the tables; holds the storage of every tensor of the plan while
    the plan tensor lives (so a planned step never writes freed memory). A tensor given a new storage after
    planning (``p.data = ...``) would be updated in its old one, so build a new plan when a data pointer moves
    (anyaccel's optimizers do; a planned step raises when a list's first tensor moved).
    """
    from anyaccel.ops.lion.spec import SPEC

    return multi_tensor.make_plan(SPEC.function("lion_plan"), SPEC, BLOCK, params, grads, {"exp_avgs": exp_avgs},
                                  model_copies)


def lion_step_planned(plan: torch.Tensor, combo: int, count: int, chunks: int, lr: float, beta1: float, beta2: float,
                      weight_decay: float) -> None:
    """`lion_step` over a plan's tensors, at a host cost independent of their number.

    Same kernel and arguments as the unplanned step, so the results are the same bit for bit.

    Args:
        plan: the tensor `lion_plan` returned. combo, count, chunks: its header words 1-3.
        lr, beta1, beta2, weight_decay: as `lion_step`.

    Raises:
        RuntimeError: a scalar out of range (the spec's ranges); ``plan`` not a live plan of this
            implementation, header words that are not the plan's, or a list's first tensor moved
            (`anyaccel.ops.triton.multi_tensor.planned`).

    Side effects: updates the plan's params, momenta and model copies in place.
    """
    from anyaccel.ops import validation
    from anyaccel.ops.lion.spec import SPEC

    fn = SPEC.function("lion_step_planned")
    validation.check_scalars(fn, dict(combo=combo, count=count, chunks=chunks, lr=lr, beta1=beta1, beta2=beta2,
                                      weight_decay=weight_decay))
    record = multi_tensor.planned(fn.name, SPEC.family, plan, combo, count, chunks)
    _launch(record.bases, record.table, lr, beta1, beta2, weight_decay)


def load() -> Any:
    """The Triton implementation as torch ops, ``anyaccel_triton_lion::lion_step``, ``lion_plan`` and
    ``lion_step_planned`` (the spec's schemas and fakes), registered for CUDA and XPU.

    Side effects: imports Triton (at module import) and registers the op once per process.
    """
    from anyaccel.ops import python_ops
    from anyaccel.ops.lion.spec import SPEC

    impls: dict[str, Callable[..., Any]] = {
        "lion_step": lion_step, "lion_plan": lion_plan, "lion_step_planned": lion_step_planned}
    return python_ops.define_custom_ops(SPEC, "anyaccel_triton_lion", impls, ("cuda", "xpu"), ("cuda", "xpu"))
