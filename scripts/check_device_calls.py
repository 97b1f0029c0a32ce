"""Fail when package code outside ``anyaccel/accelerator/`` calls a vendor runtime module directly.

Runtime calls are written once for all torch devices (the accelerator layer, ``torch.get_device_module``,
``torch.accelerator``); a ``torch.cuda.synchronize()`` elsewhere would make that code CUDA-only. The check
parses every module (strings and comments do not count) and reports attribute chains that start with
``torch.cuda``, ``torch.xpu``, ``torch.npu`` or ``torch.mps``, and imports of those modules.

Usage: ``python scripts/check_device_calls.py [package_dir]``; exit status 1 with one line per use.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

VENDOR_MODULES = ("torch.cuda", "torch.xpu", "torch.npu", "torch.mps")
ALLOWED = ("accelerator",)  # subpackages that exist to call them


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def uses(path: Path) -> list[str]:
    """The vendor-module uses of one source file, as ``path:line: text`` lines."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted is not None and any(dotted == m or dotted.startswith(m + ".") for m in VENDOR_MODULES):
                name = dotted
        elif isinstance(node, ast.Import):
            name = next((a.name for a in node.names if a.name in VENDOR_MODULES), None)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module in VENDOR_MODULES or (node.module == "torch" and any(
                    f"torch.{a.name}" in VENDOR_MODULES for a in node.names)):
                name = node.module
        if name is not None:
            found.append(f"{path}:{node.lineno}: {name}")
    longest: dict[int, str] = {}  # per line, the longest chain (torch.cuda.synchronize, not torch.cuda too)
    for entry in found:
        line = int(entry.split(":")[-2])
        if len(entry) > len(longest.get(line, "")):
            longest[line] = entry
    return [longest[line] for line in sorted(longest)]


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1] / "anyaccel"
    problems = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] in ALLOWED:
            continue
        problems += uses(path)
    for line in problems:
        print(line + "  (use get_accelerator() or torch.get_device_module(device) instead)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
