"""The object ``OpBuilder.load()`` returns: the op's functions plus where they came from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


class OpModule:
    """A loaded op library.

    ``module.adam_step(...)`` is ``torch.ops.<namespace>.adam_step(...)``: attribute access forwards to the
    op namespace the library registered with ``STABLE_TORCH_LIBRARY`` (docs/architecture.md "Op builders").
    Names that are not torch ops of the library are looked up on the op spec's DeepSpeed ABI adapter, when
    the spec declares one (``create_adam``, ``adam_update``, ... for DeepSpeed's optimizers).

    Attributes:
        op: the builder's ``NAME``.
        namespace: the torch op namespace, ``anyaccel_<NAME>_<key[:10]>``.
        path: the loaded shared library.
        isa: the CPU ISA level compiled in (None for non-CPU builds).
        key: the full cache key (64 hex digits) of the build.
        source: where it was found: "prebuilt", "cache" or "built".
    """

    def __init__(self, op: str, namespace: str, path: Path, isa: str | None, key: str, source: str,
                 extras: dict[str, Any] | None = None) -> None:
        self.op = op
        self.namespace = namespace
        self.path = Path(path)
        self.isa = isa
        self.key = key
        self.source = source
        factory = (extras or {}).get("_abi_factory")
        self._abi = factory(self) if factory is not None else None

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        import torch

        ns = getattr(torch.ops, self.namespace)
        if hasattr(ns, name):
            return getattr(ns, name)
        abi = self.__dict__.get("_abi")
        if abi is not None and hasattr(abi, name):
            return getattr(abi, name)
        raise AttributeError(f"op '{self.op}' (namespace {self.namespace}, {self.path}) has no function {name!r}")

    def __repr__(self) -> str:
        return f"OpModule(op={self.op!r}, namespace={self.namespace!r}, isa={self.isa!r}, path='{self.path}')"
