"""Which builder class serves an op on an accelerator, derived from the op specs (docs/architecture.md
"Accelerator → op builder").

Nothing here is a hand-edited table: every :class:`~anyaccel.spec.NativeBuild` of every op spec
(:func:`anyaccel.spec.all_op_specs`) becomes a builder class, made on first use by :func:`builder_class`
from its backend's base (:data:`BACKEND_BASES`) and published under the build's DeepSpeed builder name
(``"CPUAdamBuilder"``) for the accelerators it declares (``"*"``: every accelerator, for host ops), and
under each of its :class:`~anyaccel.spec.BuilderAlias` names for the accelerators the alias names (the
CPU Adam build is also ``FusedAdamBuilder`` on ``cpu``: one build, one cache entry, another class name). The
build's ``NAME`` (``"cpu_adam"``) is accepted as an alias. :func:`register_builder` adds rows for builders
written by hand (plug-ins, tests).

Importing this module is cheap: specs are read and classes made when first asked for.
"""

from __future__ import annotations

import functools
import threading

from anyaccel.op_builder.core.errors import UnknownOpError
from anyaccel.spec import NativeBuild, OpSpec, all_op_specs, resolve

ANY_ACCELERATOR = "*"

#: op-builder backend -> the base class of its builders. Backend differences as data.
BACKEND_BASES: dict[str, str] = {
    "cpu": "anyaccel.op_builder.backends.cpu:TorchCPUOpBuilder",
    "cuda": "anyaccel.op_builder.backends.cuda:CUDAOpBuilder",
    "xpu": "anyaccel.op_builder.backends.sycl:SYCLOpBuilder",
    "npu": "anyaccel.op_builder.backends.npu:NPUOpBuilder",
}
#: Base of builds that compile nothing and load a Python module (``NativeBuild.module``).
DELEGATING_BASE = "anyaccel.op_builder.backends.npu:NPUDelegatingBuilder"

_EXTRA: dict[str, dict[str, str | type]] = {}
_EXTRA_ALIASES: dict[str, str] = {}
_LOCK = threading.Lock()


def builder_class(family: str, build_name: str, builder: str | None = None) -> type:
    """The builder class of build ``build_name`` (its ``NAME``) of op family ``family``, made once.

    Args:
        family: the op family.
        build_name: the build's ``NAME``.
        builder: one of the build's alias names (``"FusedAdamBuilder"`` for ``cpu_adam``): the class is then
            a subclass of the build's class named after the alias (same ``NAME``, ``BUILD``, key and cache
            entry). None or the build's own builder name: the build's class.

    Returns:
        A subclass of the build's backend base with ``NAME``, ``BUILD_VAR``, ``SPEC`` and ``BUILD`` set,
        named after the DeepSpeed builder (``CPUAdamBuilder``).

    Raises:
        SpecError: no such family or build, or ``builder`` is not a name the build answers to.
    """
    from anyaccel.spec import SpecError, op_spec

    s = op_spec(family)
    build = next((b for b in s.builds if b.name == build_name), None)
    if build is None:
        s.build(build_name)  # raises SpecError naming the builds
        raise AssertionError("unreachable")
    if builder is not None and builder not in build.builder_names:
        raise SpecError(f"op {family!r}: build {build_name!r} answers to {list(build.builder_names)}, not "
                        f"{builder!r}")
    return _make_class(family, build_name, None if builder == build.builder else builder)


@functools.cache
def _make_class(family: str, build_name: str, alias: str | None) -> type:
    """The class of :func:`builder_class`, made once per (family, build, alias)."""
    from anyaccel.spec import op_spec

    s = op_spec(family)
    build = s.build(build_name)
    if alias is not None:
        primary = _make_class(family, build_name, None)
        return type(alias, (primary,), {
            "__module__": "anyaccel.op_builder",
            "__doc__": f"{alias}: the {build.builder} build ({build.name}) under the name DeepSpeed asks for "
                       f"on {', '.join(a for al in build.aliases if al.builder == alias for a in al.accelerators)}. "
                       f"{s.summary}.",
        })
    base = resolve(DELEGATING_BASE if build.module else BACKEND_BASES[build.backend])
    return type(build.builder, (base,), {
        "NAME": build.name,
        "BUILD_VAR": build.build_var,
        "SPEC": s,
        "BUILD": build,
        "__module__": "anyaccel.op_builder",
        "__doc__": f"{build.builder} ({build.backend}): builds {', '.join(build.functions)} of the "
                   f"{s.family!r} op spec ({s.source}). {s.summary}.",
    })


