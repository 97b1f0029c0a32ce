"""``TorchCPUOpBuilder``: host (CPU) ops compiled against torch, with the CPU ISA level as data."""

from __future__ import annotations

from typing import Any, ClassVar, Optional

from anyaccel.op_builder.builder import OpBuilder
from anyaccel.op_builder.cpu_isa import ISALevel, resolve_isa


class TorchCPUOpBuilder(OpBuilder):
    """Base of CPU ops.

    Flags (docs/architecture.md "CPU ISA levels"): :data:`COMMON_CXX_ARGS`, then the ISA level's one macro
    and flags; link with :data:`COMMON_LDFLAGS`. The C++ standard is the one torch's headers require
    (``torch.utils.cpp_extension`` passes it). Nothing CUDA is compiled or linked (``WITH_CUDA = False``),
    also on a CUDA build of torch (user pain P7).

    The ISA level is resolved once per builder instance (``ANYACCEL_CPU_ISA`` or torch's CPU capability; see
    :func:`~anyaccel.op_builder.cpu_isa.resolve_isa`) and is part of the cache key.
    """

    BACKEND: ClassVar[str] = "cpu"
    WITH_CUDA: ClassVar[bool] = False
    COMMON_CXX_ARGS: ClassVar[tuple[str, ...]] = ("-O3", "-fopenmp")
    COMMON_LDFLAGS: ClassVar[tuple[str, ...]] = ("-fopenmp",)

    def __init__(self) -> None:
        super().__init__()
        self._isa: Optional[ISALevel] = None

    def isa_level(self) -> ISALevel:
        """The chosen :class:`~anyaccel.op_builder.cpu_isa.ISALevel` (resolved on first use).

        Raises:
            ISAError: ``ANYACCEL_CPU_ISA`` is invalid or names a level this CPU lacks.
        """
        if self._isa is None:
            self._isa = resolve_isa()
        return self._isa

    def isa(self) -> Optional[str]:
        """The chosen level's name: "avx512", "avx2", "neon" or "portable"."""
        return self.isa_level().name

    def cxx_args(self) -> list[str]:
        """Common CPU flags plus the ISA macro and flags."""
        return list(self.COMMON_CXX_ARGS) + self.isa_level().compile_args()

    def extra_ldflags(self) -> list[str]:
        """``-fopenmp``; never a CUDA library."""
        return list(self.COMMON_LDFLAGS)

    def extra_key_inputs(self) -> dict[str, Any]:
        """CPU builds have no toolkit or GPU arch list beyond the base inputs."""
        return {}
