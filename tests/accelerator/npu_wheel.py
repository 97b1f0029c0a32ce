"""torch_npu's Python API read from its wheel (``zipfile`` + ``ast``), never imported, for ``test_device_api.py``.

torch_npu cannot be imported without Ascend's runtime libraries, so the check reads what the wheel ships:

- ``torch.npu`` is ``torch_npu.npu`` (``torch._register_device_module("npu", torch_npu.npu)`` in
  ``torch_npu/_init/registry/backend.py``): names are resolved through its Python sources, following
  ``from .x import name`` and ``from .x import *``, module attributes, classes and submodules; a function's
  signature is rebuilt from its ``ast`` arguments.
- ``torch_npu.<op>`` is ``torch.ops.npu.<op>`` (``torch_npu/utils/custom_ops.py`` and
  ``torch_npu/_init/core/_exports.py`` copy every ``torch.ops.npu`` name): its overloads' schemas are read from
  ``torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml``, the source the wheel's C++ registrations are
  generated from.
- A name reached through a function returning a C extension module (``torch.npu.npurt()`` returns
  ``torch_npu._C._npurt``) is looked for as a NUL-terminated name in the wheel's shared libraries, where its
  pybind11 registration keeps it; its signature is not readable there.
"""

from __future__ import annotations

import ast
import glob
import inspect
import keyword
import os
import re
import zipfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

VERSION = "2.14.0"
#: where ``scripts/install_toolchains.sh`` puts the wheel; ``ANYACCEL_TORCH_NPU_WHEEL`` names another file
WHEEL_DIR = "${ANYACCEL_TOOLCHAINS_DIR:-$HOME/.cache/anyaccel-toolchains}/wheels"
INSTALL = (f"python -m pip download --no-deps --only-binary=:all: torch_npu=={VERSION} -d "
           f"{WHEEL_DIR}  (or bash scripts/install_toolchains.sh)")
SCHEMAS = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
_FUNC = re.compile(r"^- func: ([A-Za-z0-9_]+)(?:\.[A-Za-z0-9_]+)?\((.*)\) ->", re.MULTILINE)


def find_wheel() -> Path | None:
    """The torch_npu wheel: ``ANYACCEL_TORCH_NPU_WHEEL``, else the one in the toolchains cache, else None."""
    named = os.environ.get("ANYACCEL_TORCH_NPU_WHEEL")
    if named:
        return Path(named)
    root = os.environ.get("ANYACCEL_TOOLCHAINS_DIR") or os.path.expanduser("~/.cache/anyaccel-toolchains")
    found = sorted(glob.glob(os.path.join(root, "wheels", f"torch_npu-{VERSION}-*.whl")))
    return Path(found[-1]) if found else None


@dataclass(frozen=True)
class Found:
    """What a name is in the wheel: ``kind`` (function, class, value, module, op, extension), the
    signatures it accepts (one per op overload; empty when not readable) and where it was found."""

    kind: str
    signatures: tuple[inspect.Signature, ...]
    where: str


