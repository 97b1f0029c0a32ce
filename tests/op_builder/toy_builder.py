"""A builder of the tiny toy op in fixtures/toy, for fast tests of the op-builder machinery."""

from __future__ import annotations

from pathlib import Path

from anyaccel.op_builder.backends.cpu import TorchCPUOpBuilder

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "toy"


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
        return ["include"]

    def cxx_args(self) -> list[str]:
        return super().cxx_args() + ([f"-DTOY_VARIANT_{self.variant}"] if self.variant else [])

    def register_fakes(self, namespace: str) -> None:
        import torch

        torch.library.register_fake(f"{namespace}::scale_")(_scale_fake)
