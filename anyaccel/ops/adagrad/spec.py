"""The Adagrad op family, described once (see [`anyaccel.spec`][anyaccel.spec]).

Adagrad: Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning and Stochastic
Optimization", JMLR 2011. The update and its order of operations are torch's ``torch.optim.Adagrad``
(``torch/optim/adagrad.py``; ``lr_decay`` is the front end's: it scales ``lr``) and DeepSpeed's
``DeepSpeedCPUAdagrad`` (``deepspeed/ops/csrc/includes/cpu_adagrad.h``), per element in fp32::

    g = grad (+ weight_decay * p       if weight_decay != 0)
    v = v + g * g
    p = p - lr * g / (sqrt(v) + eps)

With ``model_copies``, ``params`` are fp32 masters and the result is also written into the 16-bit copy. The
builder name is DeepSpeed's (``CPUAdagradBuilder``, a host op served on every accelerator). DeepSpeed's
module ABI (``create_adagrad``, ``adagrad_update``, ``destroy_adagrad``) is
`anyaccel.integrations.deepspeed.abi.adagrad`; the optimizer is
[`anyaccel.ops.adagrad.CPUAdagrad`][anyaccel.ops.adagrad.cpu.CPUAdagrad].
"""

from anyaccel.ops.adam.spec import SPEC as _ADAM
from anyaccel.spec import REGISTRATION_CXX_ARGS, Function, Implementation, NativeBuild, OpSpec

SPEC = OpSpec(
    family="adagrad",
    summary="Adagrad step over many tensors in one call (CPU SIMD)",
    functions=(
        Function(
            "adagrad_step",
            "(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avg_sqs, Tensor(c!)[] model_copies, float lr, "
            "float eps, float weight_decay) -> ()",
            fake="anyaccel.ops.adagrad.fakes:adagrad_step",
            ranges=(("lr", "[0, inf)"), ("eps", "(0, inf)"), ("weight_decay", "[0, inf)")),
            doc="one Adagrad step of every tensor in the lists, in place",
        ),
        Function("isa", "() -> str", doc="the CPU SIMD level compiled in (host builds)"),
    ),
    dtypes=_ADAM.dtypes,  # the element-wise optimizers share their storage combinations
    builds=(
        NativeBuild("CPUAdagradBuilder", "cpu_adagrad", "cpu",
                    sources=("csrc/adagrad/cpu_adagrad.cpp", "csrc/adagrad/cpu_adagrad_kernel.cpp"),
                    source_cxx_args=(("csrc/adagrad/cpu_adagrad.cpp", REGISTRATION_CXX_ARGS),),
                    functions=("adagrad_step", "isa"), accelerators=("*",),
                    isa_levels=("avx512", "avx2", "sve", "neon", "portable")),
    ),
    implementations=(
        Implementation("cpu", 10, ("cpu",), build="cpu_adagrad",
                       description="SIMD kernel on torch's CPU thread pool (csrc/adagrad/cpu_adagrad.cpp)"),
    ),
)