def signature_of(args: ast.arguments, drop_first: bool = False) -> inspect.Signature:
    """An ``inspect.Signature`` with the parameter names, kinds and defaults of a ``def``'s arguments."""
    kinds = inspect.Parameter
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [kinds(a.arg, kinds.POSITIONAL_ONLY if i < len(args.posonlyargs) else kinds.POSITIONAL_OR_KEYWORD,
                    default=kinds.empty if d is None else ...)
              for i, (a, d) in enumerate(zip(positional, defaults, strict=True))]
    if drop_first:
        params = params[1:]
    if args.vararg:
        params.append(kinds(args.vararg.arg, kinds.VAR_POSITIONAL))
    params += [kinds(a.arg, kinds.KEYWORD_ONLY, default=kinds.empty if d is None else ...)
               for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    if args.kwarg:
        params.append(kinds(args.kwarg.arg, kinds.VAR_KEYWORD))
    return inspect.Signature(params)


def schema_signature(arguments: str) -> inspect.Signature:
    """The Python call signature of an ATen schema's argument list (``Tensor grad, *, Tensor(a!) var``)."""
    kinds = inspect.Parameter
    params, keyword_only, depth, item = [], False, 0, ""
    for char in arguments + ",":
        if char == "," and depth == 0:
            item = item.strip()
            if item == "*":
                keyword_only = True
            elif item:
                declaration, _, default = item.partition("=")
                name = declaration.split()[-1]
                name = f"{name}_" if keyword.iskeyword(name) else name  # ``from``: reachable only through **kwargs
                params.append(kinds(name, kinds.KEYWORD_ONLY if keyword_only
                                    else kinds.POSITIONAL_OR_KEYWORD, default=... if default else kinds.empty))
            item = ""
            continue
        depth += char in "(["
        depth -= char in ")]"
        item += char
    return inspect.Signature(params)


class NPUWheel:
    """Name lookups in one torch_npu wheel."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.zip = zipfile.ZipFile(path)
        self.files = set(self.zip.namelist())
        self._trees: dict[str, ast.Module | None] = {}

    def _file(self, module: str) -> str | None:
        base = module.replace(".", "/")
        return next((f for f in (f"{base}.py", f"{base}/__init__.py") if f in self.files), None)

    def _tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            file = self._file(module)
            self._trees[module] = ast.parse(self.zip.read(file), filename=file) if file else None
        return self._trees[module]

    @cached_property
    def ops(self) -> dict[str, tuple[inspect.Signature, ...]]:
        """``torch.ops.npu`` op name -> the call signatures of its overloads, from the codegen schema file."""
        found: dict[str, list[inspect.Signature]] = {}
        for name, arguments in _FUNC.findall(self.zip.read(SCHEMAS).decode()):
            found.setdefault(name, []).append(schema_signature(arguments))
        return {name: tuple(signatures) for name, signatures in found.items()}

    @cached_property
    def _binaries(self) -> list[bytes]:
        return [self.zip.read(f) for f in sorted(self.files) if f.startswith("torch_npu/") and ".so" in f]

    def in_extension(self, name: str) -> bool:
        """True when a shared library of the wheel holds ``name`` as a NUL-terminated string."""
        needle = name.encode() + b"\0"
        return any(needle in blob for blob in self._binaries)

    def resolve(self, module: str, path: tuple[str, ...]) -> Found | None:
        """What ``<module>.<path...>`` is (``"()"`` in ``path``: the value its function returns), or None."""
        found = Found("module", (), module) if self._file(module) else None
        for i, name in enumerate(path):
            if found is None:
                return None
            if found.kind == "extension":
                found = found if self.in_extension(name) else None
            elif name == "()":
                found = self._returned(found)
            elif found.kind == "module":
                found = self._name(found.where, name)
            elif found.kind == "class":
                found = self._member(found, name)
            else:
                return None  # a member of a value: not readable statically
            if found is not None and i == len(path) - 1:
                return found
        return found

    def _statements(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out = []
        for node in body:
            out.append(node)
            if isinstance(node, ast.If | ast.Try):
                for block in (node.body, node.orelse, *(h.body for h in getattr(node, "handlers", ())),
                              getattr(node, "finalbody", [])):
                    out += self._statements(block)
        return out

    def _name(self, module: str, name: str, depth: int = 0) -> Found | None:
        tree = self._tree(module)
        if depth > 8:
            return None
        where = f"{module}.{name}"
        found = None
        if module == "torch_npu" and name in self.ops:
            found = Found("op", self.ops[name], f"torch.ops.npu.{name}")
        for node in self._statements(tree.body if tree else []):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
                found = Found("function", (signature_of(node.args),), where)
            elif isinstance(node, ast.ClassDef) and node.name == name:
                found = Found("class", self._init(node), where)
            elif isinstance(node, ast.Assign | ast.AnnAssign) and name in _targets(node):
                found = self._value(module, node.value, where, depth)
            elif isinstance(node, ast.ImportFrom):
                source = self._absolute(module, node)
                for alias in node.names:
                    if alias.name == "*":
                        found = self._name(source, name, depth + 1) or found
                    elif (alias.asname or alias.name) == name:
                        sub = f"{source}.{alias.name}"
                        found = (Found("module", (), sub) if self._file(sub)
                                 else self._name(source, alias.name, depth + 1) or found)
        if found is None and self._file(f"{module}.{name}"):
            found = Found("module", (), f"{module}.{name}")
        return found

    def _absolute(self, module: str, node: ast.ImportFrom) -> str:
        """The module a ``from ... import`` in ``module`` reads from."""
        if not node.level:
            return node.module or ""
        parts = module.split(".")
        package = parts if (self._file(module) or "").endswith("__init__.py") else parts[:-1]
        base = package[: len(package) - (node.level - 1)]
        return ".".join([*base, *([node.module] if node.module else [])])

    def _value(self, module: str, value: ast.expr | None, where: str, depth: int) -> Found:
        dotted = ast.unparse(value) if value is not None else ""
        if dotted.startswith("torch.ops.npu."):
            op = dotted.rsplit(".", 1)[-1]
            return Found("op", self.ops.get(op, ()), dotted)
        if isinstance(value, ast.Name):
            return self._name(module, value.id, depth + 1) or Found("value", (), where)
        return Found("value", (), where)

    def _init(self, node: ast.ClassDef) -> tuple[inspect.Signature, ...]:
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        return (signature_of(init.args, drop_first=True),) if init else ()

    def _member(self, found: Found, name: str) -> Found | None:
        module, _, cls = found.where.rpartition(".")
        tree = self._tree(module)
        node = next((n for n in self._statements(tree.body if tree else [])
                     if isinstance(n, ast.ClassDef) and n.name == cls), None)
        for item in node.body if node else []:
            if isinstance(item, ast.FunctionDef) and item.name == name:
                static = any(ast.unparse(d) == "staticmethod" for d in item.decorator_list)
                return Found("function", (signature_of(item.args, drop_first=not static),), f"{found.where}.{name}")
            if isinstance(item, ast.Assign | ast.AnnAssign) and name in _targets(item):
                return Found("value", (), f"{found.where}.{name}")
        return None  # possibly inherited: not followed

    def _returned(self, found: Found) -> Found | None:
        """What a function returns, when it returns a ``torch_npu._C`` attribute (an extension module)."""
        if found.kind != "function":
            return None
        module, _, name = found.where.rpartition(".")
        node = self._name(module, name)
        tree = self._tree(module)
        for item in self._statements(tree.body if tree else []):
            if isinstance(item, ast.FunctionDef) and item.name == name and node is not None:
                for ret in ast.walk(item):
                    if isinstance(ret, ast.Return) and ret.value is not None and \
                            ast.unparse(ret.value).startswith("torch_npu._C."):
                        return Found("extension", (), ast.unparse(ret.value))
        return None


def _targets(node: ast.Assign | ast.AnnAssign) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {t.id for t in targets if isinstance(t, ast.Name)}
