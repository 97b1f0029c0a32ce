"""The Adam / AdamW op family, described once (see [`anyaccel.spec`][anyaccel.spec]).

Adam: Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015; AdamW (decoupled weight decay):
Loshchilov & Hutter, ICLR 2019. The update and its order of operations are torch's
(``torch/optim/adam.py``; the fused CPU kernel ``aten/src/ATen/native/cpu/FusedAdamKernel.cpp``)::

    g = grad (+ weight_decay * p                 if not adamw_mode)
    p = p * (1 - lr * weight_decay)               if adamw_mode
    m = m + (1 - beta1) * (g - m)                 (torch's lerp)
    v = beta2 * v + (1 - beta2) * g * g
    p = p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps),   bc_i = 1 - beta_i**step (1 without bias correction)

With ``model_copies``, ``params`` are fp32 master weights and the updated value is also written, rounded
to nearest even, into the 16-bit model copy in the same pass. Builder names are DeepSpeed's; that the CPU build
also answers to ``FusedAdamBuilder`` on the CPU (DeepSpeed's ``FusedAdam`` on CPU tensors) is the DeepSpeed
integration's (`anyaccel.integrations.deepspeed.builder_names`).

``adam_rollback_step`` undoes one step given its gradients and arguments (DeepSpeed's ``adam_rollback``; rules
in ``csrc/adam/cpu_adam.cpp``). DeepSpeed's module ABI (``create_adam``, ``adam_update``, ``adam_rollback``,
``destroy_adam``, ``multi_tensor_adam``, ZenFlow's ``zenflow_adam_*``) is the DeepSpeed integration's
(`anyaccel.integrations.deepspeed.abi.adam`).
"""

from anyaccel.ops.plan_fakes import make_plan_fake
from anyaccel.spec import (
    REGISTRATION_CXX_ARGS,
    DtypeCombo,
    Function,
    Implementation,
    NativeBuild,
    OpSpec,
)

#: The ranges of a planned step's launch arguments (the plan's dtype combination, tensor and chunk counts);
#: 9 is the number of dtype combinations below.
_PLAN_RANGES = (("combo", "[0, 9)"), ("count", "[1, inf)"), ("chunks", "[1, inf)"))

_LISTS = ("Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
          "Tensor(d!)[] model_copies")

