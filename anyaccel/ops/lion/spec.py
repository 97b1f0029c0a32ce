"""The Lion op family, described once (see [`anyaccel.spec`][anyaccel.spec]).

Lion: Chen et al., "Symbolic Discovery of Optimization Algorithms", 2023, Algorithm 2
(https://arxiv.org/abs/2302.06675). Per element, in fp32::

    c = beta1 * m + (1 - beta1) * g
    p = p * (1 - lr * weight_decay) - lr * sign(c)        sign as torch.sign: sign(0) = 0, NaN stays NaN
    m = beta2 * m + (1 - beta2) * g

With ``model_copies``, ``params`` are fp32 masters and the result is also written into the 16-bit copy.
Builder names are DeepSpeed's (``CPULionBuilder``, ``FusedLionBuilder``); that the CPU build also answers to
``FusedLionBuilder`` on the CPU is the DeepSpeed integration's (`anyaccel.integrations.deepspeed.builder_names`).
DeepSpeed's module ABI
(``create_lion``, ``lion_update``, ``destroy_lion``, ``multi_tensor_lion``) is the DeepSpeed integration's
(`anyaccel.integrations.deepspeed.abi.lion`).
"""

from anyaccel.ops.adam.spec import _PLAN_RANGES as _ADAM_PLAN_RANGES
from anyaccel.ops.adam.spec import SPEC as _ADAM
from anyaccel.ops.plan_fakes import make_plan_fake
from anyaccel.spec import (
    REGISTRATION_CXX_ARGS,
    Function,
    Implementation,
    NativeBuild,
    OpSpec,
)

SPEC = OpSpec(
    family="lion",
    summary="Lion step over many tensors in one call (CPU SIMD, CUDA, Triton, SYCL, NPU)",
    functions=(
        Function(
            "lion_step",
            "(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] model_copies, float lr, "
            "float beta1, float beta2, float weight_decay) -> ()",
            fake="anyaccel.ops.lion.fakes:lion_step",
            ranges=(("lr", "[0, inf)"), ("beta1", "[0, 1]"), ("beta2", "[0, 1]"), ("weight_decay", "[0, inf)")),
            doc="one Lion step of every tensor in the lists, in place",
        ),
        Function("isa", "() -> str", doc="the CPU SIMD level compiled in (host builds)"),
        Function(
            "lion_plan",
            "(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] model_copies) -> Tensor",
            fake="anyaccel.ops.lion.spec:lion_plan_fake",
            doc="validate one dtype combination's tensors once; the plan a planned step launches from",
        ),
        Function(
            "lion_step_planned",
            "(Tensor plan, int combo, int count, int chunks, float lr, float beta1, float beta2, "
            "float weight_decay) -> ()",
            fake="anyaccel.ops.plan_fakes:planned_fake",
            ranges=_ADAM_PLAN_RANGES + (("lr", "[0, inf)"), ("beta1", "[0, 1]"), ("beta2", "[0, 1]"),
                                        ("weight_decay", "[0, inf)")),
            doc="lion_step over a plan's tensors: no tensor list, a cost independent of the tensor count",
        ),
        Function(
            "lion_step_planned_capturable",
            "(Tensor plan, int combo, int count, int chunks, Tensor lr, float beta1, float beta2, "
            "float weight_decay) -> ()",
            fake="anyaccel.ops.plan_fakes:planned_fake",
            ranges=_ADAM_PLAN_RANGES + (("beta1", "[0, 1]"), ("beta2", "[0, 1]"), ("weight_decay", "[0, inf)")),
            doc="lion_step_planned reading the learning rate from device memory (CUDA graphs)",
        ),
    ),
    dtypes=_ADAM.dtypes,  # the element-wise optimizers share their storage combinations
    builds=(
        NativeBuild("CPULionBuilder", "cpu_lion", "cpu",
                    sources=("csrc/lion/cpu_lion.cpp", "csrc/lion/cpu_lion_kernel.cpp"),
                    source_cxx_args=(("csrc/lion/cpu_lion.cpp", REGISTRATION_CXX_ARGS),),
                    functions=("lion_step", "isa"), accelerators=("*",),
                    isa_levels=("avx512", "avx2", "sve", "neon", "portable")),
        NativeBuild("FusedLionBuilder", "fused_lion", "cuda", sources=("csrc/lion/fused_lion_cuda.cu",),
                    functions=("lion_step", "lion_plan", "lion_step_planned", "lion_step_planned_capturable"),
                    accelerators=("cuda",)),
        NativeBuild("FusedLionBuilder", "fused_lion_sycl", "xpu", sources=("csrc/lion/fused_lion_sycl.sycl",),
                    functions=("lion_step",), accelerators=("xpu",)),
        NativeBuild("FusedLionBuilder", "fused_lion_npu", "npu", functions=("lion_step",), accelerators=("npu",),
                    module="anyaccel.ops.lion.npu:load"),
    ),
    implementations=(
        Implementation("cpu", 10, ("cpu",), build="cpu_lion",
                       description="SIMD kernel on torch's CPU thread pool (csrc/lion/cpu_lion.cpp)"),
        Implementation("cuda", 20, ("cuda",), build="fused_lion",
                       description="CUDA C++ multi-tensor kernel (csrc/lion/fused_lion_cuda.cu)"),
        Implementation("sycl", 20, ("xpu",), build="fused_lion_sycl",
                       description="SYCL multi-tensor kernel (csrc/lion/fused_lion_sycl.sycl)"),
        Implementation("npu", 20, ("npu",), build="fused_lion_npu",
                       description="torch _foreach_* ops (torch_npu multi-tensor kernels)"),
        Implementation("triton", 10, ("cuda", "xpu"), module="anyaccel.ops.lion.triton:load", requires=("triton",),
                       description="Triton multi-tensor kernel (anyaccel/ops/lion/triton.py)"),
    ),
    benchmarks=("benchmarks/cpu_lion.py", "benchmarks/gpu_optimizers.py"),
)


#: The fake of ``lion_plan`` (validates like ``lion_step``, returns an int64 tensor of the plan's size).
lion_plan_fake = make_plan_fake("lion_plan", ("exp_avgs",), SPEC.dtypes)
