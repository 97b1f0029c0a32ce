"""``CPUAdamBuilder``: the fused CPU Adam/AdamW step (``anyaccel/csrc/adam/cpu_adam.cpp``)."""

from __future__ import annotations

from typing import ClassVar

from anyaccel.op_builder.cpu import TorchCPUOpBuilder
from anyaccel.op_builder.host_fakes import adam_step_fake


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
        """Register the validating fake of ``<namespace>::adam_step`` (see :mod:`anyaccel.op_builder.host_fakes`)
        so ``torch.compile`` and ``opcheck`` can trace it and meta-device calls are refused.

        Args:
            namespace: the loaded library's op namespace (``anyaccel_cpu_adam_<key prefix>``).
        """
        import torch

        torch.library.register_fake(f"{namespace}::adam_step")(adam_step_fake)
