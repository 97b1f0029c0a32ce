"""DeepSpeed's op-module ABI over anyaccel's op families: the declarations, the adapters and ZenFlow.

DeepSpeed's Python optimizers call functions on the module their builder's ``load()`` returns
(``create_adam``, ``adam_update``, ``multi_tensor_adam``, ``lamb``, ``aio_handle``...). Each op family's
module here (``adam.py``, ``lion.py``, ``lamb.py``, ``adagrad.py``, ``aio.py``) declares which of those
functions the family's builds offer under which builder name (`ABI`, a
[`DeepSpeedABI`][anyaccel.integrations.deepspeed.abi.declaration.DeepSpeedABI]) and implements them over the family's
torch ops; ``common.py`` holds what the adapters share, ``zenflow.py`` ZenFlow's overlapped Adam step.
Plug-in op families declare theirs through the ``anyaccel.deepspeed_abi`` entry-point group
(``name = "module:ABI"``).

The op core does not import this package: the op-builder layer asks the ``anyaccel.module_functions``
entry-point group which functions a loaded module offers besides its torch ops, and this package answers
([`module_functions`][anyaccel.integrations.deepspeed.abi.module_functions]), so
``get_accelerator().create_op_builder("CPUAdamBuilder").load().create_adam``
works with or without DeepSpeed installed.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import logging
import pkgutil

from anyaccel.integrations.deepspeed.abi.declaration import DeepSpeedABI
from anyaccel.spec import SpecError, op_spec

logger = logging.getLogger(__name__)

__all__ = ["ENTRY_POINT_GROUP", "DeepSpeedABI", "all_abis", "abi_of", "module_functions"]

#: Entry-point group through which plug-in op families declare their DeepSpeed ABI (``"module:ABI"``).
ENTRY_POINT_GROUP = "anyaccel.deepspeed_abi"
_SHARED = frozenset({"common", "declaration", "zenflow"})


@functools.lru_cache(maxsize=1)
def all_abis() -> tuple[DeepSpeedABI, ...]:
    """Every declaration: this package's family modules, then the ``anyaccel.deepspeed_abi`` entry points.

    Each is validated against its family's spec once. A plug-in declaration that fails to import or validate
    is logged and skipped; a built-in one raises.

    Returns:
        The declarations, sorted by family.

    Raises:
        SpecError: a built-in declaration is malformed, or two declare the same family.

    Side effects: imports the family modules (no torch, no DeepSpeed) on the first call; cached.
    """
    found: dict[str, DeepSpeedABI] = {}

    def add(abi: DeepSpeedABI, origin: str) -> None:
        abi.validate(op_spec(abi.family))
        if abi.family in found:
            raise SpecError(f"the DeepSpeed ABI of op family {abi.family!r} is declared twice (the second in {origin})")
        found[abi.family] = abi

    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name not in _SHARED:
            name = f"{__name__}.{info.name}"
            add(importlib.import_module(name).ABI, name)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            add(ep.load(), ep.value)
        except (ImportError, AttributeError, SpecError) as exc:
            logger.warning("DeepSpeed ABI entry point %s (%s) skipped: %s", ep.name, ep.value, exc)
    return tuple(found[k] for k in sorted(found))


def abi_of(family: str) -> DeepSpeedABI | None:
    """The declaration of ``family``, or None when the family offers DeepSpeed nothing beyond its builders."""
    return next((abi for abi in all_abis() if abi.family == family), None)


def module_functions(family: str, builder_names: tuple[str, ...]) -> tuple[str, tuple[str, ...]] | None:
    """What a loaded module of ``family`` answering to ``builder_names`` offers besides its torch ops.

    The ``anyaccel.module_functions`` entry point of anyaccel itself: the op-builder layer calls it when it
    loads a build (`anyaccel.op_builder.core.builder.OpBuilder._module_extras`).

    Args:
        family: the op family of the loaded build.
        builder_names: the builder names the build answers to (its own and its aliases').

    Returns:
        ``(adapter, function names)`` on this platform: the ``"module:factory"`` making the functions and
        their names; None when the build offers none.
    """
    abi = abi_of(family)
    if abi is None:
        return None
    functions = abi.functions_for(builder_names)
    return (abi.adapter, functions) if functions else None
