"""Putting the DeepSpeed-facing view into DeepSpeed, before or after ``import deepspeed``.

DeepSpeed keeps its accelerator in ``deepspeed.accelerator.real_accelerator.ds_accelerator`` and accepts only
instances of its abstract class (``_validate_accelerator``: ``isinstance`` against
``deepspeed.accelerator.abstract_accelerator.DeepSpeedAccelerator``, an ``abc.ABC``). Wiring therefore:

1. registers anyaccel's [`DeepSpeedAccelerator`][anyaccel.accelerator.abstract.DeepSpeedAccelerator] as a *virtual
subclass*
   of DeepSpeed's ABC (``ABCMeta.register``), so every anyaccel accelerator, plug-ins included, passes
   DeepSpeed's own validation, no DeepSpeed file patched and no DeepSpeed class inherited;
2. hands DeepSpeed the view ([`deepspeed_view`][anyaccel.integrations.deepspeed.view.deepspeed_view]) through
   DeepSpeed's public ``set_accelerator``, which runs that validation;
3. after ``import deepspeed`` only: rebinds the builder classes DeepSpeed bound at import
   (``deepspeed.ops.op_builder.<Name>Builder`` and the same objects imported by name into other
   ``deepspeed.*`` modules, e.g. ``deepspeed.ops.adam.cpu_adam.CPUAdamBuilder``), accelerator methods bound
   at import (``deepspeed.runtime.utils.torch_memory_reserved``), and refreshes ``all_ops.ALL_OPS`` (in
   place) and the lazily cached ``deepspeed.ops.__compatible_ops__``;
4. completes ``ALL_OPS`` with every op anyaccel answers on the accelerator
   ([`op_table`][anyaccel.integrations.deepspeed.op_table]), now or when DeepSpeed first imports ``all_ops``.

Before ``import deepspeed``, a meta-path finder waits for ``deepspeed.accelerator.real_accelerator`` and wires
right after that module executes, before DeepSpeed asks for its accelerator the first time; DeepSpeed then
binds anyaccel's builders itself and step 3 is not needed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import inspect
import logging
import sys
import threading
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from anyaccel.integrations.deepspeed import op_table
from anyaccel.integrations.deepspeed.version import check_version
from anyaccel.integrations.deepspeed.view import deepspeed_view, viewed_accelerator_dict

logger = logging.getLogger(__name__)

__all__ = ["REAL_ACCELERATOR_MODULE", "install", "uninstall", "is_installed", "is_wired", "RealAcceleratorFinder",
           "OpTableFinder"]

#: The DeepSpeed module holding its accelerator and validation.
REAL_ACCELERATOR_MODULE = "deepspeed.accelerator.real_accelerator"
#: DeepSpeed's module binding ``<Name>Builder`` at import.
OP_BUILDER_MODULE = "deepspeed.ops.op_builder"
#: Names ending in "Builder" that ``deepspeed/ops/op_builder/__init__.py`` does not bind (abstract bases).
_UNBOUND_BUILDER_NAMES = frozenset({"OpBuilder", "CUDAOpBuilder"})
#: DeepSpeed packages that hold DeepSpeed's own builders and accelerators, never rebound.
_PROVIDER_PREFIXES = ("deepspeed.ops.op_builder.", "deepspeed.accelerator.")

_MISSING = object()


@dataclass
class _State:
    """What install() did, so that it is idempotent and uninstall() can undo it."""

    requested: bool = False
    view: Any = None
    previous_accelerator: Any = None
    registered: list[type] = field(default_factory=list)
    rebound: dict[tuple[str, str], Any] = field(default_factory=dict)
    finder: RealAcceleratorFinder | None = None
    op_table_finder: OpTableFinder | None = None


_state = _State()
_lock = threading.RLock()


class _WiringLoader(importlib.abc.Loader):
    """Wraps DeepSpeed's loader of a module: runs it, then the finder's step (other attributes delegate)."""

    def __init__(self, loader: Any, after: Callable[[types.ModuleType], None]) -> None:
        self._loader = loader
        self._after = after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        self._after(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_code, is_package, ... for tracebacks
        return getattr(self._loader, name)


class RealAcceleratorFinder(importlib.abc.MetaPathFinder):
    """Meta-path finder that wires anyaccel in when ``deepspeed.accelerator.real_accelerator`` is imported.

    It finds nothing itself: it asks the finders after it for the module's spec and wraps the spec's loader
    so that [`install`][anyaccel.integrations.deepspeed.wiring.install]'s wiring runs right after the module body. It
    removes itself once used.
    """

    #: The module it waits for.
    MODULE = REAL_ACCELERATOR_MODULE

    def after(self, module: types.ModuleType) -> None:
        """Run right after `MODULE`'s body: wire DeepSpeed to anyaccel (when still requested)."""
        with _lock:
            if _state.requested:
                _wire(module)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.MODULE:
            return None
        others = [f for f in sys.meta_path if f is not self and hasattr(f, "find_spec")]
        for finder in others:
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        self.remove()
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _WiringLoader(spec.loader, self.after)
        return spec

    def insert(self) -> None:
        """Put this finder first on ``sys.meta_path`` (once)."""
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        """Take this finder off ``sys.meta_path`` (no error if absent)."""
        while self in sys.meta_path:
            sys.meta_path.remove(self)


