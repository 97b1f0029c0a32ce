"""``FusedLionBuilder``: the CUDA multi-tensor Lion op (``anyaccel/csrc/lion/fused_lion_cuda.cu``).

The op (namespace per docs/architecture.md "The GPU fused optimizer ops")::

    lion_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] model_copies,
              float lr, float beta1, float beta2, float weight_decay) -> ()
"""

from __future__ import annotations

from typing import ClassVar

from anyaccel.op_builder.cuda import CUDAOpBuilder


def _lion_step_fake(params, grads, exp_avgs, model_copies, lr, beta1, beta2, weight_decay) -> None:  # noqa: ANN001
    """Fake of ``lion_step``: it mutates its tensor-list arguments in place and returns nothing."""
    return None


class FusedLionBuilder(CUDAOpBuilder):
    """Builds the fused multi-tensor Lion CUDA kernel (DeepSpeed's ``FusedLionBuilder`` name)."""

    NAME: ClassVar[str] = "fused_lion"
    BUILD_VAR: ClassVar[str] = "ANYACCEL_BUILD_FUSED_LION"

    def sources(self) -> list[str]:
        """``csrc/lion/fused_lion_cuda.cu``."""
        return ["csrc/lion/fused_lion_cuda.cu"]

    def register_fakes(self, namespace: str) -> None:
        """Register the fake of ``<namespace>::lion_step`` so ``torch.compile`` can trace it."""
        import torch

        torch.library.register_fake(f"{namespace}::lion_step")(_lion_step_fake)
