"""One-off migration: turn Sphinx roles (``:func:`x```) in sources and pages into mkdocstrings cross-references.

mkdocstrings renders docstrings as Markdown, where a Sphinx role stays literal text; ``scripts/check_docs.py``
fails on one. This script rewrites them, for a branch written before that rule (run it after a merge)::

    NO_MKDOCS_2_WARNING=1 mkdocs build --strict        # site/objects.inv: what the site renders
    python scripts/convert_sphinx_roles.py $(grep -rlE ':(func|meth|class|mod|attr|data):`' anyaccel docs)

A role whose target the built site renders (found through the module's scope: its classes, its module, its
imports, its parent packages) becomes ``[`x`][anyaccel.full.name]``; any other becomes `` `x` ``. A ``~``
shows the last component only, as in Sphinx. Python lines the rewrite pushed past 120 characters are then
split (docstrings and comments only; the rest is listed for a hand edit).
"""

from __future__ import annotations

import argparse
import ast
import bisect
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(1, str(ROOT))
import check_docs as cd  # noqa: E402 - after the path set-up above

#: A role and its parts: kind, ``~``, target.
ROLE = re.compile(r":(?:py:)?(meth|mod|class|func|attr|data|exc|obj|const):`(~?)([^`]+)`")
#: ruff's line length (pyproject.toml).
LIMIT = 120
#: A Google-style section item ("name: text", "name (type): text").
ITEM = re.compile(r"^\s*(\*{0,2}[\w.]+(?:, [\w.]+)*)( \([^)]*\))?: \S")


class Resolver:
    """Which identifier of the built site (``objects.inv``) names an object, whatever path reaches it."""

    def __init__(self, inventory: Path) -> None:
        self.inventory = cd.read_inventory(inventory)
        self.keys: dict[tuple[str, str], str] = {}
        for ident in sorted(self.inventory, key=lambda i: (i.count("."), len(i), i)):
            try:
                obj = cd.resolve(ident)
                parent, _, leaf = ident.rpartition(".")
                self.keys.setdefault(cd.object_key(parent, leaf, obj), ident)
            except Exception:  # noqa: BLE001, S112 - not a Python object (a page anchor), or unimportable
                continue

    def lookup(self, candidate: str) -> str | None:
        """The rendered identifier; "" when the object exists but is not rendered; None when there is none."""
        if candidate in self.inventory:
            return candidate
        try:
            obj = cd.resolve(candidate)
            parent, _, leaf = candidate.rpartition(".")
            return self.keys.get(cd.object_key(parent, leaf, obj), "")
        except Exception:  # noqa: BLE001 - LookupError, or an import that fails
            return None


def _module_of(path: Path) -> str:
    parts = list(path.resolve().relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _scopes(source: str) -> tuple[list[tuple[int, int, str]], dict[str, str]]:
    """(classes as (first line, last line, qualified name), imported name -> its full name)."""
    tree = ast.parse(source)
    classes: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                classes.append((child.lineno, child.end_lineno or child.lineno, prefix + child.name))
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    imports: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imports.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            imports.update({a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
                            for a in node.names})
    return classes, imports


def convert(path: Path, resolver: Resolver) -> tuple[int, int]:
    """Rewrite the roles of one file; returns (cross-references, inline code)."""
    text = path.read_text()
    python = path.suffix == ".py"
    module = _module_of(path) if python else ""
    classes, imports = _scopes(text) if python else ([], {})
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    counts = [0, 0]

    def replace(match: re.Match[str]) -> str:
        _, tilde, target = match.groups()
        bare = target.strip().rstrip("()").lstrip(".")
        display = target.strip().lstrip(".").split(".")[-1] if tilde else target.strip()
        line = bisect.bisect_right(starts, match.start())
        candidates = [bare] if bare.startswith("anyaccel") else [
            *(f"{module}.{q}.{bare}" for _, _, q in sorted((c for c in classes if c[0] <= line <= c[1]),
                                                          key=lambda c: -len(c[2]))),
            *([f"{module}.{bare}"] if module else []),
            *([imports[bare.split(".")[0]] + bare[len(bare.split(".")[0]):]] if bare.split(".")[0] in imports
              else []),
            *(".".join(module.split(".")[:cut]) + "." + bare for cut in range(module.count("."), 0, -1)),
            bare,
        ]
        for candidate in candidates:
            found = resolver.lookup(candidate)
            if found is None:
                continue
            if found:
                counts[0] += 1
                return f"[`{display}`][{found}]"
            break
        counts[1] += 1
        return f"`{display}`"

    new = ROLE.sub(replace, text)
    if new != text:
        path.write_text(new)
    return counts[0], counts[1]


def _split_at(line: str) -> int | None:
    cut = line.rfind(" ", 0, LIMIT + 1)
    indent = len(line) - len(line.lstrip())
    while cut > indent:
        before = line[:cut]
        if before.count("[") == before.count("]") and before.rstrip().strip("#:\"' ") != "":
            return cut
        cut = line.rfind(" ", 0, cut)
    return None


def rewrap(files: list[Path]) -> list[str]:
    """Split the docstring and comment lines of ``files`` over :data:`LIMIT`; returns the lines left long."""
    report = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "E501", "--output-format", "concise",
                             "-q", *map(str, files)], cwd=ROOT, capture_output=True, text=True).stdout
    long_lines: dict[str, set[int]] = defaultdict(set)
    for row in report.splitlines():
        found = re.match(r"^(.*?):(\d+):\d+: E501", row)
        if found:
            long_lines[found.group(1)].add(int(found.group(2)))
    left: list[str] = []
    for name, numbers in long_lines.items():
        path = ROOT / name
        lines = path.read_text().split("\n")
        doc_lines: set[int] = set()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value,
                                                                                                  str):
                doc_lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        for number in sorted(numbers, reverse=True):
            todo = [number]
            while todo:
                n = todo.pop()
                line = lines[n - 1]
                stripped = line.lstrip()
                indent = line[: len(line) - len(stripped)]
                if len(line) <= LIMIT:
                    continue
                if stripped.startswith("#"):
                    cont = indent + ("#: " if stripped.startswith("#:") else "# ")
                elif n in doc_lines:
                    bullet, item = re.match(r"[-*] ", stripped), ITEM.match(line) and len(indent) > 4
                    cont = indent + ("  " if bullet else "    " if item else "")
                else:
                    left.append(f"{name}:{n}")
                    continue
                cut = _split_at(line)
                tail = line[cut + 1:].lstrip() if cut is not None else ""
                if cut is None or tail.startswith('"""'):
                    left.append(f"{name}:{n}")
                    continue
                lines[n - 1], _ = line[:cut].rstrip(), lines.insert(n, cont + tail)
                todo.append(n + 1)
        path.write_text("\n".join(lines))
    return left


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help=".py and .md files to rewrite")
    parser.add_argument("--inventory", type=Path, default=ROOT / "site" / "objects.inv",
                        help="objects.inv of the built site (default: site/objects.inv)")
    args = parser.parse_args(argv)
    resolver = Resolver(args.inventory)
    linked = plain = 0
    for path in args.files:
        a, b = convert(path, resolver)
        linked, plain = linked + a, plain + b
    print(f"{linked} cross-reference(s), {plain} inline code")
    for where in rewrap([p for p in args.files if p.suffix == ".py"]):
        print(f"{where}: still over {LIMIT} characters: split it by hand")
    return 0


if __name__ == "__main__":
    sys.exit(main())
