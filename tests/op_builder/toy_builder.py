"""A hand-written builder of the tiny toy op in fixtures/toy, for fast tests of the op-builder machinery.

The toy op has no op spec (so no generated schema header): its source registers plain ``m.def`` schemas
on torch's stable ABI with anyaccel's ``stable/boxing.h``, so the builder puts both its own include
directory and the package's ``csrc/includes`` on the include path (the latter as an absolute path, since
the toy's sources live outside the package).
"""

from __future__ import annotations

from pathlib import Path

from anyaccel.op_builder.backends.cpu import TorchCPUOpBuilder
from anyaccel.op_builder.core.hooks import PACKAGE_DIR

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "toy"
#: anyaccel's shared kernel headers (stable/boxing.h, stable/tensor.h, ...).
PACKAGE_INCLUDES = PACKAGE_DIR / "csrc" / "includes"


def _scale_fake(x, alpha) -> None:
    return None


class ToyBuilder(TorchCPUOpBuilder):
    """Builds ``toy.cpp`` (``scale_`` and ``isa``); ``variant`` adds a define so each test gets its own key."""

    NAME = "toy"
    BUILD_VAR = "ANYACCEL_BUILD_TOY"

    def __init__(self, variant: str = "", source: str = "toy.cpp", root: Path = FIXTURES) -> None:
        super().__init__()
        self.variant = variant
        self.source = source
        self.root = Path(root)

    def source_root(self) -> Path:
        return self.root

    def sources(self) -> list[str]:
        return [self.source]

    def include_paths(self) -> list[str]:
        return ["include", str(PACKAGE_INCLUDES)]

    def cxx_args(self) -> list[str]:
        return super().cxx_args() + ([f"-DTOY_VARIANT_{self.variant}"] if self.variant else [])

    def register_fakes(self, namespace: str) -> None:
        import torch

        torch.library.register_fake(f"{namespace}::scale_")(_scale_fake)
