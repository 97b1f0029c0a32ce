"""Fail when package code outside ``anyaccel/_compat/`` uses a private torch or Triton name.

A private name is any segment starting with one underscore (``torch._C``, ``torch._dynamo``,
``triton.runtime.jit._something``, ``tensor._version`` is not covered: only names reached from the
``torch``/``triton`` modules). Dunder names (``torch.__version__``) are public. Every use of a private name
lives in ``anyaccel/_compat/``, one module per dependency, with a public fallback, so a torch or Triton
release that moves one is fixed in one place.

The check parses every module (comments do not count) and follows import aliases: after
``import torch.nn.functional as F`` or ``from torch import _C``, ``F._x`` and ``_C.y`` are seen as
``torch.nn.functional._x`` and ``torch._C.y``. ``getattr(torch, "_x")`` with a literal string counts too.

Private internals reached without a ``torch``/``triton`` module path are caught where they can be named:

* string literals (docstrings aside) that spell a private torch/Triton path (``"torch._dynamo"``) or one of
  the private attributes torch sets on functions and optimizers (``"_dynamo_marked_constant"``,
  ``"_optimizer_step_code"``, ...; `PRIVATE_ATTRIBUTES`);
* those attributes read or written on any object (``self._optimizer_step_code()``);
* ``ctypes`` writes into tensor memory: ``<ctypes type>.from_address(...data_ptr()...)``,
  ``ctypes.memmove``/``memset`` with a ``data_ptr()`` argument.

Usage: ``python scripts/check_private_names.py [package_dir]``; exit status 1 with one line per use.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOTS = ("torch", "triton")
ALLOWED = ("_compat",)  # the one subpackage that exists to hold them

#: private attributes torch puts on objects that are not modules (functions, optimizers, Function classes)
PRIVATE_ATTRIBUTES = frozenset({
    "_dynamo_marked_constant", "_torchdynamo_disable", "_torchdynamo_orig_callable", "_torchdynamo_inline",
    "_optimizer_step_code", "_optimizer_step_pre_hooks", "_optimizer_step_post_hooks",
    "_optimizer_load_state_dict_pre_hooks", "_optimizer_load_state_dict_post_hooks",
    "_optimizer_state_dict_pre_hooks", "_optimizer_state_dict_post_hooks", "_global_optimizer_pre_hooks",
    "_global_optimizer_post_hooks", "_opoverload", "_schema", "_is_fake",
})


def _is_private(segment: str) -> bool:
    return segment.startswith("_") and not (segment.startswith("__") and segment.endswith("__"))


def _private_path(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] in ROOTS and any(_is_private(p) for p in parts[1:])


class _Scanner(ast.NodeVisitor):
    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}  # local name -> dotted torch/triton path
        self.found: dict[int, str] = {}

    def _report(self, node: ast.AST, dotted: str) -> None:
        line = node.lineno  # type: ignore[attr-defined]
        if len(dotted) > len(self.found.get(line, "")):
            self.found[line] = dotted

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] in ROOTS:
                if _private_path(alias.name):
                    self._report(node, alias.name)
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    self.aliases[root] = root

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module is None or node.level or node.module.split(".")[0] not in ROOTS:
            return
        for alias in node.names:
            dotted = f"{node.module}.{alias.name}"
            if _private_path(dotted):
                self._report(node, dotted)
            self.aliases[alias.asname or alias.name] = dotted

    def _resolve(self, node: ast.AST) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return ".".join([self.aliases[node.id], *reversed(parts)])
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self._resolve(node)
        if dotted is not None and _private_path(dotted):
            self._report(node, dotted)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (isinstance(func, ast.Name) and func.id in ("getattr", "hasattr", "setattr", "delattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)):
            target = self._resolve(node.args[0])
            if target is not None and _private_path(f"{target}.{node.args[1].value}"):
                self._report(node, f"{target}.{node.args[1].value}")
        self.generic_visit(node)


def _docstrings(tree: ast.AST) -> set[int]:
    """``id()`` of every docstring constant of ``tree`` (module, class and function docstrings)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def _mentions_data_ptr(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "data_ptr" for n in ast.walk(node))


def _other_uses(tree: ast.AST, scanner: _Scanner) -> None:
    """Private internals not reached through a module path (see the module docstring)."""
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
            if text in PRIVATE_ATTRIBUTES or (_private_path(text) and " " not in text):
                scanner._report(node, repr(text))
        elif isinstance(node, ast.Attribute) and node.attr in PRIVATE_ATTRIBUTES:
            scanner._report(node, f"<object>.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            ctypes_call = func.attr in ("from_address", "from_buffer") or (
                func.attr in ("memmove", "memset") and isinstance(func.value, ast.Name) and
                scanner.aliases.get(func.value.id, func.value.id) == "ctypes")
            if ctypes_call and any(_mentions_data_ptr(a) for a in node.args):
                scanner._report(node, f"ctypes {func.attr} into tensor memory")


def uses(path: Path) -> list[str]:
    """The private torch/Triton names one source file uses, as ``path:line: name`` lines."""
    tree = ast.parse(path.read_text(), filename=str(path))
    # aliases are collected first (module level and function level alike), then uses are resolved
    scanner = _Scanner()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            scanner.visit_Import(node)
        elif isinstance(node, ast.ImportFrom):
            scanner.visit_ImportFrom(node)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            dotted = scanner._resolve(node)
            if dotted is not None and _private_path(dotted):
                scanner._report(node, dotted)
        elif isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Name) and func.id in ("getattr", "hasattr", "setattr", "delattr")
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                    and isinstance(node.args[1].value, str)):
                target = scanner._resolve(node.args[0])
                if target is not None and _private_path(f"{target}.{node.args[1].value}"):
                    scanner._report(node, f"{target}.{node.args[1].value}")
    _other_uses(tree, scanner)
    return [f"{path}:{line}: {scanner.found[line]}" for line in sorted(scanner.found)]


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1] / "anyaccel"
    problems = []
    for path in sorted(root.rglob("*.py")):
        if any(part in ALLOWED for part in path.relative_to(root).parts):
            continue
        problems.extend(uses(path))
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} private torch/Triton name(s) outside anyaccel/_compat/: move each into a "
              f"_compat module with a public fallback", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