SPEC = OpSpec(
    family="adam",
    summary="Adam / AdamW step over many tensors in one call (CPU SIMD, CUDA, Triton, SYCL, NPU)",
    functions=(
        Function(
            "adam_step",
            f"({_LISTS}, int step, float lr, float beta1, float beta2, float eps, float weight_decay, "
            "bool bias_correction, bool adamw_mode) -> ()",
            fake="anyaccel.ops.adam.fakes:adam_step",
            ranges=(("step", "[1, inf)"), ("lr", "[0, inf)"), ("beta1", "[0, 1)"), ("beta2", "[0, 1)"),
                    ("eps", "(0, inf)"), ("weight_decay", "[0, inf)")),
            doc="one Adam/AdamW step of every tensor in the lists, in place",
        ),
        Function(
            "adam_rollback_step",
            f"({_LISTS}, int step, float lr, float beta1, float beta2, float eps, float weight_decay, "
            "bool bias_correction, bool adamw_mode) -> ()",
            fake="anyaccel.ops.adam.fakes:adam_rollback_step",
            ranges=(("step", "[1, inf)"), ("lr", "[0, inf)"), ("beta1", "(0, 1)"), ("beta2", "(0, 1)"),
                    ("eps", "(0, inf)"), ("weight_decay", "[0, inf)")),
            doc="undo the adam_step of `step` given its gradients and arguments, in place (DeepSpeed's rollback)",
        ),
        Function("isa", "() -> str", doc="the CPU SIMD level compiled in (host builds)"),
        Function(
            "adam_plan",
            "(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, Tensor[] model_copies) "
            "-> Tensor",
            fake="anyaccel.ops.adam.spec:adam_plan_fake",
            doc="validate one dtype combination's tensors once; the plan a planned step launches from",
        ),
        Function(
            "adam_step_planned",
            "(Tensor plan, int combo, int count, int chunks, int step, float lr, float beta1, float beta2, "
            "float eps, float weight_decay, bool bias_correction, bool adamw_mode) -> ()",
            fake="anyaccel.ops.plan_fakes:planned_fake",
            ranges=_PLAN_RANGES + (("step", "[1, inf)"), ("lr", "[0, inf)"), ("beta1", "[0, 1)"),
                                   ("beta2", "[0, 1)"), ("eps", "(0, inf)"), ("weight_decay", "[0, inf)")),
            doc="adam_step over a plan's tensors: no tensor list, a cost independent of the tensor count",
        ),
        Function(
            "adam_step_planned_capturable",
            "(Tensor plan, int combo, int count, int chunks, Tensor step, Tensor lr, float beta1, float beta2, "
            "float eps, float weight_decay, bool bias_correction, bool adamw_mode) -> ()",
            fake="anyaccel.ops.plan_fakes:planned_fake",
            ranges=_PLAN_RANGES + (("beta1", "[0, 1)"), ("beta2", "[0, 1)"), ("eps", "(0, inf)"),
                                   ("weight_decay", "[0, inf)")),
            doc="adam_step_planned reading the step and the learning rate from device memory (CUDA graphs)",
        ),
    ),
    dtypes=(
        DtypeCombo("float32", "float32", "float32"),
        DtypeCombo("bfloat16", "bfloat16", "float32"),
        DtypeCombo("float16", "float16", "float32"),
        DtypeCombo("bfloat16", "bfloat16", "bfloat16"),
        DtypeCombo("float16", "float16", "float16"),
        DtypeCombo("float32", "float32", "float32", "bfloat16"),
        DtypeCombo("float32", "float32", "float32", "float16"),
        DtypeCombo("float32", "bfloat16", "float32", "bfloat16"),
        DtypeCombo("float32", "float16", "float32", "float16"),
    ),
    builds=(
        NativeBuild("CPUAdamBuilder", "cpu_adam", "cpu",
                    sources=("csrc/adam/cpu_adam.cpp", "csrc/adam/cpu_adam_kernel.cpp"),
                    source_cxx_args=(("csrc/adam/cpu_adam.cpp", REGISTRATION_CXX_ARGS),),
                    functions=("adam_step", "adam_rollback_step", "isa"), accelerators=("*",),
                    isa_levels=("avx512", "avx2", "sve", "neon", "portable")),
        NativeBuild("FusedAdamBuilder", "fused_adam", "cuda", sources=("csrc/adam/fused_adam_cuda.cu",),
                    functions=("adam_step", "adam_plan", "adam_step_planned", "adam_step_planned_capturable"),
                    accelerators=("cuda",)),
        NativeBuild("FusedAdamBuilder", "fused_adam_sycl", "xpu", sources=("csrc/adam/fused_adam_sycl.sycl",),
                    functions=("adam_step",), accelerators=("xpu",)),
        NativeBuild("FusedAdamBuilder", "fused_adam_npu", "npu", functions=("adam_step",), accelerators=("npu",),
                    module="anyaccel.ops.adam.npu:load"),
    ),
    implementations=(
        Implementation("cpu", 10, ("cpu",), build="cpu_adam",
                       description="SIMD kernel on torch's CPU thread pool (csrc/adam/cpu_adam.cpp)"),
        Implementation("cuda", 20, ("cuda",), build="fused_adam",
                       description="CUDA C++ multi-tensor kernel (csrc/adam/fused_adam_cuda.cu)"),
        Implementation("sycl", 20, ("xpu",), build="fused_adam_sycl",
                       description="SYCL multi-tensor kernel (csrc/adam/fused_adam_sycl.sycl)"),
        Implementation("npu", 20, ("npu",), build="fused_adam_npu",
                       description="torch_npu.npu_apply_adam_w (Ascend ApplyAdamW), foreach otherwise"),
        Implementation("triton", 10, ("cuda", "xpu"), module="anyaccel.ops.adam.triton:load", requires=("triton",),
                       description="Triton multi-tensor kernel (anyaccel/ops/adam/triton.py)"),
    ),
    benchmarks=("benchmarks/cpu_adam.py", "benchmarks/gpu_optimizers.py"),
)


#: The fake of ``adam_plan`` (validates like ``adam_step``, returns an int64 tensor of the plan's size).
adam_plan_fake = make_plan_fake("adam_plan", ("exp_avgs", "exp_avg_sqs"), SPEC.dtypes)
