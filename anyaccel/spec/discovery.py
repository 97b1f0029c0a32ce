"""Finding the op specs: ``<package>/<family>/spec.py`` modules of the built-in op packages, then the
``anyaccel.ops`` entry points of plug-in packages."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import importlib.util
import logging
import pkgutil
from pathlib import Path

from anyaccel.spec.errors import SpecError
from anyaccel.spec.family import OpSpec

logger = logging.getLogger(__name__)

#: Entry-point group through which other packages contribute op specs (``name = "module:SPEC"``).
ENTRY_POINT_GROUP = "anyaccel.ops"

#: The packages whose ``<family>/spec.py`` modules are the built-in op specs. Named, not imported: finding
#: them reads the package's directory (``importlib.util.find_spec``), so this leaf package imports no op code.
BUILTIN_SPEC_PACKAGES: tuple[str, ...] = ("anyaccel.ops",)


@functools.lru_cache(maxsize=1)
def all_op_specs() -> tuple[OpSpec, ...]:
    """Every op spec: the ``<family>/spec.py`` modules of `BUILTIN_SPEC_PACKAGES`, then the
    ``anyaccel.ops`` entry points.

    Each spec is validated once. A plug-in spec that fails to import or validate is logged and skipped; a
    built-in one raises.

    Returns:
        The specs, sorted by family.

    Raises:
        SpecError: a built-in spec is malformed, or two specs share a family name.

    Side effects: imports the spec modules (cheap: no torch, no builders) on the first call; cached.
    """
    found: dict[str, OpSpec] = {}

    def add(spec: OpSpec, origin: str) -> None:
        spec.validate()
        if spec.family in found:
            raise SpecError(f"op family {spec.family!r} is defined twice ({found[spec.family].source} and {origin})")
        found[spec.family] = _with_source(spec, origin)

    for package in BUILTIN_SPEC_PACKAGES:
        found_pkg = importlib.util.find_spec(package)
        paths = list(found_pkg.submodule_search_locations or []) if found_pkg is not None else []
        for module_name in _spec_modules(paths, package):
            add(importlib.import_module(module_name).SPEC, module_name)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            add(ep.load(), ep.value)
        except (ImportError, AttributeError, SpecError) as exc:
            logger.warning("op spec entry point %s (%s) skipped: %s", ep.name, ep.value, exc)
    return tuple(found[k] for k in sorted(found))


def _spec_modules(paths: list[str], prefix: str, depth: int = 3) -> list[str]:
    """``<prefix>.<pkg>.spec`` for each package with a ``spec.py``; packages without one (groups such as
    ``nn/families``) are searched in turn, ``depth`` levels deep at most."""
    found = []
    for info in sorted(pkgutil.iter_modules(paths), key=lambda i: i.name):
        if not info.ispkg:
            continue
        dirs = [Path(p) / info.name for p in paths]
        if any((d / "spec.py").is_file() for d in dirs):
            found.append(f"{prefix}.{info.name}.spec")
        elif depth > 1:
            found += _spec_modules([str(d) for d in dirs if d.is_dir()], f"{prefix}.{info.name}", depth - 1)
    return found


def op_spec(family: str) -> OpSpec:
    """The spec of ``family``.

    Raises:
        SpecError: no such family (the message lists the known ones).
    """
    for s in all_op_specs():
        if s.family == family:
            return s
    raise SpecError(f"unknown op family {family!r}; known: {[s.family for s in all_op_specs()]}")


def _with_source(spec: OpSpec, origin: str) -> OpSpec:
    return dataclasses.replace(spec, source=origin)
