"""Which builder class serves an op on an accelerator (docs/architecture.md "Accelerator → op builder").

The table is data: builder class name (what DeepSpeed callers pass to ``create_op_builder``, e.g.
``"CPUAdamBuilder"``) -> {accelerator name or ``"*"`` (every accelerator, for host ops) -> the class as
``"module:Class"``}. The op's short ``NAME`` (``"cpu_adam"``) is accepted as an alias. Classes are imported
only when asked for, so this module is cheap to import. Other parts (e.g. a CUDA ``FusedAdam``) add rows
with :func:`register_builder`.
"""

from __future__ import annotations

import importlib
import threading
from typing import Optional, Union

from anyaccel.op_builder.errors import UnknownOpError

ANY_ACCELERATOR = "*"

_BUILDERS: dict[str, dict[str, Union[str, type]]] = {
    "CPUAdamBuilder": {ANY_ACCELERATOR: "anyaccel.op_builder.cpu_adam:CPUAdamBuilder"},
    "CPULionBuilder": {ANY_ACCELERATOR: "anyaccel.op_builder.cpu_lion:CPULionBuilder"},
    "FusedAdamBuilder": {"cuda": "anyaccel.op_builder.fused_adam:FusedAdamBuilder",
                         "xpu": "anyaccel.op_builder.xpu_ops:XPUFusedAdamBuilder",
                         "npu": "anyaccel.op_builder.npu_ops:NPUFusedAdamBuilder"},
    "FusedLionBuilder": {"cuda": "anyaccel.op_builder.fused_lion:FusedLionBuilder",
                         "xpu": "anyaccel.op_builder.xpu_ops:XPUFusedLionBuilder",
                         "npu": "anyaccel.op_builder.npu_ops:NPUFusedLionBuilder"},
}
#: op NAME -> builder class name, so ``create_op_builder("cpu_adam")`` works too.
_ALIASES: dict[str, str] = {
    "cpu_adam": "CPUAdamBuilder",
    "cpu_lion": "CPULionBuilder",
    "fused_adam": "FusedAdamBuilder",
    "fused_lion": "FusedLionBuilder",
}
_LOCK = threading.Lock()


def register_builder(name: str, accelerator_name: str, cls: Union[str, type], override: bool = False) -> None:
    """Add a builder for ``name`` on ``accelerator_name`` (``"*"`` for every accelerator).

    Args:
        name: the builder class name (``"FusedAdamBuilder"``) or the op's ``NAME`` (``"fused_adam"``); the
            row is keyed by the class name and the other spelling becomes an alias.
        accelerator_name: an accelerator's ``_name`` ("cpu", "cuda", ...) or ``"*"``.
        cls: the builder class, or ``"module:Class"`` to import it lazily.
        override: replace an existing row instead of raising.

    Raises:
        ValueError: the row exists and ``override`` is False.
    """
    class_name = cls.rpartition(":")[2] if isinstance(cls, str) else cls.__name__
    with _LOCK:
        if name != class_name:
            _ALIASES[name] = class_name
        row = _BUILDERS.setdefault(class_name, {})
        if accelerator_name in row and not override:
            raise ValueError(f"op {name!r} already has a builder for {accelerator_name!r} ({row[accelerator_name]}); "
                             f"pass override=True to replace it")
        row[accelerator_name] = cls


def all_builder_names() -> list[str]:
    """Every builder class name any accelerator knows, sorted (aliases not repeated)."""
    return sorted(_BUILDERS)


def get_builder_class(name: str, accelerator_name: str) -> Optional[type]:
    """The builder class of ``name`` (``"CPUAdamBuilder"`` or ``"cpu_adam"``) for ``accelerator_name``.

    Returns:
        The class (a subclass of :class:`~anyaccel.op_builder.builder.OpBuilder`); None when the op exists
        but not for this accelerator (DeepSpeed's contract).

    Raises:
        UnknownOpError: no accelerator knows ``name`` (neither a builder class name nor an op name); the
            message lists every known name.
    """
    row = _BUILDERS.get(_ALIASES.get(name, name))
    if row is None:
        raise UnknownOpError(f"unknown op builder {name!r}; known builders: {', '.join(all_builder_names())} "
                             f"(or their op names: {', '.join(sorted(_ALIASES))})")
    target = row.get(accelerator_name, row.get(ANY_ACCELERATOR))
    if target is None:
        return None
    if isinstance(target, str):
        module_name, _, cls_name = target.partition(":")
        target = getattr(importlib.import_module(module_name), cls_name)
    return target


def any_builder_class(name: str) -> Optional[type]:
    """A class serving ``name`` on some accelerator (the host row first), for facts every row shares.

    AOT selection reads ``BUILD_VAR`` through this, so a device-only op (``FusedAdamBuilder``, which has no
    ``"*"`` row) is still selected by its own variable (``ANYACCEL_BUILD_FUSED_ADAM``).

    Returns:
        The class, or None when ``name`` has no row at all.
    """
    row = _BUILDERS.get(_ALIASES.get(name, name)) or {}
    for accelerator_name in sorted(row, key=lambda a: a != ANY_ACCELERATOR):
        return get_builder_class(name, accelerator_name)
    return None
