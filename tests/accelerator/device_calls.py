"""The calls anyaccel makes on vendor device modules, read from its source (``ast``), for ``test_device_api.py``.

The list is derived, never written by hand, so a new call cannot escape the check:

- **Accelerators** (XPU, NPU, MPS): every method each class resolves through its MRO (its own,
  ``TorchDeviceAccelerator``'s, ``DeepSpeedAccelerator``'s, ``PinnedHostMemory``'s) and the module-level
  functions of its module, with ``self.device_type`` read as the class's device type and the class attributes
  that name device-module members (``_graph_class_name``, ``_host_register``, ``_communication_library``...)
  read from the class.
- **Ops and op builders** (every function under ``anyaccel/ops``, ``anyaccel/op_builder`` and ``anyaccel/_compat``):
  a device type given as a literal is taken as written; one computed at run time (``torch.get_device_module(
  device.type)``) is read as each of ``DYNAMIC_DEVICES``, the devices of the ops' XPU and NPU paths.

Recognised ways to reach a device module: ``torch.xpu`` / ``torch.npu`` / ``torch.mps`` / ``torch.backends.mps``
attribute chains, ``torch.get_device_module(t)``, ``getattr(torch, "xpu"[, default])``, anyaccel's
``optional_attribute(t, name)``, ``module_function(t, name, ...)`` and ``self._fn(name, member)``,
``importlib.import_module("torch_npu")``; then ``.attr``, ``getattr(x, name[, default])``, calls, local names bound
to any of these, module functions returning them and module functions they are passed to. A member name that is
neither a literal, a module constant nor a class attribute of the accelerator is reported in
``Extraction.unresolved`` (the test fails on it) rather than skipped.

An access is *optional* when the code survives its absence: reached through ``optional_attribute`` or a
``getattr`` with a default, or inside a ``try`` that catches ``AttributeError``.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: the device modules checked, by the device type that names them
MODULES = {"xpu": "torch.xpu", "npu": "torch.npu", "mps": "torch.mps"}
#: what a run-time device type stands for in the ops and op builders (their XPU and NPU paths)
DYNAMIC_DEVICES = ("xpu", "npu")
#: source trees walked function by function (the accelerators are walked class by class)
OP_TREES = ("anyaccel/ops", "anyaccel/op_builder", "anyaccel/_compat")
#: attribute chains of torch that are device modules (``torch.backends.mps`` is MPS's availability API)
CHAINS = {("torch", "xpu"): "torch.xpu", ("torch", "npu"): "torch.npu", ("torch", "mps"): "torch.mps",
          ("torch", "backends", "mps"): "torch.backends.mps"}
#: vendor packages reached by ``importlib.import_module``
PACKAGES = ("torch_npu",)
#: helpers that forward a member name given by their callers (whose calls are walked)
FORWARDERS = ("_fn", "_has", "module_function", "optional_attribute")
#: path element standing for "the value the previous element returns when called"
CALLED = "()"


@dataclass(frozen=True)
class Call:
    """How the code calls a member: positional arguments, starred arguments (each may add 0 or 1: the code
    spreads ``_index_args``), keyword names, whether it spreads ``**kwargs``."""

    positional: int
    starred: int
    keywords: tuple[str, ...]
    double_star: bool


@dataclass(frozen=True)
class Access:
    """One use of a device-module member: ``module`` (``"torch.xpu"``), ``path`` below it (``("nvtx",
    "range_push")``), where (``file:line``), whether the code tolerates its absence, and the call if called."""

    module: str
    path: tuple[str, ...]
    where: str
    optional: bool
    call: Call | None

    @property
    def name(self) -> str:
        """``torch.xpu.nvtx.range_push``."""
        return ".".join((self.module, *self.path))


@dataclass
class Extraction:
    """What one walk found: the accesses and the member names it could not resolve (``file:line: expr``)."""

    accesses: list[Access] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Ref:
    modules: tuple[str, ...]
    path: tuple[str, ...]
    optional: bool


class _Walker:
    """Resolves the expressions of one function body to device-module references."""

    def __init__(self, where: str, line_offset: int, devices: tuple[str, ...], owner: Any,
                 constants: dict[str, Any], returns: dict[str, _Ref] | None = None) -> None:
        self.where, self.offset, self.devices, self.owner = where, line_offset, devices, owner
        self.constants = constants
        self.returns = returns or {}  # module functions returning a member: ``ascend_kernel()``
        self.env: dict[str, _Ref] = {}
        self.forwarded: set[str] = set()
        self.values: dict[str, Any] = {}  # locals bound to class data: ``spec = getattr(self, "_host_register")``
        self.out = Extraction()

    # -- member names
    def _value(self, node: ast.AST) -> tuple[bool, Any]:
        """(known, value) of an expression naming a member: literals, module constants, class data."""
        if isinstance(node, ast.Constant):
            return True, node.value
        if isinstance(node, ast.Name):
            if node.id in self.values:
                return True, self.values[node.id]
            if node.id in self.constants:
                return True, self.constants[node.id]
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
                and self.owner is not None and hasattr(self.owner, node.attr)):
            return True, getattr(self.owner, node.attr)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            known, value = self._value(node.value)
            if known:  # ``spec[0]`` of a class without the table (``_host_register = None``) names nothing
                return True, None if value is None else value[node.slice.value]
        if (isinstance(node, ast.Call) and _dotted(node.func) == "getattr" and len(node.args) >= 2
                and isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls")
                and isinstance(node.args[1], ast.Constant) and self.owner is not None):
            return True, getattr(self.owner, node.args[1].value, node.args[2].value if len(node.args) > 2
                                 and isinstance(node.args[2], ast.Constant) else None)
        return False, None

    def _member(self, node: ast.AST, report: bool = True) -> str | None:
        """The member name ``node`` gives; None when the class names none (``_graph_class_name = None``) or it
        cannot be read (then reported in ``unresolved``, unless a forwarder's parameter or ``report`` is False)."""
        known, value = self._value(node)
        if known and (value is None or isinstance(value, str)):
            return value
        if report and not (isinstance(node, ast.Name) and node.id in self.forwarded):
            self.out.unresolved.append(f"{self.where}:{node.lineno + self.offset}: {ast.unparse(node)}")
        return None

    def _devices(self, node: ast.AST) -> tuple[str, ...]:
        known, value = self._value(node)
        # a literal is taken as written; ``self.device_type``, ``device.type``...: the walk's devices
        return (value,) if known and isinstance(value, str) else self.devices

    def _modules(self, devices: Iterable[str]) -> tuple[str, ...]:
        return tuple(MODULES[d] for d in devices if d in MODULES)

    # -- references
    def ref(self, node: ast.AST) -> _Ref | None:
        if isinstance(node, ast.Name):
            return self.env.get(node.id)
        if isinstance(node, ast.IfExp):
            return self.ref(node.body) or self.ref(node.orelse)
        dotted = _dotted(node)
        if dotted is not None:
            parts = tuple(dotted.split("."))
            for prefix, module in sorted(CHAINS.items(), key=lambda item: -len(item[0])):
                if parts[:len(prefix)] == prefix:
                    return _Ref((module,), parts[len(prefix):], False)
        if isinstance(node, ast.Attribute):
            base = self.ref(node.value)
            return _Ref(base.modules, (*base.path, node.attr), base.optional) if base else None
        if not isinstance(node, ast.Call):
            return None
        func = _dotted(node.func) or ""
        args = node.args
        if func in ("torch.get_device_module",) and args:
            return _Ref(self._modules(self._devices(args[0])), (), False)
        if func.endswith("optional_attribute") and len(args) >= 2:
            name = self._member(args[1])
            return _Ref(self._modules(self._devices(args[0])), (name,), True) if name else None
        if func.endswith("module_function") and len(args) >= 2:
            name = self._member(args[1])
            return _Ref(self._modules(self._devices(args[0])), (name,), False) if name else None
        if func in ("self._fn", "self._has") and args:
            name = self._member(args[0])
            return _Ref(self._modules(self.devices), (name,), func == "self._has") if name else None
        if func == "importlib.import_module" and args:
            known, value = self._value(args[0])
            return _Ref((value,), (), False) if known and value in PACKAGES else None
        if func == "getattr" and len(args) >= 2 and _dotted(args[0]) == "torch":  # ``getattr(torch, "xpu", None)``
            known, value = self._value(args[1])
            return _Ref((MODULES[value],), (), True) if known and value in MODULES else None
        if func == "getattr" and len(args) >= 2:
            base = self.ref(args[0])
            if base is None:
                return None
            # a member of a returned object (device properties...) named at run time is not a device-module name
            name = self._member(args[1], report=CALLED not in base.path)
            return _Ref(base.modules, (*base.path, name), base.optional or len(args) > 2) if name else None
        if isinstance(node.func, ast.Name) and node.func.id in self.returns:
            return self.returns[node.func.id]
        base = self.ref(node.func)
        if base is not None and base.path:
            return _Ref(base.modules, (*base.path, CALLED), base.optional)
        return None

    # -- the walk
    def run(self, tree: ast.FunctionDef | ast.AsyncFunctionDef) -> Extraction:
        # the forwarders themselves (``_fn(self, name, member)``): their callers name the member
        self.forwarded = {a.arg for a in tree.args.args} if tree.name in FORWARDERS else set()
        guarded = _guarded_nodes(tree)
        nodes = sorted((n for n in ast.walk(tree) if hasattr(n, "lineno")), key=lambda n: (n.lineno, n.col_offset))
        for node in nodes:  # bindings first, in source order
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                self._bind(node.targets[0], node.value)
        seen: set[tuple[str, tuple[str, ...], int]] = set()
        for node in nodes:
            if isinstance(node, ast.Assign | ast.Name):
                continue
            ref = self.ref(node)
            if ref is None or not ref.path:
                continue
            path = ref.path[:-1] if ref.path[-1] == CALLED else ref.path
            call = _call_of(node) if ref.path[-1] == CALLED and isinstance(node, ast.Call) else None
            line = node.lineno + self.offset
            for module in ref.modules:
                key = (module, path, line)
                if key in seen and call is None:
                    continue
                seen.add(key)
                self.out.accesses.append(Access(module, path, f"{self.where}:{line}",
                                                ref.optional or id(node) in guarded, call))
        return self.out

    def _bind(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            for t, v in zip(target.elts, value.elts, strict=False):
                self._bind(t, v)
            return
        if not isinstance(target, ast.Name):
            return
        known, data = self._value(value) if not isinstance(value, ast.Constant) else (False, None)
        if known:
            self.values[target.id] = data
        ref = self.ref(value)
        if ref is not None:
            self.env[target.id] = ref


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _call_of(node: ast.Call) -> Call:
    return Call(positional=sum(not isinstance(a, ast.Starred) for a in node.args),
                starred=sum(isinstance(a, ast.Starred) for a in node.args),
                keywords=tuple(k.arg for k in node.keywords if k.arg is not None),
                double_star=any(k.arg is None for k in node.keywords))


def _guarded_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside a ``try`` body whose handlers catch ``AttributeError``."""
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                handler.type is None or "AttributeError" in ast.unparse(handler.type) for handler in node.handlers):
            for statement in node.body:
                guarded.update(id(n) for n in ast.walk(statement))
    return guarded


def _constants(tree: ast.Module) -> dict[str, Any]:
    """A module's top-level ``NAME = <literal>`` assignments."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _merge(into: Extraction, part: Extraction) -> None:
    into.accesses += part.accesses
    into.unresolved += part.unresolved


def op_accesses(trees: Iterable[str] = OP_TREES) -> Extraction:
    """The device-module accesses of every function under ``trees`` (paths relative to the repository)."""
    found = Extraction()
    for tree_dir in trees:
        for path in sorted((ROOT / tree_dir).rglob("*.py")):
            module = ast.parse(path.read_text(), filename=str(path))
            constants = _constants(module)
            where = str(path.relative_to(ROOT))
            functions = {f.name: f for f in module.body if isinstance(f, ast.FunctionDef)}
            returns: dict[str, _Ref] = {}  # module functions returning a member: ``ascend_kernel()``
            for function in functions.values():
                walker = _Walker(where, 0, DYNAMIC_DEVICES, None, constants)
                walker.run(function)
                refs = [walker.ref(n.value) for n in ast.walk(function) if isinstance(n, ast.Return) and n.value]
                member = next((r for r in refs if r is not None and r.path), None)
                if member is not None:
                    returns[function.name] = member
            params: dict[str, dict[str, _Ref]] = {}  # a member passed to a module function: ``_step(kernel, ...)``
            for function in functions.values():
                walker = _Walker(where, 0, DYNAMIC_DEVICES, None, constants, returns)
                walker.run(function)
                for node in ast.walk(function):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions:
                        names = [a.arg for a in functions[node.func.id].args.args]
                        for name, arg in zip(names, node.args, strict=False):
                            ref = None if isinstance(arg, ast.Starred) else walker.ref(arg)
                            if ref is not None and ref.path:
                                params.setdefault(node.func.id, {})[name] = ref
            for function in _functions(module):
                # nested functions are walked again on their own; their accesses dedupe by line
                walker = _Walker(where, 0, DYNAMIC_DEVICES, None, constants, returns)
                walker.env.update(params.get(function.name, {}))
                _merge(found, walker.run(function))
    return _dedupe(found)


def accelerator_accesses(accelerator: type) -> Extraction:
    """The device-module accesses of one accelerator class: the methods it resolves and its module's functions."""
    import sys

    device = accelerator._device_type or accelerator._name
    found = Extraction()
    functions: list[tuple[Any, Any]] = []  # (function, class whose data it reads)
    for name in dir(accelerator):
        owner = next((c for c in accelerator.__mro__ if name in c.__dict__), None)
        ours = owner is not None and (owner.__module__.startswith("anyaccel.")
                                      or owner.__module__ == accelerator.__module__)
        if owner is None or not ours:
            continue
        member = owner.__dict__[name]
        for function in (getattr(member, "__func__", None), getattr(member, "fget", None), member):
            if inspect.isfunction(function):
                functions.append((function, accelerator))
                break
    module = sys.modules[accelerator.__module__]
    functions += [(f, accelerator) for _, f in inspect.getmembers(module, inspect.isfunction)
                  if f.__module__ == module.__name__]
    for function, owner in functions:
        source_file = inspect.getsourcefile(function)
        lines, start = inspect.getsourcelines(function)
        tree = ast.parse(textwrap.dedent("".join(lines))).body[0]
        assert isinstance(tree, ast.FunctionDef | ast.AsyncFunctionDef)
        module_tree = ast.parse(Path(source_file).read_text()) if source_file else ast.Module([], [])
        where = _relative(source_file)
        _merge(found, _Walker(where, start - 1, (device,), owner, _constants(module_tree)).run(tree))
    return _dedupe(found)


def _dedupe(found: Extraction) -> Extraction:
    unique = list(dict.fromkeys(found.accesses))
    return Extraction(unique, sorted(set(found.unresolved)))


def _relative(source_file: str | None) -> str:
    """``anyaccel/...`` for the repository's files; other files (a test's planted module) as they are."""
    if source_file is None:
        return "?"
    path = Path(source_file).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
