"""Griffe extension for the docs site: read anyaccel's sources the way Python and Sphinx read them.

mkdocstrings reads the package with Griffe (statically: nothing is imported). Two conventions of anyaccel's
sources are outside what Griffe reads by itself; this extension, loaded by ``mkdocs.yml`` (``extensions:``),
adds them:

- **``#:`` comments document constants** (Sphinx's convention): ``#:`` lines right above an assignment, or
  one ``#:`` at the end of its line. Griffe reads only string literals after an assignment, so without this
  every such constant would count as undocumented and be hidden (``show_if_no_docstring: false``). The rule
  is `check_docs.comment_docstring`, shared with ``scripts/check_docs.py`` so the site and the check
  agree.
- **Directories without ``__init__.py`` inside a package** (``anyaccel/op_builder/core/``...) are
  subpackages to Python (implicit namespace packages, PEP 420), and setuptools ships them (``packages.find``
  in ``pyproject.toml`` finds namespace packages); Griffe skips them inside a regular package. The extension
  declares each such directory as a namespace subpackage of its package when the package is visited, so
  Griffe then loads its modules as it loads any submodule.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import griffe

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # this checkout's anyaccel (GeneratedBuilders)
from check_docs import comment_docstring  # noqa: E402 - after the path set-up above


class DocComments(griffe.Extension):
    """Give an attribute without a docstring the text of its ``#:`` comments."""

    def on_attribute_instance(self, *, node: Any, attr: griffe.Attribute, agent: Any, **kwargs: Any) -> None:
        """Set ``attr.docstring`` from the ``#:`` comments of its assignment, when it has none."""
        if attr.docstring is not None or attr.lineno is None:
            return
        code = getattr(agent, "code", None)  # the module's source (the static visitor; the inspector has none)
        if not code:
            return
        text = comment_docstring(code.splitlines(), attr.lineno - 1)
        if text:
            attr.docstring = griffe.Docstring(text, lineno=attr.lineno, endlineno=attr.lineno, parent=attr)


class NamespaceSubpackages(griffe.Extension):
    """Declare a package's subdirectories that hold modules but no ``__init__.py`` as its subpackages."""

    def on_module_instance(self, *, node: Any, mod: griffe.Module, agent: Any, **kwargs: Any) -> None:
        """When a package (``__init__.py``) is visited, add a namespace subpackage per such directory."""
        filepath = mod.filepath
        if not isinstance(filepath, Path) or filepath.name != "__init__.py":
            return
        for directory in sorted(p for p in filepath.parent.iterdir() if p.is_dir()):
            if (directory / "__init__.py").exists() or not directory.name.isidentifier():
                continue
            if not any(directory.rglob("*.py")) or directory.name in mod.members:
                continue
            sub = griffe.Module(directory.name, filepath=[directory], parent=mod,
                                lines_collection=mod.lines_collection, modules_collection=mod.modules_collection)
            mod.set_member(directory.name, sub)


class GeneratedBuilders(griffe.Extension):
    """Add the builder classes that ``anyaccel.op_builder`` makes from the op specs on first access.

    ``anyaccel.op_builder.CPUAdamBuilder`` & co. are created by
    [`anyaccel.op_builder.classes.builder_class`][anyaccel.op_builder.classes.builder_class]
    (one per build of every op spec), so no source defines them. This imports the registry (torch included),
    asks it for every builder name and each accelerator's class, and adds one class per name to the module
    with the generated docstring, the per-accelerator builds, ``NAME`` and ``BUILD_VAR``.
    """

    ACCELERATORS = ("cpu", "cuda", "xpu", "npu", "mps")

    def on_module_members(self, *, node: Any, mod: griffe.Module, agent: Any, **kwargs: Any) -> None:
        """For ``anyaccel.op_builder``, add a class per builder name."""
        if mod.path != "anyaccel.op_builder":
            return
        from anyaccel.op_builder.classes import spec_builder_class
        from anyaccel.ops.registry import all_builder_names, get_builder_class

        for name in all_builder_names():
            cls = spec_builder_class(name)
            if cls is None or name in mod.members:
                continue
            rows = []
            for acc in self.ACCELERATORS:
                row = get_builder_class(name, acc)
                if row is not None:
                    base = row.__mro__[1]
                    rows.append(f"| `{acc}` | `{row.NAME}` | `{base.__module__}.{base.__qualname__}` |")
            text = (f"{cls.__doc__}\n\nThe class for an accelerator: `get_builder_class({name!r}, accelerator)` "
                    "(or `get_accelerator().create_op_builder(...)`); none on the accelerators not listed.\n\n"
                    "| accelerator | `NAME` | base |\n|---|---|---|\n" + "\n".join(rows))
            generated = griffe.Class(name, lineno=None, endlineno=None, parent=mod,
                                     docstring=griffe.Docstring(text, parent=None),
                                     lines_collection=mod.lines_collection, modules_collection=mod.modules_collection)
            generated.docstring.parent = generated  # type: ignore[union-attr]
            for attr, value, doc in (("NAME", cls.NAME, "the build's name (cache directory, AOT variable)"),
                                     ("BUILD_VAR", cls.BUILD_VAR, "``=1`` selects this build for AOT builds")):
                member = griffe.Attribute(attr, value=repr(value), parent=generated,
                                          docstring=griffe.Docstring(doc, parent=None))
                member.docstring.parent = member  # type: ignore[union-attr]
                generated.set_member(attr, member)
            mod.set_member(name, generated)
