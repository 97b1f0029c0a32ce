"""Fail when package code outside ``anyaccel/_compat/`` uses a private torch or Triton name.

A private name is any segment starting with one underscore (``torch._C``, ``torch._dynamo``,
``triton.runtime.jit._something``, ``tensor._version`` is not covered: only names reached from the
``torch``/``triton`` modules). Dunder names (``torch.__version__``) are public. Every use of a private name
lives in ``anyaccel/_compat/``, one module per dependency, with a public fallback, so a torch or Triton
release that moves one is fixed in one place.

The check parses every module (strings and comments do not count) and follows import aliases: after
``import torch.nn.functional as F`` or ``from torch import _C``, ``F._x`` and ``_C.y`` are seen as
``torch.nn.functional._x`` and ``torch._C.y``. ``getattr(torch, "_x")`` with a literal string counts too.

Usage: ``python scripts/check_private_names.py [package_dir]``; exit status 1 with one line per use.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOTS = ("torch", "triton")
ALLOWED = ("_compat",)  # the one subpackage that exists to hold them


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