class OpTableFinder(RealAcceleratorFinder):
    """Meta-path finder that completes DeepSpeed's op table when ``deepspeed.ops.op_builder.all_ops`` is
    imported after the wiring
    ([`anyaccel.integrations.deepspeed.op_table.complete`][anyaccel.integrations.deepspeed.op_table.complete])."""

    MODULE = op_table.ALL_OPS_MODULE

    def after(self, module: types.ModuleType) -> None:
        """Run right after ``all_ops``' body: add every op anyaccel answers to ``ALL_OPS``."""
        with _lock:
            if _state.requested and _state.view is not None:
                op_table.complete(module, _state.view)


def _register_virtual_subclass(real_accelerator: types.ModuleType) -> None:
    """Register anyaccel's base class with DeepSpeed's abstract class(es) the validation checks."""
    from anyaccel.accelerator.abstract import DeepSpeedAccelerator

    # real_accelerator imports DeepSpeed's ABC under two names: dsa1 (build-time ``accelerator`` package) and
    # dsa2 (``deepspeed.accelerator``); either may be None.
    for attribute in ("dsa1", "dsa2"):
        abstract = getattr(real_accelerator, attribute, None)
        if isinstance(abstract, type) and abstract not in _state.registered:
            if not issubclass(DeepSpeedAccelerator, abstract):
                abstract.register(DeepSpeedAccelerator)  # type: ignore[attr-defined]
            _state.registered.append(abstract)


def _is_consumer(module_name: str) -> bool:
    """True for DeepSpeed modules whose builder/accelerator bindings are rebound (not the providers)."""
    if module_name == OP_BUILDER_MODULE:
        return True
    return (module_name == "deepspeed" or module_name.startswith("deepspeed.")) and \
        not module_name.startswith(_PROVIDER_PREFIXES)


def _consumer_dicts() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if module is not None and isinstance(namespace, dict) and _is_consumer(name):
            found.append((name, namespace))
    return found


def _rebind(module_name: str, namespace: dict[str, Any], attribute: str, new: Any) -> None:
    _state.rebound.setdefault((module_name, attribute), namespace[attribute])
    namespace[attribute] = new


def _rebind_after_import(view: Any, previous: Any) -> int:
    """Step 3 of the module doc. Returns the number of bindings changed."""
    op_builder = sys.modules.get(OP_BUILDER_MODULE)
    consumers = _consumer_dicts()
    changed = 0
    if op_builder is not None:
        names = [n for n in vars(op_builder) if n.endswith("Builder") and n not in _UNBOUND_BUILDER_NAMES]
        for builder_name in names:
            old, new = getattr(op_builder, builder_name), view.get_op_builder(builder_name)
            if old is new:
                continue
            for module_name, namespace in consumers:
                if namespace.get(builder_name, _MISSING) is old:
                    _rebind(module_name, namespace, builder_name, new)
                    changed += 1
    if previous is not None and previous is not view:
        for module_name, namespace in consumers:
            for attribute, value in list(namespace.items()):
                if inspect.ismethod(value) and value.__self__ is previous:
                    _rebind(module_name, namespace, attribute, getattr(view, value.__name__))
                    changed += 1
    _refresh_op_caches(view)
    return changed


def _refresh_op_caches(view: Any) -> None:
    """Recompute DeepSpeed's op tables that were computed with the previous accelerator; with anyaccel's
    ``view``, complete them with every op anyaccel answers (None: after
    [`uninstall`][anyaccel.integrations.deepspeed.wiring.uninstall])."""
    ops = sys.modules.get("deepspeed.ops")
    if ops is not None:
        vars(ops).pop("__compatible_ops__", None)  # recomputed on next access (deepspeed/ops/__init__.py)
    all_ops: Any = sys.modules.get("deepspeed.ops.op_builder.all_ops")
    if all_ops is not None:
        table, builders = all_ops.ALL_OPS, all_ops.__op_builders__
        importlib.reload(all_ops)
        table.clear()
        table.update(all_ops.ALL_OPS)
        builders[:] = all_ops.__op_builders__
        all_ops.ALL_OPS, all_ops.__op_builders__ = table, builders  # holders of the old objects see the new
        if view is not None:
            op_table.complete(all_ops, view)


