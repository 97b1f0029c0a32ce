"""Write (or, with ``--check``, compare) the checked-in builder classes: one per native build, one per DeepSpeed alias.

Every [`NativeBuild`][anyaccel.spec.NativeBuild] of anyaccel's own op specs (those whose ``source`` is an
``anyaccel`` module; a spec another package contributes gets its class made at run time) becomes one
``class <Name>(<backend base>):`` with ``NAME``, ``BUILD_VAR``, ``SPEC`` and ``BUILD`` set, so a builder can be
found with grep and its MRO has two of anyaccel's classes (the backend base and ``OpBuilder``).

Every class is named after its build's builder name, DeepSpeed's (``FusedAdamBuilder``). The build
``from anyaccel.op_builder import <name>`` returns (the host row, else CUDA's, else the first accelerator by
name: `anyaccel.op_builder.classes.spec_builder_class`) is defined at the top of the module; the other builds
sharing that builder name are defined inside a namespace class per backend (``XPU.FusedAdamBuilder``,
``NPU.FusedAdamBuilder``), so each has its own grep-able ``class`` line and its qualified name finds it.

DeepSpeed's builder names that anyaccel serves with a build of another name
(``anyaccel.integrations.deepspeed.builder_names.ALIASES``: ``FusedAdamBuilder`` on the CPU is ``cpu_adam``) are
DeepSpeed's vocabulary, so their classes go to ``anyaccel/integrations/deepspeed/alias_builders.py``, one
``class <alias>(<backend base>):`` each, with the build's ``NAME``, ``BUILD_VAR``, ``SPEC`` and ``BUILD``: two of
anyaccel's classes in the MRO, as the builds' own classes.

``--check`` exits with status 1 and shows the first differences when a file and the specs (or the alias table)
disagree (``tests/op_builder/test_builders_module.py`` runs it). Writing leaves a file that is already in step
untouched.

Usage::

    python scripts/gen_builders.py [--check] [--out anyaccel/op_builder/builders.py]
                                   [--aliases-out anyaccel/integrations/deepspeed/alias_builders.py]
"""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
import textwrap
from pathlib import Path

from anyaccel.integrations.deepspeed import builder_names
from anyaccel.op_builder.classes import ANY_ACCELERATOR, BACKEND_BASES, DELEGATING_BASE, native_rows, spec_builds
from anyaccel.spec import NativeBuild, OpSpec, op_spec

logger = logging.getLogger("gen_builders")

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "anyaccel" / "op_builder" / "builders.py"
ALIASES_OUT = ROOT / Path(*builder_names.CLASSES_MODULE.split(".")).with_suffix(".py")
WIDTH = 120

HEADER = '''"""The builder classes of anyaccel's op specs, one per native build (generated: do not edit).

Written by ``scripts/gen_builders.py`` from the op specs; ``tests/op_builder/test_builders_module.py`` fails
when this file and the specs disagree (run ``python scripts/gen_builders.py`` to rewrite it).
[`anyaccel.op_builder.classes.builder_class`][anyaccel.op_builder.classes.builder_class] returns these
classes; ``from anyaccel.op_builder import CPUAdamBuilder`` and ``create_op_builder("CPUAdamBuilder")`` give
them. A build sharing its builder name with the build of another accelerator is defined in its backend's
namespace class (``XPU.FusedAdamBuilder``).

Imported on first use of a builder class, never by ``import anyaccel.op_builder``.
"""

from __future__ import annotations

'''

ALIASES_HEADER = '''"""A class per DeepSpeed builder name served by a build of another name (generated: do not edit).

Written by ``scripts/gen_builders.py`` from ``ALIASES`` (`anyaccel.integrations.deepspeed.builder_names`) and the
op specs; ``tests/op_builder/test_builders_module.py`` fails when this file, the table and the specs disagree (run
``python scripts/gen_builders.py`` to rewrite it). Each class is named after DeepSpeed's builder name, on the
build's backend base, with the build's ``NAME``, ``BUILD_VAR``, ``SPEC`` and ``BUILD`` (so the same cache entry
and loaded library as the build's own class): ``create_op_builder("FusedAdamBuilder")`` on the CPU returns
``FusedAdamBuilder`` here, through the alias's ``builder_class``.

Imported on first use of one of these names, never by ``import anyaccel.integrations.deepspeed``.
"""

from __future__ import annotations

'''


def _base(build: NativeBuild) -> tuple[str, str]:
    """(module, class) of the backend base of ``build`` (`BACKEND_BASES`, or `DELEGATING_BASE`)."""
    module, _, name = (DELEGATING_BASE if build.module else BACKEND_BASES[build.backend]).partition(":")
    return module, name


def class_names() -> dict[tuple[str, str], str]:
    """(op family, build NAME) -> the qualified name of the build's class in the generated module
    (``FusedAdamBuilder``, ``XPU.FusedAdamBuilder``; see the module docstring).

    Raises:
        ValueError: two builds would get the same class name.
    """
    primary: dict[str, NativeBuild] = {}
    for builder, row in native_rows().items():
        acc = sorted(row, key=lambda a: (a != ANY_ACCELERATOR, a != "cuda", a))[0]
        primary[builder] = row[acc][1]
    names: dict[tuple[str, str], str] = {}
    for s, b in _own_builds():
        names[(s.family, b.name)] = b.builder if primary.get(b.builder) is b else f"{b.backend.upper()}.{b.builder}"
    if len(set(names.values())) != len(names):
        raise ValueError(f"two builds would share a class name: {sorted(names.values())}")
    return names