def _spec_rows() -> dict[str, dict[str, tuple[OpSpec, NativeBuild]]]:
    """Builder name -> accelerator -> (spec, build), from every build's rows (aliases included).

    Raises:
        SpecError: two specs claim the same (builder name, accelerator) row.
    """
    from anyaccel.spec import SpecError

    rows: dict[str, dict[str, tuple[OpSpec, NativeBuild]]] = {}
    for s in all_op_specs():
        for b in s.builds:
            for builder, acc in b.rows():
                taken = rows.setdefault(builder, {}).get(acc)
                if taken is not None and taken[0].family != s.family:
                    raise SpecError(f"builder {builder!r} on {acc!r} is claimed by op families {taken[0].family!r} "
                                    f"and {s.family!r}")
                rows[builder][acc] = (s, b)
    return rows


def _aliases() -> dict[str, str]:
    out = {b.name: b.builder for s in all_op_specs() for b in s.builds}
    out.update(_EXTRA_ALIASES)
    return out


def register_builder(name: str, accelerator_name: str, cls: str | type, override: bool = False) -> None:
    """Add a hand-written builder for ``name`` on ``accelerator_name`` (``"*"`` for every accelerator).

    Args:
        name: a builder name (``"FusedAdamBuilder"``, ``"MyOpBuilder"``: the row, so a plug-in's row for its
            accelerator leaves other accelerators' rows of that name alone; the class's own name becomes an
            alias when free) or the op's ``NAME`` (``"my_op"``: an alias of the class's row).
        accelerator_name: an accelerator's ``_name`` ("cpu", "cuda", ...) or ``"*"``.
        cls: the builder class, or ``"module:Class"`` to import it lazily.
        override: replace an existing row (a spec-derived one included) instead of raising.

    Raises:
        ValueError: the row exists and ``override`` is False.
    """
    class_name = cls.rpartition(":")[2] if isinstance(cls, str) else cls.__name__
    # A builder name ("FusedAdamBuilder": DeepSpeed's, or a plug-in's own) is the row itself, so a plug-in row
    # for its accelerator leaves the other accelerators' rows of that name alone; an op NAME ("my_op") is an
    # alias of the class's row.
    row = name if name.endswith("Builder") else class_name
    with _LOCK:
        exists = accelerator_name in _EXTRA.get(row, {}) or accelerator_name in _spec_rows().get(row, {})
        if exists and not override:
            raise ValueError(f"op {name!r} already has a builder for {accelerator_name!r}; pass override=True to "
                             "replace it")
        alias = class_name if row == name else name
        if alias != row and alias not in _spec_rows() and alias not in _EXTRA:
            _EXTRA_ALIASES[alias] = row
        _EXTRA.setdefault(row, {})[accelerator_name] = cls


def all_builder_names() -> list[str]:
    """Every builder class name any accelerator knows, sorted (aliases not repeated)."""
    return sorted(set(_spec_rows()) | set(_EXTRA))


def _target(row_key: str, accelerator_name: str) -> str | type | None:
    extra = _EXTRA.get(row_key, {})
    if accelerator_name in extra:
        return extra[accelerator_name]
    spec_row = _spec_rows().get(row_key, {})
    hit = spec_row.get(accelerator_name)
    if hit is not None:
        return builder_class(hit[0].family, hit[1].name, row_key)
    if ANY_ACCELERATOR in extra:
        return extra[ANY_ACCELERATOR]
    hit = spec_row.get(ANY_ACCELERATOR)
    return builder_class(hit[0].family, hit[1].name, row_key) if hit is not None else None


def get_builder_class(name: str, accelerator_name: str) -> type | None:
    """The builder class of ``name`` (``"CPUAdamBuilder"`` or ``"cpu_adam"``) for ``accelerator_name``.

    Returns:
        The class (a subclass of :class:`~anyaccel.op_builder.core.builder.OpBuilder`); None when the op
        exists but not for this accelerator (DeepSpeed's contract).

    Raises:
        UnknownOpError: no accelerator knows ``name`` (neither a builder class name nor an op name); the
            message lists every known name.
    """
    row_key = _aliases().get(name, name)
    if row_key not in _spec_rows() and row_key not in _EXTRA:
        raise UnknownOpError(f"unknown op builder {name!r}; known builders: {', '.join(all_builder_names())} "
                             f"(or their op names: {', '.join(sorted(_aliases()))})")
    target = _target(row_key, accelerator_name)
    if isinstance(target, str):
        target = resolve(target)
    return target


def any_builder_class(name: str) -> type | None:
    """A class serving ``name`` on some accelerator (the host row first, then CUDA's), for facts every row
    shares (AOT selection reads ``BUILD_VAR`` through this).

    Returns:
        The class, or None when ``name`` has no row at all.
    """
    row_key = _aliases().get(name, name)
    accelerators = set(_spec_rows().get(row_key, {})) | set(_EXTRA.get(row_key, {}))
    for acc in sorted(accelerators, key=lambda a: (a != ANY_ACCELERATOR, a != "cuda", a)):
        return get_builder_class(name, acc)
    return None


def spec_builds() -> list[tuple[OpSpec, NativeBuild]]:
    """Every (spec, build) pair, in spec then build order (``anyaccel build`` and the report walk these)."""
    return [(s, b) for s in all_op_specs() for b in s.builds]
