"""``FusedLionBuilder``: the CUDA multi-tensor Lion op (``anyaccel/csrc/lion/fused_lion_cuda.cu``).

The op (namespace per docs/architecture.md)::

    lion_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] model_copies,
              float lr, float beta1, float beta2, float weight_decay) -> ()
"""

from __future__ import annotations

from anyaccel.op_builder.cuda import CUDAOpBuilder


class FusedLionBuilder(CUDAOpBuilder):
    """Builds the fused multi-tensor Lion CUDA kernel (DeepSpeed's ``FusedLionBuilder`` name)."""

    NAME = "fused_lion"
    BUILD_VAR = "ANYACCEL_BUILD_FUSED_LION"
    SOURCES = ("lion/fused_lion_cuda.cu",)
