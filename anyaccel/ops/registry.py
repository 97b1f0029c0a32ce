"""The op registry: one table keyed by op family, holding its builds and its implementations.

Two views read it, so they cannot disagree:

- the builder view, [`get_builder_class`][anyaccel.ops.registry.get_builder_class] (what
  ``accelerator.create_op_builder(name)`` returns): the
  class serving a builder name on an accelerator, from the specs' native builds
  ([`anyaccel.op_builder.classes`][anyaccel.op_builder.classes]) unless a registration replaced that row;
- the implementation view, [`implementations`][anyaccel.ops.registry.implementations] (what
  [`anyaccel.ops.dispatch`][anyaccel.ops.dispatch] chooses among for
  ``FusedAdam``, ``CPUAdam``, the model ops): the specs' implementations plus registered ones. An
  implementation backed by a native build resolves its builder class through
  [`get_builder_class`][anyaccel.ops.registry.get_builder_class] on
  the device type it serves, so a replaced builder row is what the optimizers run too.

Entries are added or replaced through one hook, [`register`][anyaccel.ops.registry.register], with one rule: an existing
entry is replaced
only with ``override=True``, and every cached choice of either view is dropped.

Importing this module is cheap: specs are read and classes made when first asked for.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anyaccel.op_builder.classes import ANY_ACCELERATOR, alias_rows, builder_class, native_rows, spec_builds, spec_rows
from anyaccel.op_builder.errors import UnknownOpError
from anyaccel.spec import Implementation, OpSpec, all_op_specs, resolve

__all__ = [
    "ANY_ACCELERATOR",
    "BuilderRow",
    "ImplementationError",
    "RegisteredImplementation",
    "UnknownImplementationError",
    "all_builder_names",
    "get_builder_class",
    "implementations",
    "register",
]


class ImplementationError(RuntimeError):
    """Base of the errors of the implementation view and the dispatcher."""


class UnknownImplementationError(ImplementationError, ValueError):
    """An op or implementation name that is not registered; the message lists the registered ones."""


@dataclass(frozen=True)
class BuilderRow:
    """A builder class for one builder name on one accelerator, written by hand (plug-ins, tests).

    Attributes:
        name: a builder name (``"FusedAdamBuilder"``, ``"MyOpBuilder"``: the row, so a row for one accelerator
            leaves other accelerators' rows of that name alone; the class's own name becomes an alias when
            free) or an op ``NAME`` (``"my_op"``: an alias of the class's row).
        accelerator: an accelerator's name (``"cpu"``, ``"cuda"``, ...) or ``"*"`` for every accelerator.
        cls: the builder class, or ``"module:Class"`` to import it lazily.
    """

    name: str
    accelerator: str
    cls: str | type

    @property
    def class_name(self) -> str:
        """The class's name (the part after ``:`` of a lazy target)."""
        return self.cls.rpartition(":")[2] if isinstance(self.cls, str) else self.cls.__name__

    @property
    def row(self) -> str:
        """The builder name the row is filed under."""
        return self.name if self.name.endswith("Builder") else self.class_name


@dataclass(frozen=True)
class RegisteredImplementation:
    """One implementation of an op family, ready to probe and load (a spec's
    [`Implementation`][anyaccel.spec.Implementation] with its probe and loader bound, or one registered by hand).

    Attributes:
        op: the family's name (``"adam"``).
        name: the implementation's name (``"cuda"``, ``"triton"``), unique per family.
        priority: higher wins among available implementations.
        device_types: torch device types it runs on (``("cuda",)``; ``("*",)`` for every one).
        probe: cheap availability check returning ``(available, reason)``; it must not compile, start a
            process or initialise a device.
        loader: returns an object whose attributes are the op's functions; may compile (called once per
            process, the result cached).
        description: one line for ``anyaccel report``.
    """

    op: str
    name: str
    priority: int
    device_types: tuple[str, ...]
    probe: Callable[[], tuple[bool, str]]
    loader: Callable[[], Any]
    description: str = ""


_rows: dict[str, dict[str, str | type]] = {}
_row_aliases: dict[str, str] = {}
_implementations: dict[str, dict[str, RegisteredImplementation]] = {}
_builtins_done = False
_lock = threading.RLock()
#: Called with no argument after every registration: the caches derived from the registry (the dispatcher's
#: chosen and loaded implementations) drop what they hold.
_listeners: list[Callable[[], None]] = []


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener()`` after every [`register`][anyaccel.ops.registry.register] (caches derived from the registry
    clear themselves)."""
    _listeners.append(listener)


def register(entry: BuilderRow | RegisteredImplementation, override: bool = False) -> None:
    """Add an entry to the registry, or replace one: the one extension point of both views.

    Args:
        entry: a [`BuilderRow`][anyaccel.ops.registry.BuilderRow] (a builder class for a builder name on an accelerator:
            what
            ``create_op_builder`` returns there, and what an implementation backed by that build loads) or a
            [`RegisteredImplementation`][anyaccel.ops.registry.RegisteredImplementation] (one more way to run a family,
            for the dispatcher).
        override: replace an existing entry (a spec-derived one included) instead of raising.

    Raises:
        ValueError: the entry exists and ``override`` is False (the message names it and the fix).

    Side effects: clears every choice cached from the registry (`on_change` listeners).
    """
    with _lock:
        if isinstance(entry, BuilderRow):
            _add_row(entry, override)
        else:
            _register_builtins()
            _add_implementation(entry, override)
    for listener in list(_listeners):
        listener()


def _add_row(entry: BuilderRow, override: bool) -> None:
    row = entry.row
    exists = entry.accelerator in _rows.get(row, {}) or entry.accelerator in spec_rows().get(row, {})
    if exists and not override:
        raise ValueError(f"op {entry.name!r} already has a builder for {entry.accelerator!r}; pass override=True to "
                         "replace it")
    alias = entry.class_name if row == entry.name else entry.name
    if alias != row and alias not in spec_rows() and alias not in _rows:
        _row_aliases[alias] = row
    _rows.setdefault(row, {})[entry.accelerator] = entry.cls


def _add_implementation(impl: RegisteredImplementation, override: bool) -> None:
    per_op = _implementations.setdefault(impl.op, {})
    if impl.name in per_op and not override:
        raise ValueError(f"implementation {impl.name!r} of op {impl.op!r} is already registered; pass override=True "
                         "to replace it")
    per_op[impl.name] = impl


# ---- the builder view ------------------------------------------------------------------------------------


def _aliases() -> dict[str, str]:
    out = {b.name: b.builder for _, b in spec_builds()}
    out.update(_row_aliases)
    return out


def all_builder_names() -> list[str]:
    """Every builder class name any accelerator knows, sorted (aliases not repeated)."""
    return sorted(set(spec_rows()) | set(_rows))


def _target(row_key: str, accelerator_name: str) -> str | type | None:
    """The class or ``"module:Class"`` filed under ``row_key`` for ``accelerator_name``: a registered row for
    the accelerator, the specs' row for it, a registered ``"*"`` row, the specs' ``"*"`` row; only when none
    answers, an alias an integration contributes (`anyaccel.op_builder.classes.alias_rows`), so the native
    lookup reads no integration."""
    extra = _rows.get(row_key, {})
    native = native_rows().get(row_key, {})
    for found in (extra.get(accelerator_name), native.get(accelerator_name), extra.get(ANY_ACCELERATOR),
                  native.get(ANY_ACCELERATOR)):
        if isinstance(found, tuple):
            return builder_class(found[0].family, found[1].name, row_key)
        if found is not None:
            return found
    hit = alias_rows().get(row_key, {}).get(accelerator_name)
    return builder_class(hit[0].family, hit[1].name, row_key) if hit is not None else None


def get_builder_class(name: str, accelerator_name: str) -> type | None:
    """The builder class of ``name`` (``"CPUAdamBuilder"`` or ``"cpu_adam"``) for ``accelerator_name``.

    The op specs' builds and the registered rows answer first; the builder names integrations contribute
    (DeepSpeed's ``FusedAdamBuilder`` on the CPU) are read only when they do not, so a native name loads no
    integration.

    Returns:
        The class (a subclass of [`OpBuilder`][anyaccel.op_builder.core.builder.OpBuilder]); None when the op
        exists but not for this accelerator.

    Raises:
        UnknownOpError: no accelerator knows ``name`` (neither a builder class name nor an op name); the
            message lists every known name.
    """
    row_key = _aliases().get(name, name)
    target = _target(row_key, accelerator_name)
    if target is None and row_key not in native_rows() and row_key not in _rows and row_key not in alias_rows():
        raise UnknownOpError(f"unknown op builder {name!r}; known builders: {', '.join(all_builder_names())} "
                             f"(or their op names: {', '.join(sorted(_aliases()))})")
    if isinstance(target, str):
        target = resolve(target)
    return target


def accelerators_of(name: str) -> list[str]:
    """The accelerator names with a row for builder ``name`` (``"*"`` included), sorted."""
    row_key = _aliases().get(name, name)
    return sorted(set(spec_rows().get(row_key, {})) | set(_rows.get(row_key, {})))


# ---- the implementation view ------------------------------------------------------------------------------


def implementations(op: str) -> list[RegisteredImplementation]:
    """The registered implementations of ``op``, highest priority first.

    Raises:
        UnknownImplementationError: no implementation of ``op`` is registered.
    """
    _register_builtins()
    per_op = _implementations.get(op)
    if not per_op:
        raise UnknownImplementationError(f"no implementation of op {op!r} is registered; known ops: "
                                         f"{sorted(_implementations)}")
    return sorted(per_op.values(), key=lambda i: (-i.priority, i.name))


def _requires_probe(packages: tuple[str, ...], extra: str | None = None) -> Callable[[], tuple[bool, str]]:
    def probe() -> tuple[bool, str]:
        missing = [p for p in packages if importlib.util.find_spec(p) is None]
        if missing:
            return False, f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed"
        if extra is not None:
            ok, reason = resolve(extra)()
            if not ok:
                return False, reason
        return True, f"{', '.join(packages)} installed" if packages else ""

    return probe


def _build_class(s: OpSpec, impl: Implementation) -> type:
    """The builder class an implementation backed by a native build loads: the builder view's answer for the
    build's builder name on the device type it serves (a replaced row wins), else the build's own class."""
    assert impl.build is not None
    build = s.build(impl.build)
    device_type = next((d for d in impl.device_types if d != "*"), ANY_ACCELERATOR)
    cls = get_builder_class(build.builder, device_type)
    return cls if cls is not None else builder_class(s.family, build.name)


def _from_spec(s: OpSpec, impl: Implementation) -> RegisteredImplementation:
    if impl.build is not None:
        def probe() -> tuple[bool, str]:
            result: tuple[bool, str] = _build_class(s, impl)().compatibility()
            return result

        def loader() -> Any:
            return _build_class(s, impl)().load()
    else:
        assert impl.module is not None  # OpSpec.validate: exactly one of build and module
        target = impl.module
        probe, loader = _requires_probe(impl.requires, impl.probe), (lambda: resolve(target)())
    return RegisteredImplementation(s.family, impl.name, impl.priority, impl.device_types, probe, loader,
                                    impl.description)


def _register_builtins() -> None:
    global _builtins_done
    with _lock:
        if _builtins_done:
            return
        _builtins_done = True
        for s in all_op_specs():
            for impl in s.implementations:
                if impl.name not in _implementations.get(s.family, {}):
                    _add_implementation(_from_spec(s, impl), override=False)
