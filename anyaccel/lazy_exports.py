"""One way for a package to offer names it imports on first use (PEP 562 module ``__getattr__``/``__dir__``).

anyaccel's packages import nothing heavy at import time (``import anyaccel`` imports no torch; ``import
anyaccel.ops`` loads no native library), yet offer their public names at the top: ``anyaccel.get_accelerator``,
``anyaccel.ops.CPUAdam``, ``anyaccel.op_builder.CPUAdamBuilder``. Each package declares its names as data and
gets its ``__getattr__``/``__dir__`` here::

    __getattr__, __dir__ = lazy_exports(__name__, {"CPUAdam": "anyaccel.ops.adam.cpu"})

A leaf: imports nothing of anyaccel, and only ``importlib`` from the standard library.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str,
    exports: Mapping[str, str],
    *,
    submodules: bool = False,
    fallback: Callable[[str], Any] | None = None,
    more_names: Callable[[], Iterable[str]] | None = None,
    dir_lists_globals: bool = True,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose public names are imported on first access.

    Args:
        package: the package's ``__name__``.
        exports: public name -> where it is defined, ``"module"`` (the attribute of the same name) or
            ``"module:attribute"``. An exported value is stored in the package's namespace on first access, so
            later lookups (one per call in ``anyaccel.ops.nn.rms_norm(...)``) do not reach ``__getattr__``.
        submodules: also answer with a submodule of the package that is not imported yet
            (``anyaccel.accelerator`` after a bare ``import anyaccel``); names starting with ``_`` never are.
        fallback: called with any other name; returns its value (not stored: it may change, e.g. a builder
            class an override replaces) or raises ``AttributeError``.
        more_names: names `dir` lists besides the exports (the fallback's names).
        dir_lists_globals: `dir` lists the package's own globals too (Python's default); False lists only
            the exports and ``more_names``, for a package whose ``dir()`` is its public names (one without
            ``__all__``, whose names are dynamic).

    Returns:
        ``(__getattr__, __dir__)``, to assign at the package's top level. ``__getattr__`` raises
        ``AttributeError`` (``"module 'pkg' has no attribute 'x'"``) for a name it cannot answer; an export whose
        module fails to import raises that module's error.

    Side effects: the functions import modules and write into the package's namespace; making them does
    neither.
    """
    targets = {name: target.partition(":") for name, target in exports.items()}

    def __getattr__(name: str) -> Any:  # noqa: N807 (PEP 562's name)
        target = targets.get(name)
        if target is not None:
            module_name, _, attribute = target
            value = getattr(importlib.import_module(module_name), attribute or name)
            setattr(sys.modules[package], name, value)
            return value
        if submodules and not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
        if fallback is not None:
            return fallback(name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:  # noqa: N807 (PEP 562's name)
        names = set(vars(sys.modules[package])) if dir_lists_globals else set()
        names.update(targets)
        if more_names is not None:
            names.update(more_names())
        return sorted(names)

    return __getattr__, __dir__
