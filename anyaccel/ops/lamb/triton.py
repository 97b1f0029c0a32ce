"""Triton implementation of the fused multi-tensor LAMB step.

Same op, signature and math as the CUDA kernel (``anyaccel/csrc/lamb/fused_lamb_cuda.cu``; algorithm in
`anyaccel.ops.lamb.spec`): one Triton program per chunk of ``BLOCK`` elements updates the moments and
writes its chunk's partial sums of ``p**2`` and ``u**2``; the per-tensor trust ratios are a segmented sum of
those partials (in float64, fixed order) and a clamp, in torch ops; a second launch applies the update.
The per-tensor chunk counts and the tensors' places in ``lamb_coeffs`` are device tables built with the
work table (cached, or once per plan), so a step does not wait for the device.
Triton runs on CUDA and Intel XPU devices.

Importing this module imports Triton; the implementation loader ([`anyaccel.ops.dispatch`][anyaccel.ops.dispatch])
imports it
only where Triton is installed.
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

BLOCK = 4096
NUM_WARPS = 8


@triton.jit
def _lamb_update_kernel(p_base, g_base, m_base, v_base, rows_ptr, chunks_ptr, partials_ptr, b1, omb1, b2, omb2, eps,
                        inv_scale, wd, EPS_INSIDE: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    t = tl.load(chunks_ptr + 2 * pid)
    start = tl.load(chunks_ptr + 2 * pid + 1) * BLOCK
    row = rows_ptr + 6 * t
    n = tl.load(row + 5)
    offs = start + tl.arange(0, BLOCK)
    mask = offs < n
    p_ptr = p_base + tl.load(row + 0)
    g_ptr = g_base + tl.load(row + 1)
    m_ptr = m_base + tl.load(row + 2)
    v_ptr = v_base + tl.load(row + 3)
    p = tl.load(p_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32) * inv_scale
    m = b1 * tl.load(m_ptr + offs, mask=mask, other=0.0).to(tl.float32) + omb1 * g
    v = b2 * tl.load(v_ptr + offs, mask=mask, other=0.0).to(tl.float32) + omb2 * g * g
    tl.store(m_ptr + offs, m.to(m_ptr.dtype.element_ty), mask=mask)
    tl.store(v_ptr + offs, v.to(v_ptr.dtype.element_ty), mask=mask)
    if EPS_INSIDE:
        denom = tl.sqrt_rn(v + eps)
    else:
        denom = tl.sqrt_rn(v) + eps
    u = tl.div_rn(m, denom) + wd * p
    u = tl.where(mask, u, 0.0)
    tl.store(partials_ptr + 2 * pid, tl.sum(p * p, axis=0))
    tl.store(partials_ptr + 2 * pid + 1, tl.sum(u * u, axis=0))


@triton.jit
def _lamb_apply_kernel(p_base, m_base, v_base, c_base, rows_ptr, chunks_ptr, coeff_ptr, eps, wd, step_size,
                       EPS_INSIDE: tl.constexpr, HAS_COPY: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    t = tl.load(chunks_ptr + 2 * pid)
    start = tl.load(chunks_ptr + 2 * pid + 1) * BLOCK
    row = rows_ptr + 6 * t
    n = tl.load(row + 5)
    offs = start + tl.arange(0, BLOCK)
    mask = offs < n
    p_ptr = p_base + tl.load(row + 0)
    m_ptr = m_base + tl.load(row + 2)
    v_ptr = v_base + tl.load(row + 3)
    p = tl.load(p_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    m = tl.load(m_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if EPS_INSIDE:
        denom = tl.sqrt_rn(v + eps)
    else:
        denom = tl.sqrt_rn(v) + eps
    u = tl.div_rn(m, denom) + wd * p
    p = p - step_size * tl.load(coeff_ptr + t) * u
    tl.store(p_ptr + offs, p.to(p_ptr.dtype.element_ty), mask=mask)
    if HAS_COPY:
        c_ptr = c_base + tl.load(row + 4)
        tl.store(c_ptr + offs, p.to(c_ptr.dtype.element_ty), mask=mask)


def lamb_step(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], exp_avgs: Sequence[torch.Tensor],
              exp_avg_sqs: Sequence[torch.Tensor], model_copies: Sequence[torch.Tensor], lamb_coeffs: torch.Tensor,
              step: int, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, grad_scale: float,
              max_coeff: float, min_coeff: float, bias_correction: bool, eps_inside_sqrt: bool) -> None:
    """One LAMB step over many tensors in place (schema and math: `anyaccel.ops.lamb.spec`).

    Args:
        params, grads, exp_avgs, exp_avg_sqs, model_copies: as for ``adam_step`` (one CUDA/XPU device).
        lamb_coeffs: float32, one entry per parameter; receives each tensor's trust ratio.
        step: >= 1. lr, beta1, beta2, eps, weight_decay: as Adam's. grad_scale: divides the gradients.
        max_coeff, min_coeff: the trust ratio's clamp. bias_correction: scale the step by
        ``sqrt(1 - beta2**step) / (1 - beta1**step)``. eps_inside_sqrt: ``sqrt(v + eps)``.

    Raises:
        RuntimeError: a scalar out of range or a bad list entry (the op spec's rules, as the CUDA kernel).

    Side effects: compiles the Triton kernels on first use per dtype combination.
    """
    from anyaccel.ops.lamb.spec import SPEC, check_coeff_order, check_lamb_coeffs

    fn = SPEC.function("lamb_step")
    check_coeff_order(min_coeff, max_coeff)
    launches = multi_tensor.prepare_indexed(
        fn, SPEC, dict(step=step, lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay,
                       grad_scale=grad_scale, max_coeff=max_coeff, min_coeff=min_coeff),
        params, grads, {"exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs}, model_copies)
    check_lamb_coeffs(lamb_coeffs, len(params), params[0].device)
    lamb_coeffs.fill_(1.0)
    for indices, lists in launches:
        _launch(tuple(lst[0] for lst in lists), multi_tensor.work_table(lists, BLOCK, indices), lamb_coeffs, step, lr,
                beta1, beta2, eps, weight_decay, grad_scale, max_coeff, min_coeff, bias_correction, eps_inside_sqrt)


def _launch(bases: tuple[torch.Tensor, ...], table: multi_tensor.WorkTable, lamb_coeffs: torch.Tensor, step: int,
            lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, grad_scale: float,
            max_coeff: float, min_coeff: float, bias_correction: bool, eps_inside_sqrt: bool) -> None:
    """The kernels of one dtype combination's tensors: update and partial norms, trust ratios, apply.

    No host synchronisation: every table is already on the device (``table.tensor_chunks`` for the
    per-tensor sums, ``table.positions`` for the coefficients' places), and the trust ratios are device ops.

    Args:
        bases: the first tensor of each list in kernel order (params, grads, exp_avgs, exp_avg_sqs,
            [model copies]); the others are reached through ``table``'s deltas.
        table: the launch's work table; ``positions`` index ``lamb_coeffs``.
        lamb_coeffs: float32 on the params' device; entry ``table.positions[k]`` receives tensor k's trust
            ratio. The scalars: as `lamb_step`, already validated.

    Side effects: a float32 ``[chunks, 2]`` and a few ``[T]`` device temporaries.
    """
    bc1 = 1.0 - beta1**step if bias_correction else 1.0
    bc2 = 1.0 - beta2**step if bias_correction else 1.0
    step_size = lr * math.sqrt(bc2) / bc1 if bias_correction else lr
    has_copy = len(bases) == 5
    p, g, m, v = bases[:4]
    counts = table.tensor_chunks
    partials = torch.empty(table.num_chunks, 2, dtype=torch.float32, device=p.device)
    with device_of(p):
        fast(_lamb_update_kernel)[(table.num_chunks,)](
            p, g, m, v, table.rows, table.chunks, partials, beta1, 1.0 - beta1, beta2, 1.0 - beta2, eps,
            1.0 / grad_scale, weight_decay, EPS_INSIDE=eps_inside_sqrt, BLOCK=BLOCK, num_warps=NUM_WARPS)
        # Per-tensor sums of the chunks' partials, in float64 and a fixed order: differences of one prefix
        # sum at the tensors' chunk boundaries (torch.segment_reduce takes ~20 ms on a GPU whatever the size).
        prefix = torch.nn.functional.pad(partials.double().cumsum(0), (0, 0, 1, 0))
        ends = counts.cumsum(0)
        sums = prefix[ends] - prefix[ends - counts]
        norms = sums.clamp_min(0).sqrt()
        ratio = (norms[:, 0] / norms[:, 1]).clamp(min_coeff, max_coeff)
        coeff = torch.where((norms[:, 0] != 0) & (norms[:, 1] != 0), ratio, torch.ones_like(ratio)).float()
        fast(_lamb_apply_kernel)[(table.num_chunks,)](
            p, m, v, bases[4] if has_copy else p, table.rows, table.chunks, coeff, eps, weight_decay,
            step_size, EPS_INSIDE=eps_inside_sqrt, HAS_COPY=has_copy, BLOCK=BLOCK, num_warps=NUM_WARPS)
    lamb_coeffs.index_copy_(0, table.positions, coeff)


def lamb_plan(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], exp_avgs: Sequence[torch.Tensor],
              exp_avg_sqs: Sequence[torch.Tensor], model_copies: Sequence[torch.Tensor]) -> torch.Tensor:
    """Validates one dtype combination's lists once; the plan `lamb_step_planned` launches from.

    Args:
        params, grads, exp_avgs, exp_avg_sqs, model_copies: as `lamb_step`; their tensors with
            elements must share one dtype combination.

    Returns:
        An int64 tensor of ``4 + 9 * T`` words on the params' device (T: tensors with elements) whose
        header ``[magic, combo, T, chunks]`` has the CUDA plan's meaning
        (`anyaccel.ops.triton.multi_tensor.make_plan`).

    Raises:
        RuntimeError: a bad list entry (``lamb_step``'s rules, named ``lamb_plan``), or more or fewer than one
            dtype combination among the tensors with elements.

    Side effects: host-to-device copies of the tables; holds the storage of every tensor of the plan while
    the plan tensor lives (so a planned step never writes freed memory). A tensor given a new storage after
    planning (``p.data = ...``) would be updated in its old one, so build a new plan when a data pointer moves
    (anyaccel's optimizers do; a planned step raises when a list's first tensor moved).
    """
    from anyaccel.ops.lamb.spec import SPEC

    return multi_tensor.make_plan(SPEC.function("lamb_plan"), SPEC, BLOCK, params, grads,
                                  {"exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs}, model_copies)


def lamb_step_planned(plan: torch.Tensor, combo: int, count: int, chunks: int, lamb_coeffs: torch.Tensor, step: int,
                      lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, grad_scale: float,
                      max_coeff: float, min_coeff: float, bias_correction: bool, eps_inside_sqrt: bool) -> None:
    """`lamb_step` over a plan's tensors, at a host cost independent of their number.

    Same kernels and arguments as the unplanned step, so the results are the same bit for bit.

    Args:
        plan: the tensor `lamb_plan` returned. combo, count, chunks: its header words 1-3.
        lamb_coeffs: contiguous float32 on the plan's device with at least one entry per tensor of the lists
            the plan was built from; every entry is set to 1, then entry i to tensor i's trust ratio.
        step, lr, beta1, beta2, eps, weight_decay, grad_scale, max_coeff, min_coeff, bias_correction,
            eps_inside_sqrt: as `lamb_step`.

    Raises:
        RuntimeError: a scalar out of range or ``min_coeff > max_coeff`` (``lamb_step``'s words); a bad
            ``lamb_coeffs``; ``plan`` not a live plan of this implementation, header words that are not the
            plan's, or a list's first tensor moved (`anyaccel.ops.triton.multi_tensor.planned`).

    Side effects: updates the plan's params, moments and model copies and ``lamb_coeffs`` in place.
    """
    from anyaccel.ops import validation
    from anyaccel.ops.lamb.spec import SPEC, check_coeff_order

    fn = SPEC.function("lamb_step_planned")
    validation.check_scalars(fn, dict(combo=combo, count=count, chunks=chunks, step=step, lr=lr, beta1=beta1,
                                      beta2=beta2, eps=eps, weight_decay=weight_decay, grad_scale=grad_scale,
                                      max_coeff=max_coeff, min_coeff=min_coeff))
    check_coeff_order(min_coeff, max_coeff)
    record = multi_tensor.planned(fn.name, SPEC.family, plan, combo, count, chunks)
    device = record.bases[0].device
    if not (lamb_coeffs.dtype == torch.float32 and lamb_coeffs.is_contiguous() and lamb_coeffs.device == device
            and lamb_coeffs.numel() >= record.list_len):
        raise RuntimeError(f"{fn.name}: lamb_coeffs must be a contiguous float32 tensor on {device} with one entry "
                           f"per tensor of the plan's lists ({record.list_len}); got "
                           f"{str(lamb_coeffs.dtype).removeprefix('torch.')} with {lamb_coeffs.numel()} elements on "
                           f"{lamb_coeffs.device}")
    lamb_coeffs.fill_(1.0)
    _launch(record.bases, record.table, lamb_coeffs, step, lr, beta1, beta2, eps, weight_decay, grad_scale, max_coeff,
            min_coeff, bias_correction, eps_inside_sqrt)


def load() -> Any:
    """The Triton implementation as torch ops, ``anyaccel_triton_lamb::lamb_step``, ``lamb_plan`` and
    ``lamb_step_planned`` (the spec's schemas and fakes), registered for CUDA and XPU.

    Side effects: imports Triton (at module import) and registers the op once per process.
    """
    from anyaccel.ops import python_ops
    from anyaccel.ops.lamb.spec import SPEC

    impls: dict[str, Callable[..., Any]] = {
        "lamb_step": lamb_step, "lamb_plan": lamb_plan, "lamb_step_planned": lamb_step_planned}
    return python_ops.define_custom_ops(SPEC, "anyaccel_triton_lamb", impls, ("cuda", "xpu"), ("cuda", "xpu"))
