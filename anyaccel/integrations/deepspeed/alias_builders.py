"""A class per DeepSpeed builder name served by a build of another name (generated: do not edit).

Written by ``scripts/gen_builders.py`` from ``ALIASES`` (`anyaccel.integrations.deepspeed.builder_names`) and the
op specs; ``tests/op_builder/test_builders_module.py`` fails when this file, the table and the specs disagree (run
``python scripts/gen_builders.py`` to rewrite it). Each class is named after DeepSpeed's builder name, on the
build's backend base, with the build's ``NAME``, ``BUILD_VAR``, ``SPEC`` and ``BUILD`` (so the same cache entry
and loaded library as the build's own class): ``create_op_builder("FusedAdamBuilder")`` on the CPU returns
``FusedAdamBuilder`` here, through the alias's ``builder_class``.

Imported on first use of one of these names, never by ``import anyaccel.integrations.deepspeed``.
"""

from __future__ import annotations

from anyaccel.op_builder.backends.cpu import TorchCPUOpBuilder
from anyaccel.spec import op_spec

__all__ = [
    "FusedAdamBuilder",
    "FusedLambBuilder",
    "FusedLionBuilder",
]


class FusedAdamBuilder(TorchCPUOpBuilder):
    """FusedAdamBuilder: the CPUAdamBuilder build (cpu_adam) under another builder name on cpu. Adam / AdamW step over
    many tensors in one call (CPU SIMD, CUDA, Triton, SYCL, NPU).
    """

    NAME = "cpu_adam"
    BUILD_VAR = "ANYACCEL_BUILD_CPU_ADAM"
    SPEC = op_spec("adam")
    BUILD = SPEC.build("cpu_adam")


class FusedLionBuilder(TorchCPUOpBuilder):
    """FusedLionBuilder: the CPULionBuilder build (cpu_lion) under another builder name on cpu. Lion step over many
    tensors in one call (CPU SIMD, CUDA, Triton, SYCL, NPU).
    """

    NAME = "cpu_lion"
    BUILD_VAR = "ANYACCEL_BUILD_CPU_LION"
    SPEC = op_spec("lion")
    BUILD = SPEC.build("cpu_lion")


class FusedLambBuilder(TorchCPUOpBuilder):
    """FusedLambBuilder: the CPULambBuilder build (cpu_lamb) under another builder name on cpu. LAMB step (per-tensor
    trust ratio) over many tensors in one call (CPU SIMD, CUDA, SYCL, Triton).
    """

    NAME = "cpu_lamb"
    BUILD_VAR = "ANYACCEL_BUILD_CPU_LAMB"
    SPEC = op_spec("lamb")
    BUILD = SPEC.build("cpu_lamb")
