"""The object ``OpBuilder.load()`` returns: the op's functions plus where they came from."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["OpModule", "AdaptedFunctions", "with_adapted_functions"]


class AdaptedFunctions:
    """The functions an integration adds to one loaded op module, found and made on first use.

    An integration (`anyaccel.op_builder.core.module_functions`; DeepSpeed's module ABI) names an adapter
    factory (``"module:factory"``) and the functions a module of this build offers (``create_adam``,
    ``adam_update``, ...). Asking the integrations reads the installed entry points and imports their
    declarations, so it is deferred to the first name a module's torch ops do not answer: loading an op, and
    calling its torch ops, asks no integration and makes no adapter object.

    A name of the op's own schema (``native``: ``adam_step_planned_capturable``, which a CPU build lacks and an
    optimizer probes for) is never an integration's, so asking for it asks no integration: the native path
    (load, then step) imports none.

    Args:
        owner: the loaded module the functions work on (passed to the factory).
        offer: ``(target, functions)`` (the factory ``"module:factory"``, called as ``factory(owner,
            functions)``, and the names offered), or a no-argument callable returning that or None, called
            once on first need.
        native: the function names of the op family's spec (every build's); `get` answers None for them
            without asking the integrations.
    """

    def __init__(self, owner: Any, offer: Any, native: frozenset[str] = frozenset()) -> None:
        self._owner = owner
        self._offer = offer
        self._native = native
        self._resolved: tuple[str | None, tuple[str, ...]] | None = None
        self._adapter: Any = None
        self._lock = threading.Lock()

    def _resolve(self) -> tuple[str | None, tuple[str, ...]]:
        with self._lock:
            if self._resolved is None:
                offer = self._offer() if callable(self._offer) else self._offer
                target, functions = offer if offer else (None, ())
                self._resolved = (target, tuple(functions) if target else ())
            return self._resolved

    @property
    def functions(self) -> tuple[str, ...]:
        """The names offered (empty when no integration offers any for the build).

        Side effects: on the first call, asks the integrations (entry points, their declarations).
        """
        return self._resolve()[1]

    def get(self, name: str) -> Callable[..., Any] | None:
        """The function ``name`` if the module offers it, else None.

        Side effects: asks the integrations on the first call for a name not in ``native``; imports and calls
        the adapter factory on the first hit.
        """
        if name in self._native:
            return None
        target, functions = self._resolve()
        if name not in functions:
            return None
        with self._lock:
            if self._adapter is None:
                from anyaccel.spec import resolve

                assert target is not None
                self._adapter = resolve(target)(self._owner, functions)
        fn: Callable[..., Any] = getattr(self._adapter, name)
        return fn


class OpModule:
    """A loaded op library.

    ``module.adam_step(...)`` is ``torch.ops.<namespace>.adam_step(...)``: attribute access forwards to the
    op namespace the library registered with ``STABLE_TORCH_LIBRARY`` (docs/architecture.md "Op builders").
    Names that are not torch ops of the library are the functions integrations add for this build
    (DeepSpeed's ``create_adam``, ``adam_update``, ``multi_tensor_adam``...;
    [`adapted_functions`][anyaccel.op_builder.core.module.OpModule.adapted_functions]).

    Attributes:
        op: the builder's ``NAME``.
        namespace: the torch op namespace, ``anyaccel_<NAME>_<key[:10]>``.
        path: the loaded shared library.
        isa: the CPU ISA level compiled in (None for non-CPU builds).
        key: the full cache key (64 hex digits) of the build.
        source: where it was found: "prebuilt", "cache" or "built".
        adapted_functions: the integrations' functions this module offers besides its torch ops (empty when
            none offers any for the build); the integrations are asked on first use of this or of a name the
            torch ops do not answer.
    """

    def __init__(self, op: str, namespace: str, path: Path, isa: str | None, key: str, source: str,
                 extras: dict[str, Any] | None = None) -> None:
        """See the class; ``extras``: ``"functions"`` (the `AdaptedFunctions` offer) and ``"native"`` (the
        family's function names, which never ask an integration)."""
        self.op = op
        self.namespace = namespace
        self.path = Path(path)
        self.isa = isa
        self.key = key
        self.source = source
        extras = extras or {}
        self._abi = AdaptedFunctions(self, extras.get("functions"), frozenset(extras.get("native", ())))

    @property
    def adapted_functions(self) -> tuple[str, ...]:
        """The integrations' functions this module offers besides its torch ops (asks them on first use)."""
        return self._abi.functions

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        import torch

        ns = getattr(torch.ops, self.namespace)
        fn: Callable[..., Any] | None = None
        abi = self.__dict__.get("_abi")
        if hasattr(ns, name):  # a torch op of the library (never one of the integrations' names)
            fn = getattr(ns, name)
        elif abi is not None:
            fn = abi.get(name)
        if fn is None:
            raise AttributeError(f"op '{self.op}' (namespace {self.namespace}, {self.path}) has no function "
                                 f"{name!r}")
        # Found once, kept: DeepSpeed looks its functions up on every call (``self.ds_opt_adam.adam_update``),
        # and finding a torch op by name costs far more than the call itself. A derived lookup on the module
        # itself, not a second table of loaded ops: it goes with the module, which only the process's table
        # (`LOADED_OPS`) holds, and a reset of that table makes the next load return a new module.
        self.__dict__[name] = fn
        return fn

    def __repr__(self) -> str:
        return f"OpModule(op={self.op!r}, namespace={self.namespace!r}, isa={self.isa!r}, path='{self.path}')"


class _WithAdaptedFunctions:
    """A Python-level op module (a namespace of torch ops) plus the integrations' functions (see
    `with_adapted_functions`)."""

    def __init__(self, module: Any, offer: Any, native: frozenset[str]) -> None:
        self._module = module
        self._abi = AdaptedFunctions(self, offer, native)

    @property
    def adapted_functions(self) -> tuple[str, ...]:
        """The integrations' functions this module offers besides its torch ops (asks them on first use)."""
        return self._abi.functions

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        module = self.__dict__.get("_module")
        if module is not None and hasattr(module, name):
            return getattr(module, name)
        abi = self.__dict__.get("_abi")
        fn = abi.get(name) if abi is not None else None
        if fn is not None:
            return fn
        raise AttributeError(f"op module {module!r} has no function {name!r}")

    def __repr__(self) -> str:
        return f"{self._module!r} + the integrations' functions"


def with_adapted_functions(module: Any, offer: Any, native: frozenset[str] = frozenset()) -> Any:
    """``module`` (a Python-level op module: builds that compile nothing) with the integrations' functions added.

    Args:
        module: the object whose attributes are the op's torch ops.
        offer: what `AdaptedFunctions` takes: ``(adapter, names)``, None, or a no-argument callable returning
            either, called on the first name ``module`` does not answer (so loading asks no integration).
        native: the op family's function names, which never ask an integration.

    Returns:
        A forwarding wrapper offering ``module``'s attributes and, on first use, the added functions.
    """
    return _WithAdaptedFunctions(module, offer, native)
