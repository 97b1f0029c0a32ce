"""``CPUAdamBuilder``: the fused CPU Adam/AdamW step (``anyaccel/csrc/adam/cpu_adam.cpp``)."""

from __future__ import annotations

from typing import ClassVar

from anyaccel.op_builder.cpu import TorchCPUOpBuilder


def _adam_step_fake(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay,
                    bias_correction, adamw_mode) -> None:
    """Fake of ``adam_step``: it mutates its tensor-list arguments in place and returns nothing."""
    return None


class CPUAdamBuilder(TorchCPUOpBuilder):
    """Builds the CPU Adam op (schema in docs/architecture.md "The CPU Adam op").

    One translation unit including only ``torch/library.h`` and ATen headers (no ``torch/extension.h``, no
    pybind11), which is why a cold build takes seconds rather than DeepSpeed's 45.7 s.
    """

    NAME: ClassVar[str] = "cpu_adam"
    BUILD_VAR: ClassVar[str] = "ANYACCEL_BUILD_CPU_ADAM"

    def sources(self) -> list[str]:
        """``csrc/adam/cpu_adam.cpp``."""
        return ["csrc/adam/cpu_adam.cpp"]

    def include_paths(self) -> list[str]:
        """``csrc/includes`` (shared SIMD helpers)."""
        return ["csrc/includes"]

    def register_fakes(self, namespace: str) -> None:
        """Register the fake of ``<namespace>::adam_step`` so ``torch.compile`` and ``opcheck`` can trace it."""
        import torch

        torch.library.register_fake(f"{namespace}::adam_step")(_adam_step_fake)
