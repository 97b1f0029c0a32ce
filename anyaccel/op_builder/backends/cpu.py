"""``TorchCPUOpBuilder``: host (CPU) ops on torch's stable ABI, with the CPU ISA level as data.

The CPU backend holds the host compiler's toolchain record (`anyaccel.op_builder.toolchains.records`) and adds
nothing to it: the compiler is the record's (``CXX``, else ``c++``, ``g++``, ``clang++`` on ``PATH``), the flags
of a SIMD level are the record's flags for that target, the sources are of its suffixes.
"""

from __future__ import annotations

from typing import Any, ClassVar

from typing_extensions import override

from anyaccel.op_builder.core.builder import OpBuilder
from anyaccel.op_builder.errors import ISAError
from anyaccel.op_builder.toolchains.cpu_isa import ISALevel, resolve_isa
from anyaccel.op_builder.toolchains.records import TOOLCHAINS, Toolchain, flags_for


class TorchCPUOpBuilder(OpBuilder):
    """Base of CPU ops.

    Flags (docs/architecture.md "CPU ISA levels"): `COMMON_CXX_ARGS`, then `TOOLCHAIN`'s flags for the ISA
    level (its one macro and flags). Threads come from torch's own pool through the stable ABI
    (``torch_parallel_for``), so the kernels follow ``torch.set_num_threads`` and link no OpenMP runtime of their
    own; nothing CUDA is compiled or linked, also on a CUDA build of torch (a CPU op must build on a machine
    without a toolkit).

    The ISA level is resolved once per builder instance (``ANYACCEL_CPU_ISA`` or the best level the CPU
    runs among the levels the spec's sources implement; see
    `resolve_isa`) and is part of the cache key.

    Attributes:
        TOOLCHAIN: the host compiler's record: its targets are the SIMD levels.
    """

    BACKEND: ClassVar[str] = "cpu"
    DEVICE_TYPE: ClassVar[str] = "cpu"
    COMMON_CXX_ARGS: ClassVar[tuple[str, ...]] = ("-O3",)
    TOOLCHAIN: ClassVar[Toolchain] = TOOLCHAINS["host"]

    def __init__(self, isa: str | None = None) -> None:
        """Args:
            isa: build this SIMD level whatever the CPU runs (AOT builds of a wheel that carries every
                level); None: ``ANYACCEL_CPU_ISA`` or the best level of this CPU.

        Raises:
            ISAError: ``isa`` is not a level this op implements.
        """
        super().__init__()
        self._isa: ISALevel | None = None
        if isa is not None:
            from anyaccel.op_builder.toolchains.cpu_isa import ISA_LEVELS

            levels = self.BUILD.isa_levels if self.BUILD is not None and self.BUILD.isa_levels else tuple(ISA_LEVELS)
            if isa not in ISA_LEVELS or (isa not in levels and isa != "portable"):
                raise ISAError(f"op {self.NAME}: SIMD level {isa!r} is not one of {', '.join(levels)}")
            self._isa = ISA_LEVELS[isa]

    def isa_level(self) -> ISALevel:
        """The chosen `ISALevel` (resolved on first use).

        Raises:
            ISAError: ``ANYACCEL_CPU_ISA`` is invalid or names a level this CPU lacks.
        """
        if self._isa is None:
            levels = self.BUILD.isa_levels if self.BUILD is not None and self.BUILD.isa_levels else None
            self._isa = resolve_isa(implemented=levels)
        return self._isa

    @override
    def isa(self) -> str | None:
        """The chosen level's name: "avx512", "avx2", "sve", "neon" or "portable"."""
        return self.isa_level().name

    @override
    def cxx_args(self) -> list[str]:
        """Common CPU flags, the spec's flags, then the host record's flags for the ISA level (its macro and flags).

        Raises:
            ISAError: ``ANYACCEL_CPU_ISA`` is invalid or names a level this CPU lacks.
        """
        return list(self.COMMON_CXX_ARGS) + super().cxx_args() + flags_for(self.TOOLCHAIN, [self.isa_level().name])

    @override
    def extra_key_inputs(self) -> dict[str, Any]:
        """CPU builds have no toolkit or GPU arch list beyond the base inputs."""
        return {}
