"""``FusedAdamBuilder``: the CUDA multi-tensor Adam/AdamW op (``anyaccel/csrc/adam/fused_adam_cuda.cu``).

The op (namespace per docs/architecture.md "The GPU fused optimizer ops")::

    adam_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs,
              Tensor(d!)[] model_copies, int step, float lr, float beta1, float beta2, float eps,
              float weight_decay, bool bias_correction, bool adamw_mode) -> ()
"""

from __future__ import annotations

from typing import ClassVar

from anyaccel.op_builder.cuda import CUDAOpBuilder


def _adam_step_fake(params, grads, exp_avgs, exp_avg_sqs, model_copies, step, lr, beta1, beta2, eps,  # noqa: ANN001
                    weight_decay, bias_correction, adamw_mode) -> None:
    """Fake of ``adam_step``: it mutates its tensor-list arguments in place and returns nothing."""
    return None


class FusedAdamBuilder(CUDAOpBuilder):
    """Builds the fused multi-tensor Adam CUDA kernel (DeepSpeed's ``FusedAdamBuilder`` name)."""

    NAME: ClassVar[str] = "fused_adam"
    BUILD_VAR: ClassVar[str] = "ANYACCEL_BUILD_FUSED_ADAM"

    def sources(self) -> list[str]:
        """``csrc/adam/fused_adam_cuda.cu``."""
        return ["csrc/adam/fused_adam_cuda.cu"]

    def register_fakes(self, namespace: str) -> None:
        """Register the fake of ``<namespace>::adam_step`` so ``torch.compile`` can trace it."""
        import torch

        torch.library.register_fake(f"{namespace}::adam_step")(_adam_step_fake)
