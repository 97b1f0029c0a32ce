"""The builder classes of anyaccel's op specs, one per native build (generated: do not edit).

Written by ``scripts/gen_builders.py`` from the op specs; ``tests/op_builder/test_builders_module.py`` fails
when this file and the specs disagree (run ``python scripts/gen_builders.py`` to rewrite it).
[`anyaccel.op_builder.classes.builder_class`][anyaccel.op_builder.classes.builder_class] returns these
classes; ``from anyaccel.op_builder import CPUAdamBuilder`` and ``create_op_builder("CPUAdamBuilder")`` give
them. A build sharing its builder name with the build of another accelerator is defined in its backend's
namespace class (``XPU.FusedAdamBuilder``).

Imported on first use of a builder class, never by ``import anyaccel.op_builder``.
"""

from __future__ import annotations

from anyaccel.op_builder.backends.cpu import TorchCPUOpBuilder
from anyaccel.op_builder.backends.cuda import CUDAOpBuilder
from anyaccel.op_builder.backends.npu import NPUDelegatingBuilder
from anyaccel.op_builder.backends.sycl import SYCLOpBuilder
from anyaccel.spec import op_spec

__all__ = [
    "AsyncIOBuilder",
    "CPUAdagradBuilder",
    "CPUAdamBuilder",
    "CPULambBuilder",
    "CPULionBuilder",
    "FusedAdamBuilder",
    "FusedLambBuilder",
    "FusedLionBuilder",
    "PinMemoryBuilder",
    "NPU",
    "XPU",
]


class CPUAdagradBuilder(TorchCPUOpBuilder):
    """CPUAdagradBuilder (cpu): builds adagrad_step, isa of the 'adagrad' op spec (anyaccel.ops.adagrad.spec). Adagrad
    step over many tensors in one call (CPU SIMD).
    """

    NAME = "cpu_adagrad"
    BUILD_VAR = "ANYACCEL_BUILD_CPU_ADAGRAD"
    SPEC = op_spec("adagrad")
    BUILD = SPEC.build("cpu_adagrad")


class CPUAdamBuilder(TorchCPUOpBuilder):
    """CPUAdamBuilder (cpu): builds adam_step, adam_rollback_step, isa of the 'adam' op spec (anyaccel.ops.adam.spec).
    Adam / AdamW step over many tensors in one call (CPU SIMD, CUDA, Triton, SYCL, NPU).
    """

    NAME = "cpu_adam"
    BUILD_VAR = "ANYACCEL_BUILD_CPU_ADAM"
    SPEC = op_spec("adam")
    BUILD = SPEC.build("cpu_adam")


class FusedAdamBuilder(CUDAOpBuilder):
    """FusedAdamBuilder (cuda): builds adam_step, adam_plan, adam_step_planned, adam_step_planned_capturable of the
    'adam' op spec (anyaccel.ops.adam.spec). Adam / AdamW step over many tensors in one call (CPU SIMD, CUDA,
    Triton, SYCL, NPU).
    """

    NAME = "fused_adam"
    BUILD_VAR = "ANYACCEL_BUILD_FUSED_ADAM"
    SPEC = op_spec("adam")
    BUILD = SPEC.build("fused_adam")


class AsyncIOBuilder(TorchCPUOpBuilder):
    """AsyncIOBuilder (cpu): builds aio_open, aio_close, aio_submit_read, aio_submit_write, aio_wait, aio_pending,
    aio_page_lock of the 'aio' op spec (anyaccel.ops.aio.spec). async file I/O between host tensors and files
    (O_DIRECT pread/pwrite on a thread pool).
    """

    NAME = "async_io"
    BUILD_VAR = "ANYACCEL_BUILD_ASYNC_IO"
    SPEC = op_spec("aio")
    BUILD = SPEC.build("async_io")


class CPULambBuilder(TorchCPUOpBuilder):
    """CPULambBuilder (cpu): builds lamb_step, isa of the 'lamb' op spec (anyaccel.ops.lamb.spec). LAMB step
    (per-tensor trust ratio) over many tensors in one call (CPU SIMD, CUDA, SYCL, Triton).
    """

    NAME = "cpu_lamb"
    BUILD_VAR = "ANYACCEL_BUILD_CPU_LAMB"
    SPEC = op_spec("lamb")
    BUILD = SPEC.build("cpu_lamb")


class FusedLambBuilder(CUDAOpBuilder):
    """FusedLambBuilder (cuda): builds lamb_step, lamb_plan, lamb_step_planned, lamb_step_planned_capturable of the
    'lamb' op spec (anyaccel.ops.lamb.spec). LAMB step (per-tensor trust ratio) over many tensors in one call (CPU
    SIMD, CUDA, SYCL, Triton).
    """

    NAME = "fused_lamb"
    BUILD_VAR = "ANYACCEL_BUILD_FUSED_LAMB"
    SPEC = op_spec("lamb")
    BUILD = SPEC.build("fused_lamb")


class CPULionBuilder(TorchCPUOpBuilder):
    """CPULionBuilder (cpu): builds lion_step, isa of the 'lion' op spec (anyaccel.ops.lion.spec). Lion step over many
    tensors in one call (CPU SIMD, CUDA, Triton, SYCL, NPU).
    """

    NAME = "cpu_lion"
    BUILD_VAR = "ANYACCEL_BUILD_CPU_LION"
    SPEC = op_spec("lion")
    BUILD = SPEC.build("cpu_lion")


