"""The LAMB op family, described once (see [`anyaccel.spec`][anyaccel.spec]).

LAMB (You et al., ICLR 2020, https://arxiv.org/abs/1904.00962) as DeepSpeed's ``FusedLamb`` computes it
(``csrc/lamb/fused_lamb_cuda_kernel.cu``), per tensor, in fp32::

    g = grad / grad_scale
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    u = m / (sqrt(v) + eps) + weight_decay * p          (sqrt(v + eps) when eps_inside_sqrt)
    coeff = clamp(||p|| / ||u||, min_coeff, max_coeff)   (1 when either norm is 0)
    p = p - step_size * coeff * u,   step_size = lr * sqrt(1 - beta2**step) / (1 - beta1**step)
                                     (lr without bias correction)

The norms are the L2 norms of the whole tensor (its trust ratio); the coefficient of each tensor is
written into ``lamb_coeffs`` (one fp32 entry per parameter, on the parameters' device), which DeepSpeed's
``get_lamb_coeffs()`` reports. With ``model_copies``, ``params`` are fp32 masters and the updated value is
also written into the 16-bit copy. Builder names are DeepSpeed's (``FusedLambBuilder``); that the CPU build
also answers to ``FusedLambBuilder`` on the CPU is the DeepSpeed integration's
(`anyaccel.integrations.deepspeed.builder_names`). DeepSpeed's module function ``lamb(...)`` is
`anyaccel.integrations.deepspeed.abi.lamb`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyaccel.ops.adam.spec import _PLAN_RANGES
from anyaccel.ops.adam.spec import SPEC as _ADAM
from anyaccel.ops.plan_fakes import make_plan_fake
from anyaccel.spec import (
    REGISTRATION_CXX_ARGS,
    Function,
    Implementation,
    NativeBuild,
    OpSpec,
)

_RANGES = (("step", "[1, inf)"), ("lr", "[0, inf)"), ("beta1", "[0, 1)"), ("beta2", "[0, 1)"), ("eps", "(0, inf)"),
           ("weight_decay", "[0, inf)"), ("grad_scale", "(0, inf)"), ("max_coeff", "(0, inf)"),
           ("min_coeff", "[0, inf)"))

SPEC = OpSpec(
    family="lamb",
    summary="LAMB step (per-tensor trust ratio) over many tensors in one call (CPU SIMD, CUDA, SYCL, Triton)",
    functions=(
        Function(
            "lamb_step",
            "(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
            "Tensor(d!)[] model_copies, Tensor(e!) lamb_coeffs, int step, float lr, float beta1, float beta2, "
            "float eps, float weight_decay, float grad_scale, float max_coeff, float min_coeff, "
            "bool bias_correction, bool eps_inside_sqrt) -> ()",
            fake="anyaccel.ops.lamb.spec:lamb_step_fake",
            ranges=_RANGES,
            doc="one LAMB step of every tensor in the lists, in place; the trust ratios into lamb_coeffs",
        ),
        Function("isa", "() -> str", doc="the CPU SIMD level compiled in (host builds)"),
        Function(
            "lamb_plan",
            "(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, Tensor[] model_copies) "
            "-> Tensor",
            fake="anyaccel.ops.lamb.spec:lamb_plan_fake",
            doc="validate one dtype combination's tensors once; the plan a planned step launches from",
        ),
        Function(
            "lamb_step_planned",
            "(Tensor plan, int combo, int count, int chunks, Tensor(a!) lamb_coeffs, int step, float lr, "
            "float beta1, float beta2, float eps, float weight_decay, float grad_scale, float max_coeff, "
            "float min_coeff, bool bias_correction, bool eps_inside_sqrt) -> ()",
            fake="anyaccel.ops.plan_fakes:planned_fake",
            ranges=_PLAN_RANGES + _RANGES,
            doc="lamb_step over a plan's tensors: no tensor list, a cost independent of the tensor count",
        ),
        Function(
            "lamb_step_planned_capturable",
            "(Tensor plan, int combo, int count, int chunks, Tensor(a!) lamb_coeffs, Tensor step, Tensor lr, "
            "float beta1, float beta2, float eps, float weight_decay, float grad_scale, float max_coeff, "
            "float min_coeff, bool bias_correction, bool eps_inside_sqrt) -> ()",
            fake="anyaccel.ops.plan_fakes:planned_fake",
            ranges=_PLAN_RANGES + tuple(r for r in _RANGES if r[0] not in ("step", "lr")),
            doc="lamb_step_planned reading the step and the learning rate from device memory (CUDA graphs)",
        ),
    ),
    dtypes=_ADAM.dtypes,
    builds=(
        NativeBuild("CPULambBuilder", "cpu_lamb", "cpu",
                    sources=("csrc/lamb/cpu_lamb.cpp", "csrc/lamb/cpu_lamb_kernel.cpp"),
                    source_cxx_args=(("csrc/lamb/cpu_lamb.cpp", REGISTRATION_CXX_ARGS),),
                    functions=("lamb_step", "isa"), accelerators=("*",),
                    isa_levels=("avx512", "avx2", "sve", "neon", "portable")),
        NativeBuild("FusedLambBuilder", "fused_lamb", "cuda", sources=("csrc/lamb/fused_lamb_cuda.cu",),
                    functions=("lamb_step", "lamb_plan", "lamb_step_planned", "lamb_step_planned_capturable"),
                    accelerators=("cuda",)),
        NativeBuild("FusedLambBuilder", "fused_lamb_sycl", "xpu", sources=("csrc/lamb/fused_lamb_sycl.sycl",),
                    functions=("lamb_step",), accelerators=("xpu",)),
    ),
    implementations=(
        Implementation("cpu", 10, ("cpu",), build="cpu_lamb",
                       description="SIMD kernel, two passes per tensor (csrc/lamb/cpu_lamb_kernel.cpp)"),
        Implementation("cuda", 20, ("cuda",), build="fused_lamb",
                       description="CUDA multi-tensor kernels: update and norms, trust ratios, apply"),
        Implementation("sycl", 20, ("xpu",), build="fused_lamb_sycl",
                       description="SYCL multi-tensor kernels: update and norms, trust ratios, apply "
                                   "(csrc/lamb/fused_lamb_sycl.sycl)"),
        Implementation("triton", 10, ("cuda", "xpu"), module="anyaccel.ops.lamb.triton:load", requires=("triton",),
                       description="Triton multi-tensor kernels (anyaccel/ops/lamb/triton.py)"),
    ),
    benchmarks=("benchmarks/gpu_optimizers.py",),
)


def lamb_step_fake(device_type: str | Sequence[str], params: Sequence[Any], grads: Sequence[Any],
                   exp_avgs: Sequence[Any], exp_avg_sqs: Sequence[Any], model_copies: Sequence[Any],
                   lamb_coeffs: Any, step: int, lr: float, beta1: float, beta2: float, eps: float,
                   weight_decay: float, grad_scale: float, max_coeff: float, min_coeff: float,
                   bias_correction: bool, eps_inside_sqrt: bool) -> None:
    """Fake of ``lamb_step``: validates like the kernels of ``device_type``, computes nothing.

    Raises:
        RuntimeError: a scalar outside its range, ``min_coeff > max_coeff``, a bad list entry, or a
            ``lamb_coeffs`` that is not a contiguous float32 tensor of one entry per parameter on the
            parameters' device.
    """
    from anyaccel.ops import validation

    validation.check_scalars(SPEC.function("lamb_step"), dict(
        step=step, lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, grad_scale=grad_scale,
        max_coeff=max_coeff, min_coeff=min_coeff))
    check_coeff_order(min_coeff, max_coeff)
    validation.check_optimizer_lists("lamb_step", params, grads, {"exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs},
                                     model_copies, [c.as_tuple() for c in SPEC.dtypes], device_type)
    check_lamb_coeffs(lamb_coeffs, len(params), params[0].device if len(params) else None)


def check_coeff_order(min_coeff: float, max_coeff: float) -> None:
    """Raise ``RuntimeError`` unless ``min_coeff <= max_coeff`` (the kernels' rule, same words)."""
    if not min_coeff <= max_coeff:
        raise RuntimeError(f"lamb_step: min_coeff={min_coeff!r} is larger than max_coeff={max_coeff!r}; accepted: "
                           "min_coeff <= max_coeff")


def check_lamb_coeffs(lamb_coeffs: Any, n: int, device: Any) -> None:
    """Raise ``RuntimeError`` unless ``lamb_coeffs`` is a contiguous float32 tensor of ``n`` elements on
    ``device`` (the kernels' rule, same words)."""
    import torch

    from anyaccel.ops.validation import _dtype

    ok = (lamb_coeffs.dtype == torch.float32 and lamb_coeffs.numel() == n and lamb_coeffs.is_contiguous()
          and (device is None or lamb_coeffs.device == device))
    if not ok:
        where = device if device is not None else "the parameters device"
        raise RuntimeError(f"lamb_step: lamb_coeffs must be a contiguous float32 tensor of {n} elements on {where}; "
                           f"got {_dtype(lamb_coeffs.dtype)} with {lamb_coeffs.numel()} elements on "
                           f"{lamb_coeffs.device}")


#: The fake of ``lamb_plan`` (validates like ``lamb_step``, returns an int64 tensor of the plan's size).
lamb_plan_fake = make_plan_fake("lamb_plan", ("exp_avgs", "exp_avg_sqs"), SPEC.dtypes)
