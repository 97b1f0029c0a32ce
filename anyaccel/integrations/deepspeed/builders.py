"""Op builders as DeepSpeed sees them: anyaccel's where anyaccel implements one, a placeholder elsewhere.

DeepSpeed resolves builders by class name through ``get_accelerator().get_op_builder(name)`` /
``create_op_builder(name)``, both at ``import deepspeed`` (``deepspeed/ops/op_builder/__init__.py`` binds
``deepspeed.ops.op_builder.<Name>Builder`` for every builder DeepSpeed has) and later (``ds_report``'s
``all_ops``, ``comm/torch.py``'s ``ShareMemCommBuilder``...). Its callers expect, per name:

- a builder class with ``NAME``, an instance ``name``, ``is_compatible(verbose)``, ``absolute_name()`` and
  ``load(verbose)`` returning a module with DeepSpeed's functions (``create_adam``, ``adam_update``...);
- for a builder the accelerator lacks, DeepSpeed's ``NotImplementedBuilder`` (its CPU, XPU and MPS
  accelerators) or None (its CUDA accelerator). The placeholder is what every caller handles: module-level
  ``CPUAdamBuilder.NAME`` in DeepSpeed's tests, ``isinstance(b, NotImplementedBuilder)`` in ``comm/ccl.py``,
  ``__compatible_ops__[b.NAME]`` in ``comm/torch.py``. So this module answers a placeholder subclassing
  DeepSpeed's ``NotImplementedBuilder`` (``NAME`` ``"deepspeed_not_implemented"``, which DeepSpeed's
  ``__compatible_ops__`` marks incompatible), whose ``load()`` raises a typed error naming what anyaccel
  implements.

anyaccel's own ``create_op_builder`` is unchanged: an unknown name still raises ``UnknownOpError`` listing the
valid names. The DeepSpeed behaviour lives only here, applied through the DeepSpeed-facing accelerator
(`anyaccel.integrations.deepspeed.view`).

DeepSpeed's optimizers call functions on the module ``load()`` returns (``create_adam``, ``adam_update``,
``multi_tensor_adam``...). anyaccel's op modules offer them: the integration declares DeepSpeed's module ABI
per op family ([`anyaccel.integrations.deepspeed.abi`][anyaccel.integrations.deepspeed.abi]), and
[`DEEPSPEED_MODULE_ABI`][anyaccel.integrations.deepspeed.builders.DEEPSPEED_MODULE_ABI] (builder name ->
the functions DeepSpeed's callers use) is read from those declarations. The adapter checks a loaded module
against it and raises [`DeepSpeedABIMissingError`][anyaccel.integrations.deepspeed.DeepSpeedABIMissingError] for a
builder whose module lacks them (a plug-in op
family published under a DeepSpeed builder name without declaring the ABI). There is no fallback to
DeepSpeed's own builders: with anyaccel installed, DeepSpeed builds nothing itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from anyaccel.integrations.deepspeed.errors import DeepSpeedABIMissingError, DeepSpeedBuilderNotImplementedError

logger = logging.getLogger(__name__)

__all__ = [
    "DEEPSPEED_MODULE_ABI",
    "NOT_IMPLEMENTED_BUILDER",
    "DeepSpeedBuilderAdapter",
    "deepspeed_builder_class",
    "implemented_builders",
]


class _SpecModuleABI(Mapping[str, tuple[str, ...]]):
    """DeepSpeed builder name -> the functions DeepSpeed's callers use on the module ``load()`` returns, read
    from the declarations
    ([`anyaccel.integrations.deepspeed.abi.all_abis`][anyaccel.integrations.deepspeed.abi.all_abis]) on first use (every
    platform's
    functions; the check of a loaded module uses this platform's, `required_functions`)."""

    def _table(self) -> dict[str, tuple[str, ...]]:
        from anyaccel.integrations.deepspeed.abi import all_abis

        table: dict[str, list[str]] = {}
        for abi in all_abis():
            for builder, functions in abi.builders:
                names = table.setdefault(builder, [])
                names.extend(f for f in functions if f not in names)
        return {k: tuple(v) for k, v in table.items()}

    def __getitem__(self, key: str) -> tuple[str, ...]:
        return self._table()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __repr__(self) -> str:
        return f"DEEPSPEED_MODULE_ABI({self._table()!r})"


#: DeepSpeed builder name -> functions DeepSpeed's callers use on the module ``load()`` returns, from the op
#: declarations (``CPUAdamBuilder``: ``create_adam``, ``adam_update``, ``adam_rollback``, ``destroy_adam``, ZenFlow's
#: ``zenflow_adam_*``; ``FusedAdamBuilder``: ``multi_tensor_adam``; ...; sources in each declaration).
DEEPSPEED_MODULE_ABI: Mapping[str, tuple[str, ...]] = _SpecModuleABI()


def required_functions(builder: str) -> tuple[str, ...]:
    """The functions DeepSpeed's callers use on a ``builder`` module on this platform (from the declarations).

    Returns:
        The names; empty for a builder no declaration names.
    """
    from anyaccel.integrations.deepspeed.abi import all_abis

    out: list[str] = []
    for abi in all_abis():
        out.extend(f for f in abi.functions_for([builder]) if f not in out)
    return tuple(out)

#: DeepSpeed's placeholder class name; asking for it returns DeepSpeed's class itself, so that
#: ``isinstance(builder, deepspeed.ops.op_builder.NotImplementedBuilder)`` holds for every placeholder.
NOT_IMPLEMENTED_BUILDER = "NotImplementedBuilder"

_lock = threading.RLock()
_adapters: dict[tuple[type, str, str], type] = {}
_placeholders: dict[tuple[str, str], type] = {}


def implemented_builders(accelerator_name: str) -> list[str]:
    """Builder names anyaccel implements for ``accelerator_name``, from the op registry (for error messages and
    DeepSpeed's op table, [`anyaccel.integrations.deepspeed.op_table`][anyaccel.integrations.deepspeed.op_table]).

    Side effects: makes the builder classes through the registry.
    """
    from anyaccel.ops import registry

    return [n for n in registry.all_builder_names() if registry.get_builder_class(n, accelerator_name) is not None]


def _not_implemented_base() -> type:
    """DeepSpeed's ``NotImplementedBuilder`` (imported on first use; DeepSpeed is being imported then)."""
    from deepspeed.ops.op_builder.cpu.no_impl import NotImplementedBuilder

    return NotImplementedBuilder


def placeholder_class(name: str, accelerator_name: str) -> type:
    """DeepSpeed's placeholder for ``name``: a ``NotImplementedBuilder`` subclass whose ``load`` raises.

    Args:
        name: the builder class name DeepSpeed asked for.
        accelerator_name: the accelerator's name, for the message.

    Returns:
        DeepSpeed's ``NotImplementedBuilder`` itself for ``name == "NotImplementedBuilder"``; otherwise a
        subclass (cached per name) with ``is_compatible() -> False`` and ``load()``/``jit_load()`` raising
        [`DeepSpeedBuilderNotImplementedError`][anyaccel.integrations.deepspeed.DeepSpeedBuilderNotImplementedError].
    """
    base = _not_implemented_base()
    if name == NOT_IMPLEMENTED_BUILDER:
        return base
    key = (name, accelerator_name)
    with _lock:
        cls = _placeholders.get(key)
        if cls is None:

            def load(self: Any, verbose: bool = True) -> Any:
                raise DeepSpeedBuilderNotImplementedError(name, accelerator_name,
                                                          implemented_builders(accelerator_name))

            def is_compatible(self: Any, verbose: bool = False) -> bool:
                logger.debug("anyaccel implements no %s for accelerator %r", name, accelerator_name)
                return False

            cls = type(f"AnyaccelNotImplemented{name}", (base,), {
                "__module__": __name__,
                "__doc__": f"Placeholder for DeepSpeed's {name}, which anyaccel does not implement on "
                           f"{accelerator_name!r}.",
                "anyaccel_builder_name": name,
                "load": load,
                "jit_load": load,
                "is_compatible": is_compatible,
            })
            _placeholders[key] = cls
    return cls


_BuilderBase: Any = object  # the adapted anyaccel builder class comes second in the MRO


class DeepSpeedBuilderAdapter(_BuilderBase):
    """Mixin put in front of an anyaccel builder class to give it DeepSpeed's builder contract.

    Adds the instance attribute ``name`` (DeepSpeed's ``OpBuilder.__init__`` sets it; ``ALL_OPS`` and
    ``ds_report`` key on it), accepts DeepSpeed's ``load(verbose=True)`` default, and checks the loaded
    module for DeepSpeed's functions (`required_functions`, from the op specs).

    Attributes:
        deepspeed_builder_name: the DeepSpeed class name this adapter answers for (``"CPUAdamBuilder"``).
        accelerator_name: the anyaccel accelerator it was resolved for.
    """

    deepspeed_builder_name: ClassVar[str] = ""
    accelerator_name: ClassVar[str] = ""

    def __init__(self, name: str | None = None) -> None:
        super().__init__()
        self._deepspeed_name = name or self.NAME

    @property
    def name(self) -> str:
        """DeepSpeed's instance attribute ``name`` (its ``OpBuilder.__init__(name)``): the name given, else ``NAME``.
        Writable, as DeepSpeed's is (anyaccel's ``OpBuilder.name`` is a read-only view of ``NAME``)."""
        return str(self.__dict__.get("_deepspeed_name", self.NAME))

    @name.setter
    def name(self, value: str) -> None:
        self._deepspeed_name = value

    def load(self, verbose: bool = False) -> Any:
        """anyaccel's ``load()``, checked for DeepSpeed's module functions (see the class doc).

        Raises:
            DeepSpeedABIMissingError: the loaded module lacks functions DeepSpeed's callers use.
            OpBuilderError: the errors of anyaccel's ``load()`` (typed build errors).
        """
        return self._deepspeed_module(super().load(verbose), verbose)

    def jit_load(self, verbose: bool = False) -> Any:
        """anyaccel's ``jit_load()``, checked like
        [`load`][anyaccel.integrations.deepspeed.builders.DeepSpeedBuilderAdapter.load]."""
        return self._deepspeed_module(super().jit_load(verbose), verbose)

    def _deepspeed_module(self, module: Any, verbose: bool) -> Any:
        missing = [fn for fn in required_functions(self.deepspeed_builder_name) if not hasattr(module, fn)]
        if missing:
            raise DeepSpeedABIMissingError(self.deepspeed_builder_name, self.NAME, missing)
        return module


def adapter_class(builder_class: type, name: str, accelerator_name: str) -> type:
    """The DeepSpeed-facing subclass of anyaccel's ``builder_class`` (cached).

    Args:
        builder_class: the class ``anyaccel.ops.registry.get_builder_class`` returned.
        name: the DeepSpeed builder name it answers for.
        accelerator_name: the accelerator's name.

    Returns:
        ``type(builder_class.__name__, (DeepSpeedBuilderAdapter, builder_class), ...)``: an anyaccel builder
        (``issubclass`` of ``builder_class``) with DeepSpeed's contract.
    """
    key = (builder_class, name, accelerator_name)
    with _lock:
        cls = _adapters.get(key)
        if cls is None:
            cls = type(builder_class.__name__, (DeepSpeedBuilderAdapter, builder_class), {
                "__module__": __name__,
                "__doc__": f"anyaccel's {builder_class.__qualname__} as DeepSpeed's {name}.",
                "deepspeed_builder_name": name,
                "accelerator_name": accelerator_name,
            })
            _adapters[key] = cls
    return cls


def deepspeed_builder_class(anyaccel_class: type | None, name: str, accelerator_name: str) -> type:
    """What DeepSpeed's ``get_op_builder(name)`` answers, given anyaccel's answer.

    Args:
        anyaccel_class: anyaccel's builder class for ``name`` on the accelerator, or None (none there,
            or the name is unknown to anyaccel).
        name: the builder class name DeepSpeed asked for.
        accelerator_name: the accelerator's name.

    Returns:
        `adapter_class` of ``anyaccel_class``, or `placeholder_class` when it is None.
    """
    if anyaccel_class is None:
        return placeholder_class(name, accelerator_name)
    return adapter_class(anyaccel_class, name, accelerator_name)
