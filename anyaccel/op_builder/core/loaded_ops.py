"""The process's one table of loaded ops: every loaded op module, and every failed build, under one key.

Every path that loads an op reads and fills [`LOADED_OPS`][anyaccel.op_builder.core.loaded_ops.LOADED_OPS], so
one loaded op is held once:
[`OpBuilder.load`][anyaccel.op_builder.core.builder.OpBuilder.load] (native builds),
``anyaccel.ops.python_ops.define_custom_ops`` and ``anyaccel.ops.nn.define.define`` (Python-level ops), and
``anyaccel.ops.dispatch.load`` (the implementation chosen for a family: the module one of those loaded, found
here by identity, or what a hand-registered loader returned).

**The key** is a string, in one of three forms that cannot collide:

- a native build: its cache key, 64 hex digits (``compute_key`` of the builder's ``key_inputs()``; the module
  may be a prebuilt artifact, recorded under its own key, that serves those inputs);
- Python-level ops (Triton, portable torch, torch_npu delegation): the torch op namespace they define
  (``anyaccel_triton_adam``);
- an implementation registered by hand whose loader returned an object loaded through neither:
  ``<family>:<implementation>`` ([`implementation_key`][anyaccel.op_builder.core.loaded_ops.implementation_key]).

**The one reset** is [`clear`][anyaccel.op_builder.core.loaded_ops.LoadedOps.clear]: it forgets every module,
every failure and every memo derived from them, so the next load of each op runs its load path again. What the
process registered with torch stays registered: torch cannot unregister a native library, and loading the same
library a second time crashes the process (its static initialisers register the namespace again). So
[`register_once`][anyaccel.op_builder.core.loaded_ops.LoadedOps.register_once] keeps those registrations for
the life of the process, and a load after a reset finds its build again and attaches a new module to what is
registered, without registering anything twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from typing_extensions import override

from anyaccel.op_builder.errors import BuildError

__all__ = ["LOADED_OPS", "LoadedOps", "NativeLibrary", "implementation_key", "is_implementation_key"]

_IMPLEMENTATION_SEPARATOR = ":"


def implementation_key(family: str, implementation: str) -> str:
    """The key of what a hand-registered implementation's loader returned: ``<family>:<implementation>``."""
    return f"{family}{_IMPLEMENTATION_SEPARATOR}{implementation}"


def is_implementation_key(key: str) -> bool:
    """Whether ``key`` has the form of [`implementation_key`][anyaccel.op_builder.core.loaded_ops.implementation_key]
    (cache keys and torch namespaces never contain ``:``)."""
    return _IMPLEMENTATION_SEPARATOR in key


class NativeLibrary(NamedTuple):
    """A native op library this process loaded and registered with torch (kept by
    [`register_once`][anyaccel.op_builder.core.loaded_ops.LoadedOps.register_once] for the life of the process).

    Attributes:
        op: the builder's ``NAME`` (``"pin_memory"``).
        path: the library file that was loaded.
    """

    op: str
    path: Path


