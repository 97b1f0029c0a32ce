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
(:mod:`anyaccel.integrations.deepspeed.view`).

Interim, until anyaccel's op modules offer DeepSpeed's module ABI (issue 11, op-ABI half): when the module
anyaccel's builder loads lacks the functions DeepSpeed's callers use (:data:`DEEPSPEED_MODULE_ABI`), the
adapter falls back to DeepSpeed's own builder for that name, which DeepSpeed JIT-builds into
``TORCH_EXTENSIONS_DIR``, with one warning; ``ANYACCEL_DEEPSPEED_ABI_FALLBACK=0`` makes it a
:class:`DeepSpeedABIMissingError` instead.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

from anyaccel.integrations.deepspeed.errors import DeepSpeedABIMissingError, DeepSpeedBuilderNotImplementedError

logger = logging.getLogger(__name__)

__all__ = [
    "ABI_FALLBACK_ENV",
    "DEEPSPEED_MODULE_ABI",
    "DEEPSPEED_ACCELERATORS",
    "NOT_IMPLEMENTED_BUILDER",
    "DeepSpeedBuilderAdapter",
    "deepspeed_builder_class",
    "implemented_builders",
    "abi_fallback_enabled",
]

#: ``0``/``false``/``no``/``off``: refuse (typed error) instead of falling back to DeepSpeed's own builder
#: when anyaccel's op module lacks DeepSpeed's functions. Default: fall back (interim, see module doc).
ABI_FALLBACK_ENV = "ANYACCEL_DEEPSPEED_ABI_FALLBACK"

#: DeepSpeed builder name -> functions DeepSpeed's callers use on the module ``load()`` returns (sources:
#: ``deepspeed/ops/adam/cpu_adam.py``, ``ops/lion/cpu_lion.py``, ``ops/adagrad/cpu_adagrad.py``,
#: ``ops/adam/fused_adam.py``, ``ops/lion/fused_lion.py``, ``ops/lamb/fused_lamb.py`` in DeepSpeed 0.19.8).
DEEPSPEED_MODULE_ABI: Mapping[str, tuple[str, ...]] = {
    "CPUAdamBuilder": ("create_adam", "adam_update", "destroy_adam"),
    "CPULionBuilder": ("create_lion", "lion_update", "destroy_lion"),
    "CPUAdagradBuilder": ("create_adagrad", "adagrad_update", "destroy_adagrad"),
    "FusedAdamBuilder": ("multi_tensor_adam",),
    "FusedLionBuilder": ("multi_tensor_lion",),
    "FusedLambBuilder": ("lamb",),
}

#: anyaccel accelerator name -> DeepSpeed's own accelerator class for the same device ("module:Class"),
#: whose ``get_op_builder`` gives DeepSpeed's builder for the interim ABI fallback.
DEEPSPEED_ACCELERATORS: Mapping[str, str] = {
    "cpu": "deepspeed.accelerator.cpu_accelerator:CPU_Accelerator",
    "cuda": "deepspeed.accelerator.cuda_accelerator:CUDA_Accelerator",
    "xpu": "deepspeed.accelerator.xpu_accelerator:XPU_Accelerator",
    "npu": "deepspeed.accelerator.npu_accelerator:NPU_Accelerator",
    "mps": "deepspeed.accelerator.mps_accelerator:MPS_Accelerator",
}

#: DeepSpeed's placeholder class name; asking for it returns DeepSpeed's class itself, so that
#: ``isinstance(builder, deepspeed.ops.op_builder.NotImplementedBuilder)`` holds for every placeholder.
NOT_IMPLEMENTED_BUILDER = "NotImplementedBuilder"

_FALSE = ("0", "false", "no", "off")
_lock = threading.RLock()
_adapters: dict[tuple[type, str, str], type] = {}
_placeholders: dict[tuple[str, str], type] = {}
_deepspeed_accelerators: dict[str, Any] = {}
_warned_fallback: set = set()


def abi_fallback_enabled() -> bool:
    """True unless ``ANYACCEL_DEEPSPEED_ABI_FALLBACK`` is ``0``/``false``/``no``/``off`` (read at each load)."""
    return os.environ.get(ABI_FALLBACK_ENV, "1").strip().lower() not in _FALSE


def implemented_builders(accelerator_name: str) -> list[str]:
    """Builder names anyaccel implements for ``accelerator_name`` (for error messages).

    Side effects: imports the builder classes through the registry. Returns ``[]`` when the registry offers
    no listing (it is only required to offer ``get_builder_class``).
    """
    from anyaccel.op_builder import registry

    names = getattr(registry, "all_builder_names", None)
    if names is None:
        return []
    return [n for n in names() if registry.get_builder_class(n, accelerator_name) is not None]


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
        :class:`DeepSpeedBuilderNotImplementedError`.
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


