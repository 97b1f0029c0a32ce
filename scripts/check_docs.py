"""Fail when a public name of a documented module has no docstring or is missing from the API reference, or
a docstring or page holds a raw Sphinx role.

    python scripts/check_docs.py                                  # the modules of DOCUMENTED_MODULES
    python scripts/check_docs.py --inventory site/objects.inv     # also: each name was rendered by mkdocs
    python scripts/check_docs.py --api-dir DIR MODULE ...         # other modules / pages (the tests do this)

Exit status 1 with one line per problem, 0 when every name is documented.

**Public names** of a module: its ``__all__`` when it defines one; else, for a lazy module (PEP 562: it
defines ``__dir__``), the names ``dir(module)`` lists; else the classes and functions defined in the module.
Names starting with an underscore (``__version__`` included) are not checked.

**A docstring**: a class's or function's own ``__doc__`` (not one inherited, nor the signature that
``@dataclass`` writes into an undocumented class); for a constant, a string literal right after its
assignment or ``#:`` comment lines right above it (or ``#:`` at the end of its line), read from the module
that assigns it. mkdocstrings reads the same comments through ``scripts/griffe_anyaccel.py``. The public
methods and properties a documented class defines itself need docstrings too (mkdocstrings would hide
them otherwise).

**In the API reference**: some ``::: identifier`` block of the Markdown pages under ``docs/api/`` renders the
object: the identifier names the object itself (by any import path), or names a module or class holding it
with no ``members:`` option (then every public name of that module is rendered) or a ``members:`` list that
includes it. With ``--inventory`` (the ``objects.inv`` that ``mkdocs build`` writes), the identifier under
which the object was found must also be in the inventory: the page really rendered it (mkdocstrings hides
what it cannot see statically, such as names a lazy module imports on first access).

**No raw Sphinx roles**: mkdocstrings renders docstrings as Markdown, where ``:func:`name``` stays literal
text. A cross-reference is written ``[`name`][anyaccel.module.name]`` (mkdocs-autorefs; ``mkdocs build
--strict`` fails when the target is not rendered anywhere), other code as ``name`` in backticks. Every
``.py`` and ``.md`` file under ``--sources`` (default: ``anyaccel/`` and ``docs/``) is searched; each role
found is one problem line ``path:line: ...``.

The script imports the modules, and nothing but the standard library and anyaccel: it runs in the test
environment, without the docs tooling.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import importlib.util
import inspect
import re
import sys
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: The modules whose public names the API reference documents (docs/api/).
DOCUMENTED_MODULES: tuple[str, ...] = (
    "anyaccel",
    "anyaccel.accelerator",
    "anyaccel.op_builder",
    "anyaccel.ops",
    "anyaccel.ops.adam",
    "anyaccel.ops.lion",
    "anyaccel.ops.lamb",
    "anyaccel.ops.adagrad",
    "anyaccel.ops.aio",
    "anyaccel.ops.nn",
    "anyaccel.ops.optimizer",
    "anyaccel.spec",
    "anyaccel.ops.registry",
    "anyaccel.ops.dispatch",
    "anyaccel.op_builder.classes",
    "anyaccel.ops.validation",
    "anyaccel.ops.cpu_threads",
    "anyaccel.engine",
    "anyaccel.migrate",
    "anyaccel.integrations.deepspeed",
)

#: A Sphinx cross-reference role (``:func:`x```, ``:py:meth:`x```...), which Markdown leaves as literal text.
RAW_ROLE = re.compile(r":(?:py:)?(?:mod|func|meth|class|attr|data|exc|obj|const|ref):`[^`]+`")
#: Where raw roles are looked for when ``--sources`` is not given.
DEFAULT_SOURCES: tuple[Path, ...] = (ROOT / "anyaccel", ROOT / "docs")

_DIRECTIVE = re.compile(r"^:::\s+([A-Za-z_][\w.]*)\s*$")
_MEMBERS = re.compile(r"^(\s+)members:\s*(.*?)\s*$")
_LIST_ITEM = re.compile(r"^\s+-\s+([\w.]+)\s*$")


# ---- public names and docstrings ------------------------------------------------------------------------


def public_names(module: ModuleType) -> list[str]:
    """The public names of ``module`` (see the module docstring), without underscore names."""
    names: Iterable[str]
    if isinstance(getattr(module, "__all__", None), (list, tuple)):
        names = module.__all__
    elif callable(vars(module).get("__dir__")):
        names = dir(module)
    else:
        names = [name for name, obj in vars(module).items()
                 if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == module.__name__]
    return [name for name in dict.fromkeys(names) if not name.startswith("_")]


def comment_docstring(lines: list[str], index: int) -> str | None:
    """The ``#:`` documentation of the assignment starting at ``lines[index]`` (0-based), or None.

    Sphinx's convention, which the docstrings here use for constants: ``#:`` lines right above the
    assignment, or one ``#:`` comment at the end of its first line.
    """
    inline = lines[index].partition("#:")[2] if "#:" in lines[index] else ""
    if inline.strip():
        return inline.strip()
    above: list[str] = []
    i = index - 1
    while i >= 0 and lines[i].lstrip().startswith("#:"):
        above.append(lines[i].lstrip()[2:].strip())
        i -= 1
    text = "\n".join(reversed(above)).strip()
    return text or None


def _module_source(module_name: str) -> tuple[ast.Module, list[str]] | None:
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    text = Path(spec.origin).read_text(encoding="utf-8")
    return ast.parse(text), text.splitlines()


def _statements(body: list[ast.stmt]) -> Iterator[tuple[ast.stmt, ast.stmt | None]]:
    """Top-level statements (descending into ``if``/``try``), each with the statement after it."""
    for i, stmt in enumerate(body):
        yield stmt, body[i + 1] if i + 1 < len(body) else None
        if isinstance(stmt, ast.If):
            yield from _statements(stmt.body)
            yield from _statements(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from _statements(stmt.body)


def _assigned(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


def data_definition(module_name: str, name: str, depth: int = 0) -> tuple[str, str | None] | None:
    """Where the constant ``name`` of ``module_name`` is assigned, following ``from X import name``.

    Returns:
        ``(defining module, its documentation or None)``, or None when no assignment is found.
    """
    parsed = _module_source(module_name)
    if parsed is None or depth > 10:
        return None
    tree, lines = parsed
    for stmt, following in _statements(tree.body):
        if name in _assigned(stmt):
            if (isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)):
                return module_name, inspect.cleandoc(following.value.value)
            return module_name, comment_docstring(lines, stmt.lineno - 1)
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    source = stmt.module or ""
                    if stmt.level:
                        package = module_name if _is_package(module_name) else module_name.rpartition(".")[0]
                        for _ in range(stmt.level - 1):
                            package = package.rpartition(".")[0]
                        source = f"{package}.{source}" if source else package
                    return data_definition(source, alias.name, depth + 1)
    return None


def _is_package(module_name: str) -> bool:
    spec = importlib.util.find_spec(module_name)
    return bool(spec and spec.submodule_search_locations is not None)


def own_docstring(obj: Any) -> str | None:
    """The docstring ``obj`` itself carries (classes, functions, modules), or None."""
    if inspect.isclass(obj):
        doc = obj.__dict__.get("__doc__")
        if dataclasses.is_dataclass(obj) and isinstance(doc, str) and doc.startswith(f"{obj.__name__}("):
            return None  # written by @dataclass from the signature, not by a person
    else:
        doc = getattr(obj, "__doc__", None)
    return doc.strip() or None if isinstance(doc, str) else None


def _is_code(obj: Any) -> bool:
    return inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj)


def object_key(module_name: str, name: str, obj: Any) -> tuple[str, str]:
    """An identity for ``obj`` that does not depend on the import path it was reached by."""
    if inspect.ismodule(obj):
        return "module", obj.__name__
    if _is_code(obj) and getattr(obj, "__module__", None) and getattr(obj, "__qualname__", None):
        return obj.__module__, obj.__qualname__
    found = data_definition(module_name, name)
    return (found[0], name) if found else (module_name, name)


def undocumented_members(cls: type) -> list[str]:
    """The public methods and properties ``cls`` defines itself (not inherited) that have no docstring."""
    missing = []
    for attr, value in vars(cls).items():
        if attr.startswith("_"):
            continue
        func = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
        if inspect.isfunction(func) and not own_docstring(func):
            missing.append(attr)
    return missing


def docstring_problem(module_name: str, name: str, obj: Any) -> str | None:
    """Why ``module_name.name`` counts as undocumented, or None."""
    if _is_code(obj):
        return None if own_docstring(obj) else "has no docstring"
    found = data_definition(module_name, name)
    if found is None:
        return "is a value whose assignment was not found (document it with a #: comment where it is assigned)"
    if not found[1]:
        return f"has no documentation (a #: comment above its assignment in {found[0]})"
    return None


# ---- the API pages ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Directive:
    """One ``::: identifier`` block of an API page.

    Attributes:
        page: the Markdown file.
        line: its line number (1-based).
        target: the identifier.
        members: the ``members:`` option: None (absent: every public member), False (none) or the names.
    """

    page: Path
    line: int
    target: str
    members: list[str] | bool | None


def parse_directives(api_dir: Path) -> list[Directive]:
    """Every ``::: identifier`` block of the Markdown files under ``api_dir`` with its ``members:`` option."""
    found: list[Directive] = []
    for page in sorted(api_dir.rglob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            m = _DIRECTIVE.match(line)
            if not m:
                continue
            members: list[str] | bool | None = None
            j = i + 1
            while j < len(lines) and (lines[j].startswith((" ", "\t")) and lines[j].strip()):
                mm = _MEMBERS.match(lines[j])
                if mm:
                    value = mm.group(2)
                    if value in ("false", "False", "[]"):
                        members = False
                    elif value in ("true", "True"):
                        members = None
                    elif value.startswith("["):
                        members = [v.strip().strip("'\"") for v in value.strip("[]").split(",") if v.strip()]
                    else:
                        members = []
                        k = j + 1
                        while k < len(lines) and _LIST_ITEM.match(lines[k]):
                            members.append(_LIST_ITEM.match(lines[k]).group(1))  # type: ignore[union-attr]
                            k += 1
                j += 1
            found.append(Directive(page, i + 1, m.group(1), members))
    return found


def resolve(identifier: str) -> Any:
    """The object an identifier names: the longest importable module prefix, then attributes.

    Raises:
        LookupError: nothing of that name.
    """
    parts = identifier.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:]:
                obj = getattr(obj, part)
        except AttributeError:
            raise LookupError(identifier) from None
        return obj
    raise LookupError(identifier)


def covered(directives: list[Directive]) -> tuple[dict[tuple[str, str], str], list[str]]:
    """What the directives render: object identity -> the identifier it is rendered under, and problems."""
    out: dict[tuple[str, str], str] = {}
    problems: list[str] = []
    for d in directives:
        where = f"{d.page.relative_to(d.page.parents[1]) if len(d.page.parents) > 1 else d.page}:{d.line}"
        try:
            obj = resolve(d.target)
        except Exception:  # noqa: BLE001 - LookupError, or an import that fails
            problems.append(f"{where}: ::: {d.target} names nothing importable (or importing it fails)")
            continue
        parent, _, leaf = d.target.rpartition(".")
        out.setdefault(object_key(parent, leaf, obj), d.target)
        if d.members is False or not (inspect.ismodule(obj) or inspect.isclass(obj)):
            continue
        names = public_names(obj) if d.members is None and inspect.ismodule(obj) else (d.members or [])
        for name in names:
            try:
                member = getattr(obj, name)
            except Exception:  # noqa: BLE001 - AttributeError, or a lazy name whose import fails
                problems.append(f"{where}: ::: {d.target} lists member {name!r}, which cannot be loaded")
                continue
            out.setdefault(object_key(d.target, name, member), f"{d.target}.{name}")
    return out, problems


def read_inventory(path: Path) -> set[str]:
    """The identifiers of a Sphinx ``objects.inv`` (version 2), as mkdocstrings writes it."""
    data = path.read_bytes()
    header_end = 0
    for _ in range(4):
        header_end = data.index(b"\n", header_end) + 1
    text = zlib.decompress(data[header_end:]).decode("utf-8")
    return {line.split(" ", 1)[0] for line in text.splitlines() if line.strip()}


def raw_roles(sources: Iterable[Path]) -> list[str]:
    """One problem line per Sphinx role in the ``.py`` and ``.md`` files under ``sources`` (files or folders)."""
    problems: list[str] = []
    for source in sources:
        files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.suffix in (".py", ".md"))
        for path in files:
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            for number, line in enumerate(text.splitlines(), 1):
                for match in RAW_ROLE.finditer(line):
                    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                    problems.append(f"{shown}:{number}: raw Sphinx role {match.group(0)} renders as literal text; "
                                    "write [`name`][anyaccel.module.name] (a cross-reference) or `name` (code)")
    return problems


# ---- the check ------------------------------------------------------------------------------------------


def check(modules: Iterable[str], api_dir: Path, inventory: Path | None = None) -> list[str]:
    """Every problem found, one line each (empty: all documented)."""
    problems: list[str] = []
    if not api_dir.is_dir():
        return [f"{api_dir}: no API reference pages"]
    rendered, problems_in_pages = covered(parse_directives(api_dir))
    problems.extend(problems_in_pages)
    identifiers = read_inventory(inventory) if inventory is not None else None
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001 - any import failure is a documentation problem to report
            problems.append(f"{module_name}: cannot be imported ({type(exc).__name__}: {exc})")
            continue
        if not own_docstring(module):
            problems.append(f"{module_name}: the module has no docstring")
        if object_key(module_name, "", module) not in rendered:
            problems.append(f"{module_name}: the module is not in the API reference ({api_dir})")
        for name in public_names(module):
            qualified = f"{module_name}.{name}"
            try:
                obj = getattr(module, name)
            except AttributeError:
                problems.append(f"{qualified}: listed as public but the module has no such attribute")
                continue
            except Exception as exc:  # noqa: BLE001 - a lazy name whose import fails (a missing optional package)
                problems.append(f"{qualified}: cannot be loaded ({type(exc).__name__}: {str(exc).splitlines()[0]})")
                continue
            reason = docstring_problem(module_name, name, obj)
            if reason:
                problems.append(f"{qualified}: {reason}")
            if inspect.isclass(obj):
                problems.extend(f"{qualified}.{member}: has no docstring" for member in undocumented_members(obj))
            at = rendered.get(object_key(module_name, name, obj))
            if at is None:
                problems.append(f"{qualified}: missing from the API reference ({api_dir}: add a ::: block or a "
                                "members: entry)")
            elif identifiers is not None and at not in identifiers:
                problems.append(f"{qualified}: the API reference names it as {at}, but the built site does not "
                                "render it (mkdocstrings cannot see it statically: point the ::: block at the "
                                "module that defines it)")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="modules to check (default: DOCUMENTED_MODULES)")
    parser.add_argument("--api-dir", type=Path, default=ROOT / "docs" / "api",
                        help="the API reference pages (default: docs/api)")
    parser.add_argument("--inventory", type=Path, default=None,
                        help="objects.inv of a built site: also check that each name was rendered")
    parser.add_argument("--sources", type=Path, nargs="+", default=list(DEFAULT_SOURCES),
                        help="files or folders searched for raw Sphinx roles (default: anyaccel/ and docs/)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))  # this checkout's anyaccel, whatever else is installed
    problems = raw_roles(args.sources) + check(args.modules or DOCUMENTED_MODULES, args.api_dir, args.inventory)
    for line in problems:
        print(line)
    if problems:
        print(f"check_docs: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