class LoadedOps(Mapping[str, Any]):
    """The table of loaded ops: a read-only mapping from key (module docstring) to loaded module.

    Besides the mapping it records failed builds, keeps what the process registered with torch under each
    namespace, and holds values derived from loaded modules; all of it but the registrations is dropped by
    [`clear`][anyaccel.op_builder.core.loaded_ops.LoadedOps.clear]. Thread-safe: loads of one key run one at a
    time, loads of different keys in parallel.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.RLock] = {}
        self._modules: dict[str, Any] = {}
        self._failures: dict[str, BuildError] = {}
        self._registered: dict[str, Any] = {}
        self._derived: dict[int, tuple[Any, dict[Hashable, Any]]] = {}
        self._on_clear: list[Callable[[], None]] = []

    # ---- the mapping ----------------------------------------------------------------------------------------
    @override
    def __getitem__(self, key: str) -> Any:
        return self._modules[key]

    @override
    def __iter__(self) -> Iterator[str]:
        return iter(list(self._modules))

    @override
    def __len__(self) -> int:
        return len(self._modules)

    @override
    def __contains__(self, key: object) -> bool:
        return key in self._modules

    @override
    def get(self, key: str, default: Any = None) -> Any:
        """The module loaded under ``key``, else ``default`` (one dict read: the per-step lookup)."""
        return self._modules.get(key, default)

    def key_of(self, module: Any) -> str | None:
        """The key ``module`` (this very object) is held under, or None."""
        return next((k for k, m in list(self._modules.items()) if m is module), None)

    def failure(self, key: str) -> BuildError | None:
        """The recorded failed build of ``key``, or None."""
        return self._failures.get(key)

    # ---- loading --------------------------------------------------------------------------------------------
    def _key_lock(self, key: str) -> threading.RLock:
        with self._lock:
            lock = self._key_locks.get(key)
            if lock is None:
                lock = self._key_locks[key] = threading.RLock()
            return lock

    def load(self, key: str, loader: Callable[[], Any]) -> Any:
        """The module held under ``key``, loading it with ``loader()`` the first time.

        A [`BuildError`][anyaccel.op_builder.errors.BuildError] of ``loader`` is recorded: every later load of
        ``key`` raises that same object at once, without running ``loader`` again, until `clear`. Nothing is
        entered for a load that raised, so no half-loaded entry is ever seen; other exceptions are not recorded
        (an ``ArtifactError`` quarantined its cache entry, so the next load builds it again).

        Raises:
            BuildError: the recorded failure of ``key``, or the one ``loader`` raises now.
            Exception: whatever else ``loader`` raises, unrecorded.

        Side effects: those of ``loader`` (a build, loading a library, registering torch ops).
        """
        with self._key_lock(key):
            if key in self._modules:
                return self._modules[key]
            failed = self._failures.get(key)
            if failed is not None:
                raise failed
            try:
                module = loader()
            except BuildError as exc:
                with self._lock:
                    self._failures[key] = exc
                raise
            with self._lock:
                self._modules[key] = module
            return module

    def register_once(self, namespace: str, register: Callable[[], Any]) -> Any:
        """What this process registered with torch under ``namespace``, registering it with ``register()`` the
        first time (a [`NativeLibrary`][anyaccel.op_builder.core.loaded_ops.NativeLibrary] for a native build, the
        definitions object for Python-level ops).

        Kept for the life of the process, [`clear`][anyaccel.op_builder.core.loaded_ops.LoadedOps.clear]
        included: torch cannot unregister a namespace, and loading a native library twice crashes. Nothing is
        kept when ``register`` raises.

        Raises:
            Exception: whatever ``register`` raises.
        """
        with self._key_lock(namespace):
            if namespace not in self._registered:
                what = register()
                with self._lock:
                    self._registered[namespace] = what
            return self._registered[namespace]

    def native_libraries(self, op: str) -> dict[str, NativeLibrary]:
        """The native libraries of builds named ``op`` this process registered, by torch namespace (reset or not:
        their ops stay callable)."""
        with self._lock:
            return {ns: r for ns, r in self._registered.items() if isinstance(r, NativeLibrary) and r.op == op}

    def load_definitions(self, namespace: str, define: Callable[[], Any]) -> Any:
        """Python-level ops under ``namespace``: the module held under that key, else the definitions this
        process registered (after a reset), else ``define()``'s, registered once and entered.

        Raises:
            Exception: whatever ``define`` raises (nothing is entered or kept then).

        Side effects: those of ``define`` (registering torch ops), once per process.
        """
        return self.load(namespace, lambda: self.register_once(namespace, define))

    # ---- values derived from loaded modules -----------------------------------------------------------------
    def derived(self, module: Any, what: Hashable, make: Callable[[], Any]) -> Any:
        """A value computed from ``module`` (a loaded module, held here or handed out by a loader), made with
        ``make()`` once per module and ``what``: the functions an optimizer step asks a module for, whose
        lookup costs microseconds per missing name. A derived lookup, not a copy of the module: dropped by
        [`clear`][anyaccel.op_builder.core.loaded_ops.LoadedOps.clear] with the modules.

        Side effects: ``make()`` on the first call for ``(module, what)``.
        """
        entry = self._derived.get(id(module))
        if entry is None or entry[0] is not module:
            with self._lock:
                entry = self._derived.get(id(module))
                if entry is None or entry[0] is not module:
                    entry = self._derived[id(module)] = (module, {})
        table = entry[1]
        if what not in table:
            table[what] = make()
        return table[what]

    # ---- the one reset --------------------------------------------------------------------------------------
    def on_clear(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after every `clear` (a memo derived from this table empties itself)."""
        with self._lock:
            self._on_clear.append(callback)

    def discard(self, key: str) -> None:
        """Forget the module and failure of ``key`` (no error when there is none); its next load runs again."""
        with self._lock:
            module = self._modules.pop(key, None)
            self._failures.pop(key, None)
            entry = self._derived.get(id(module))
            if entry is not None and entry[0] is module:
                del self._derived[id(module)]

    def clear(self) -> None:
        """The one reset: forget every loaded module, every failed build and every value derived from them, then
        call the `on_clear` callbacks (the dispatcher's choices).

        What the process registered with torch stays (`register_once`): the next load of an op runs its load
        path again (a native build's key, prebuilt and cache look-up, integrity check) and gets a new module,
        attached to the ops already registered.
        """
        with self._lock:
            self._modules.clear()
            self._failures.clear()
            self._derived.clear()
            callbacks = list(self._on_clear)
        for callback in callbacks:
            callback()


#: The process's table of loaded ops (the module docstring).
LOADED_OPS = LoadedOps()
