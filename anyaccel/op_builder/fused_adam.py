"""``FusedAdamBuilder``: the CUDA multi-tensor Adam/AdamW op (``anyaccel/csrc/adam/fused_adam_cuda.cu``).

The op (namespace per docs/architecture.md)::

    adam_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs,
              Tensor(d!)[] model_copies, int step, float lr, float beta1, float beta2, float eps,
              float weight_decay, bool bias_correction, bool adamw_mode) -> ()
"""

from __future__ import annotations

from anyaccel.op_builder.cuda import CUDAOpBuilder


class FusedAdamBuilder(CUDAOpBuilder):
    """Builds the fused multi-tensor Adam CUDA kernel (DeepSpeed's ``FusedAdamBuilder`` name)."""

    NAME = "fused_adam"
    BUILD_VAR = "ANYACCEL_BUILD_FUSED_ADAM"
    SOURCES = ("adam/fused_adam_cuda.cu",)