def _own_builds() -> list[tuple[OpSpec, NativeBuild]]:
    """The (spec, build) pairs of anyaccel's own specs."""
    return [(s, b) for s, b in spec_builds() if s.source.partition(".")[0] == "anyaccel"]


def _doc(text: str, indent: str) -> str:
    """``text`` as a docstring at ``indent``, wrapped at `WIDTH`."""
    lines = textwrap.wrap(text, WIDTH - len(indent) - 4, break_on_hyphens=False)
    if len(lines) == 1 and len(lines[0]) <= WIDTH - len(indent) - 6:
        return f'{indent}"""{lines[0]}"""\n'
    return f'{indent}"""' + f"\n{indent}".join(lines) + f'\n{indent}"""\n'


def _class(s: OpSpec, b: NativeBuild, indent: str, name: str = "", doc: str = "") -> str:
    """The ``class`` statement of build ``b`` of spec ``s``, at ``indent``, named ``name`` (the build's builder
    name when empty) with docstring ``doc`` (the build's description when empty)."""
    body = indent + "    "
    doc = doc or (f"{b.builder} ({b.backend}): builds {', '.join(b.functions)} of the {s.family!r} op spec "
                  f"({s.source}). {s.summary}.")
    return (f"{indent}class {name or b.builder}({_base(b)[1]}):\n" + _doc(doc, body)
            + f'\n{body}NAME = "{b.name}"\n{body}BUILD_VAR = "{b.build_var}"\n'
            f'{body}SPEC = op_spec("{s.family}")\n{body}BUILD = SPEC.build("{b.name}")\n')


def render() -> str:
    """The text of the generated module for the current specs."""
    names = class_names()
    bases = sorted({_base(b) for _, b in _own_builds()})
    out = [HEADER]
    out += [f"from {module} import {name}\n" for module, name in bases]
    out.append("from anyaccel.spec import op_spec\n\n")
    top = sorted(n for n in names.values() if "." not in n)
    spaces = sorted({n.partition(".")[0] for n in names.values() if "." in n})
    out.append("__all__ = [\n" + "".join(f'    "{n}",\n' for n in (*top, *spaces)) + "]\n")
    for s, b in _own_builds():
        if "." not in names[(s.family, b.name)]:
            out.append("\n\n" + _class(s, b, ""))
    for space in spaces:
        out.append(f"\n\nclass {space}:\n" + _doc(f"The {space} builds whose builder name is taken at the top of "
                                                   "this module by another accelerator's build.", "    "))
        for s, b in _own_builds():
            if names[(s.family, b.name)].partition(".")[0] == space:
                out.append("\n" + _class(s, b, "    "))
    out.append("\n\n#: (op family, build NAME) -> its class.\nBY_BUILD: dict[tuple[str, str], type] = {\n")
    out += [f'    ("{f}", "{n}"): {cls},\n' for (f, n), cls in names.items()]
    out.append("}\n")
    return "".join(out)


def render_aliases() -> str:
    """The text of DeepSpeed's alias module for the current alias table and specs.

    Raises:
        ValueError: two rows give one name to different builds (one module cannot hold both classes).
    """
    rows: dict[str, tuple[OpSpec, NativeBuild, list[str]]] = {}
    for name, family, build_name, accelerators in builder_names.ALIASES:
        s = op_spec(family)
        b = s.build(build_name)
        taken = rows.setdefault(name, (s, b, []))
        if taken[1] is not b:
            raise ValueError(f"alias {name!r} names builds {taken[1].name!r} and {b.name!r}")
        taken[2].extend(a for a in accelerators if a not in taken[2])
    out = [ALIASES_HEADER]
    out += [f"from {module} import {base}\n" for module, base in sorted({_base(b) for _, b, _ in rows.values()})]
    out.append("from anyaccel.spec import op_spec\n\n")
    out.append("__all__ = [\n" + "".join(f'    "{n}",\n' for n in sorted(rows)) + "]\n")
    for name, (s, b, accelerators) in rows.items():
        doc = (f"{name}: the {b.builder} build ({b.name}) under another builder name on {', '.join(accelerators)}. "
               f"{s.summary}.")
        out.append("\n\n" + _class(s, b, "", name, doc))
    return "".join(out)


def _write_or_check(path: Path, wanted: str, check: bool, source: str) -> int:
    """Write ``wanted`` to ``path`` when it differs, or with ``check`` compare; returns 1 for a difference found by
    ``check``, else 0."""
    text = path.read_text() if path.exists() else ""
    if wanted == text:
        return 0
    if not check:
        path.write_text(wanted)
        return 0
    diff = difflib.unified_diff(text.splitlines(), wanted.splitlines(), str(path), source, lineterm="", n=0)
    logger.error("%s disagrees with the %s (run scripts/gen_builders.py to rewrite it):\n%s",
                 path, source, "\n".join(list(diff)[:20]))
    return 1


def main(argv: list[str] | None = None) -> int:
    """Write or check the modules; returns the exit status (1: ``--check`` found a difference)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--aliases-out", type=Path, default=ALIASES_OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(message)s", level=logging.INFO)
    return max(_write_or_check(args.out, render(), args.check, "op specs"),
               _write_or_check(args.aliases_out, render_aliases(), args.check, "DeepSpeed alias table and op specs"))


if __name__ == "__main__":
    sys.exit(main())