def _deepspeed_own_builder_class(accelerator_name: str, name: str) -> type | None:
    """DeepSpeed's own builder class for ``name`` on the device ``accelerator_name``, or None.

    Side effects: constructs DeepSpeed's accelerator for that device once (cached).
    """
    path = DEEPSPEED_ACCELERATORS.get(accelerator_name)
    if path is None:
        return None
    with _lock:
        accelerator = _deepspeed_accelerators.get(accelerator_name)
        if accelerator is None:
            module_name, _, class_name = path.partition(":")
            accelerator = getattr(importlib.import_module(module_name), class_name)()
            _deepspeed_accelerators[accelerator_name] = accelerator
    builder = accelerator.get_op_builder(name)
    return builder if isinstance(builder, type) else None


_BuilderBase: Any = object  # the adapted anyaccel builder class comes second in the MRO


class DeepSpeedBuilderAdapter(_BuilderBase):
    """Mixin put in front of an anyaccel builder class to give it DeepSpeed's builder contract.

    Adds the instance attribute ``name`` (DeepSpeed's ``OpBuilder.__init__`` sets it; ``ALL_OPS`` and
    ``ds_report`` key on it), accepts DeepSpeed's ``load(verbose=True)`` default, and checks the loaded
    module for DeepSpeed's functions (:data:`DEEPSPEED_MODULE_ABI`), falling back to DeepSpeed's own
    builder while anyaccel's module lacks them (see the module doc).

    Attributes:
        deepspeed_builder_name: the DeepSpeed class name this adapter answers for (``"CPUAdamBuilder"``).
        accelerator_name: the anyaccel accelerator it was resolved for.
    """

    deepspeed_builder_name: ClassVar[str] = ""
    accelerator_name: ClassVar[str] = ""

    def __init__(self, name: str | None = None) -> None:
        super().__init__()
        self.name: str = name or self.NAME

    def load(self, verbose: bool = False) -> Any:
        """anyaccel's ``load()``, checked for DeepSpeed's module functions (see the class doc).

        Raises:
            DeepSpeedABIMissingError: functions are missing and ``ANYACCEL_DEEPSPEED_ABI_FALLBACK=0``, or no
                DeepSpeed builder exists to fall back to.
            OpBuilderError: the errors of anyaccel's ``load()`` (typed build errors).
        """
        return self._deepspeed_module(super().load(verbose), verbose)

    def jit_load(self, verbose: bool = False) -> Any:
        """anyaccel's ``jit_load()``, checked like :meth:`load`."""
        return self._deepspeed_module(super().jit_load(verbose), verbose)

    def _deepspeed_module(self, module: Any, verbose: bool) -> Any:
        required = DEEPSPEED_MODULE_ABI.get(self.deepspeed_builder_name, ())
        missing = [fn for fn in required if not hasattr(module, fn)]
        if not missing:
            return module
        fallback = _deepspeed_own_builder_class(self.accelerator_name, self.deepspeed_builder_name)
        if fallback is None or not abi_fallback_enabled():
            raise DeepSpeedABIMissingError(self.deepspeed_builder_name, self.NAME, missing, ABI_FALLBACK_ENV)
        if self.deepspeed_builder_name not in _warned_fallback:
            _warned_fallback.add(self.deepspeed_builder_name)
            logger.warning(
                "anyaccel's %r op lacks DeepSpeed's functions %s; using DeepSpeed's own %s instead, which "
                "DeepSpeed builds into TORCH_EXTENSIONS_DIR (interim until anyaccel's ops offer DeepSpeed's "
                "ABI; %s=0 makes this an error)",
                self.NAME, ", ".join(missing), self.deepspeed_builder_name, ABI_FALLBACK_ENV,
            )
        return fallback().load(verbose)


def adapter_class(builder_class: type, name: str, accelerator_name: str) -> type:
    """The DeepSpeed-facing subclass of anyaccel's ``builder_class`` (cached).

    Args:
        builder_class: the class ``anyaccel.op_builder.registry.get_builder_class`` returned.
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
        :func:`adapter_class` of ``anyaccel_class``, or :func:`placeholder_class` when it is None.
    """
    if anyaccel_class is None:
        return placeholder_class(name, accelerator_name)
    return adapter_class(anyaccel_class, name, accelerator_name)