def _wire(real_accelerator: types.ModuleType) -> Any:
    """Steps 1-3 on an executed ``real_accelerator`` module; idempotent. Returns the view DeepSpeed uses."""
    import anyaccel

    _register_virtual_subclass(real_accelerator)
    accelerator = anyaccel.get_accelerator()
    current = getattr(real_accelerator, "ds_accelerator", None)
    if current is not None and viewed_accelerator_dict(current) is getattr(accelerator, "__dict__", _MISSING):
        _state.view = current
        return current
    view = deepspeed_view(accelerator)
    if _state.view is None:
        _state.previous_accelerator = current
    real_accelerator.set_accelerator(view)  # DeepSpeed's API: runs its _validate_accelerator
    _state.view = view
    changed = _rebind_after_import(view, current)
    if op_table.ALL_OPS_MODULE not in sys.modules:  # DeepSpeed builds its op table later: complete it then
        if _state.op_table_finder is None:
            _state.op_table_finder = OpTableFinder()
        _state.op_table_finder.insert()
    logger.info("DeepSpeed now uses anyaccel's %r accelerator (%d import-time bindings updated)",
                view._name, changed)
    return view


def install() -> Any:
    """Make DeepSpeed use anyaccel's accelerator and op builders. Idempotent; before or after ``import deepspeed``.

    Returns:
        The accelerator DeepSpeed's ``get_accelerator()`` now returns (a view of
        ``anyaccel.get_accelerator()``), or None when DeepSpeed is not imported yet: it is wired when
        ``deepspeed.accelerator.real_accelerator`` is first imported.

    Raises:
        DeepSpeedNotInstalledError: DeepSpeed is not installed.
        UntestedDeepSpeedVersionError: the installed DeepSpeed is not in ``TESTED_VERSIONS`` and
            ``ANYACCEL_DEEPSPEED_ALLOW_UNTESTED`` is not set.
        AcceleratorError: the errors of ``anyaccel.get_accelerator()`` (when wiring now).

    Side effects: see the module doc; calling again after ``anyaccel.set_accelerator()`` re-wires DeepSpeed
    to the new choice.
    """
    check_version()
    with _lock:
        _state.requested = True
        module = sys.modules.get(REAL_ACCELERATOR_MODULE)
        if module is not None:
            if _state.finder is not None:
                _state.finder.remove()
            return _wire(module)
        if _state.finder is None:
            _state.finder = RealAcceleratorFinder()
        _state.finder.insert()
        return None


def uninstall() -> None:
    """Undo [`install`][anyaccel.integrations.deepspeed.wiring.install]: DeepSpeed's previous accelerator and
    import-time bindings come back.

    The virtual-subclass registration stays (``abc`` has no public way to undo it); it only makes anyaccel
    accelerators pass DeepSpeed's validation. Does nothing when
    [`install`][anyaccel.integrations.deepspeed.wiring.install] was not called.
    """
    with _lock:
        for finder in (_state.finder, _state.op_table_finder):
            if finder is not None:
                finder.remove()
        module: Any = sys.modules.get(REAL_ACCELERATOR_MODULE)
        if module is not None and _state.view is not None:
            module.ds_accelerator = _state.previous_accelerator  # may be None: DeepSpeed selects again
            for (module_name, attribute), value in _state.rebound.items():
                target = sys.modules.get(module_name)
                if target is not None:
                    vars(target)[attribute] = value
            _refresh_op_caches(None)
        registered = _state.registered
        _state.__init__()  # type: ignore[misc]
        _state.registered = registered


def is_installed() -> bool:
    """True once [`install`][anyaccel.integrations.deepspeed.wiring.install] was called in this process (DeepSpeed
    wired, or wired when imported)."""
    return _state.requested


def is_wired() -> bool:
    """True when DeepSpeed is imported and its ``get_accelerator()`` is a view of anyaccel's accelerator."""
    module = sys.modules.get(REAL_ACCELERATOR_MODULE)
    current = getattr(module, "ds_accelerator", None) if module is not None else None
    return current is not None and viewed_accelerator_dict(current) is not None
