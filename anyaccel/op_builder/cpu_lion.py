"""``CPULionBuilder``: the fused CPU Lion step (``anyaccel/csrc/lion/cpu_lion.cpp``)."""

from __future__ import annotations

from typing import ClassVar

from anyaccel.op_builder.cpu import TorchCPUOpBuilder
from anyaccel.op_builder.host_fakes import lion_step_fake


class CPULionBuilder(TorchCPUOpBuilder):
    """Builds the CPU Lion op (schema in docs/architecture.md "The CPU Lion op").

    The CPU counterpart of ``FusedLionBuilder`` and DeepSpeed's ``CPULionBuilder`` (same class name, so
    ``get_accelerator().create_op_builder("CPULionBuilder")`` works for DeepSpeed callers). One translation
    unit including only ``torch/library.h`` and ATen headers, sharing ``csrc/includes/simd.h`` with the CPU
    Adam op; the ISA level is chosen as for every :class:`TorchCPUOpBuilder` (``ANYACCEL_CPU_ISA`` or the
    CPU's capability).

    Side effects: ``load()`` may run the C++ compiler (cold cache) and loads a shared library; nothing
    happens at construction.
    """

    NAME: ClassVar[str] = "cpu_lion"
    BUILD_VAR: ClassVar[str] = "ANYACCEL_BUILD_CPU_LION"

    def sources(self) -> list[str]:
        """``csrc/lion/cpu_lion.cpp``."""
        return ["csrc/lion/cpu_lion.cpp"]

    def include_paths(self) -> list[str]:
        """``csrc/includes`` (shared SIMD helpers)."""
        return ["csrc/includes"]

    def register_fakes(self, namespace: str) -> None:
        """Register the fake of ``<namespace>::lion_step`` so ``torch.compile`` and ``opcheck`` can trace it.

        Args:
            namespace: the loaded library's op namespace (``anyaccel_cpu_lion_<key prefix>``).
        """
        import torch

        torch.library.register_fake(f"{namespace}::lion_step")(lion_step_fake)