class FusedLionBuilder(CUDAOpBuilder):
    """FusedLionBuilder (cuda): builds lion_step, lion_plan, lion_step_planned, lion_step_planned_capturable of the
    'lion' op spec (anyaccel.ops.lion.spec). Lion step over many tensors in one call (CPU SIMD, CUDA, Triton, SYCL,
    NPU).
    """

    NAME = "fused_lion"
    BUILD_VAR = "ANYACCEL_BUILD_FUSED_LION"
    SPEC = op_spec("lion")
    BUILD = SPEC.build("fused_lion")


class PinMemoryBuilder(TorchCPUOpBuilder):
    """PinMemoryBuilder (cpu): builds pin_alloc, pin_find, pin_lock_state, pin_release, pin_free, pin_stats of the
    'pin_memory' op spec (anyaccel.ops.pin_memory.spec). page-aligned host allocations locked with mlock
    (DeepSpeed's native pinned memory).
    """

    NAME = "pin_memory"
    BUILD_VAR = "ANYACCEL_BUILD_PIN_MEMORY"
    SPEC = op_spec("pin_memory")
    BUILD = SPEC.build("pin_memory")


class NPU:
    """The NPU builds whose builder name is taken at the top of this module by another accelerator's build."""

    class FusedAdamBuilder(NPUDelegatingBuilder):
        """FusedAdamBuilder (npu): builds adam_step of the 'adam' op spec (anyaccel.ops.adam.spec). Adam / AdamW step
        over many tensors in one call (CPU SIMD, CUDA, Triton, SYCL, NPU).
        """

        NAME = "fused_adam_npu"
        BUILD_VAR = "ANYACCEL_BUILD_FUSED_ADAM_NPU"
        SPEC = op_spec("adam")
        BUILD = SPEC.build("fused_adam_npu")

    class FusedLionBuilder(NPUDelegatingBuilder):
        """FusedLionBuilder (npu): builds lion_step of the 'lion' op spec (anyaccel.ops.lion.spec). Lion step over many
        tensors in one call (CPU SIMD, CUDA, Triton, SYCL, NPU).
        """

        NAME = "fused_lion_npu"
        BUILD_VAR = "ANYACCEL_BUILD_FUSED_LION_NPU"
        SPEC = op_spec("lion")
        BUILD = SPEC.build("fused_lion_npu")


class XPU:
    """The XPU builds whose builder name is taken at the top of this module by another accelerator's build."""

    class FusedAdamBuilder(SYCLOpBuilder):
        """FusedAdamBuilder (xpu): builds adam_step of the 'adam' op spec (anyaccel.ops.adam.spec). Adam / AdamW step
        over many tensors in one call (CPU SIMD, CUDA, Triton, SYCL, NPU).
        """

        NAME = "fused_adam_sycl"
        BUILD_VAR = "ANYACCEL_BUILD_FUSED_ADAM_SYCL"
        SPEC = op_spec("adam")
        BUILD = SPEC.build("fused_adam_sycl")

    class FusedLambBuilder(SYCLOpBuilder):
        """FusedLambBuilder (xpu): builds lamb_step of the 'lamb' op spec (anyaccel.ops.lamb.spec). LAMB step
        (per-tensor trust ratio) over many tensors in one call (CPU SIMD, CUDA, SYCL, Triton).
        """

        NAME = "fused_lamb_sycl"
        BUILD_VAR = "ANYACCEL_BUILD_FUSED_LAMB_SYCL"
        SPEC = op_spec("lamb")
        BUILD = SPEC.build("fused_lamb_sycl")

    class FusedLionBuilder(SYCLOpBuilder):
        """FusedLionBuilder (xpu): builds lion_step of the 'lion' op spec (anyaccel.ops.lion.spec). Lion step over many
        tensors in one call (CPU SIMD, CUDA, Triton, SYCL, NPU).
        """

        NAME = "fused_lion_sycl"
        BUILD_VAR = "ANYACCEL_BUILD_FUSED_LION_SYCL"
        SPEC = op_spec("lion")
        BUILD = SPEC.build("fused_lion_sycl")


#: (op family, build NAME) -> its class.
BY_BUILD: dict[tuple[str, str], type] = {
    ("adagrad", "cpu_adagrad"): CPUAdagradBuilder,
    ("adam", "cpu_adam"): CPUAdamBuilder,
    ("adam", "fused_adam"): FusedAdamBuilder,
    ("adam", "fused_adam_sycl"): XPU.FusedAdamBuilder,
    ("adam", "fused_adam_npu"): NPU.FusedAdamBuilder,
    ("aio", "async_io"): AsyncIOBuilder,
    ("lamb", "cpu_lamb"): CPULambBuilder,
    ("lamb", "fused_lamb"): FusedLambBuilder,
    ("lamb", "fused_lamb_sycl"): XPU.FusedLambBuilder,
    ("lion", "cpu_lion"): CPULionBuilder,
    ("lion", "fused_lion"): FusedLionBuilder,
    ("lion", "fused_lion_sycl"): XPU.FusedLionBuilder,
    ("lion", "fused_lion_npu"): NPU.FusedLionBuilder,
    ("pin_memory", "pin_memory"): PinMemoryBuilder,
}
