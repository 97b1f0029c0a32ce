"""Builder classes made from the op specs' native builds (docs/architecture.md "Accelerator -> op builder").

Every [`NativeBuild`][anyaccel.spec.NativeBuild] of every op spec
([`anyaccel.spec.all_op_specs`][anyaccel.spec.all_op_specs]) becomes a
builder class, made on first use by [`builder_class`][anyaccel.op_builder.classes.builder_class] from its backend's base
([`BACKEND_BASES`][anyaccel.op_builder.classes.BACKEND_BASES]) and
named after the build's builder name (``"CPUAdamBuilder"``); a name an integration contributes for the build
(`BuilderAlias`: DeepSpeed's ``FusedAdamBuilder`` on the CPU) gets a
subclass under that name (same ``NAME``, cache entry and loaded library). Which class answers a builder name
on an accelerator, overrides included, is the op registry's business ([`anyaccel.ops.registry`][anyaccel.ops.registry]);
this
module knows the specs and the contributed aliases only.

Importing this module is cheap: specs are read and classes made when first asked for.
"""

from __future__ import annotations

import functools

from anyaccel.op_builder.core import aliases
from anyaccel.spec import NativeBuild, OpSpec, SpecError, all_op_specs, op_spec, resolve

#: The accelerator name of rows that serve every accelerator (host ops).
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


def builder_class(family: str, build_name: str, builder: str | None = None) -> type:
    """The builder class of build ``build_name`` (its ``NAME``) of op family ``family``, made once.

    Args:
        family: the op family.
        build_name: the build's ``NAME``.
        builder: one of the build's contributed alias names (``"FusedAdamBuilder"`` for ``cpu_adam``): the class is then
            a subclass of the build's class named after the alias (same ``NAME``, ``BUILD``, key and cache
            entry). None or the build's own builder name: the build's class.

    Returns:
        A subclass of the build's backend base with ``NAME``, ``BUILD_VAR``, ``SPEC`` and ``BUILD`` set,
        named after the build's builder name (``CPUAdamBuilder``).

    Raises:
        SpecError: no such family or build, or ``builder`` is not a name the build answers to.
    """
    s = op_spec(family)
    build = next((b for b in s.builds if b.name == build_name), None)
    if build is None:
        s.build(build_name)  # raises SpecError naming the builds
        raise AssertionError("unreachable")
    if builder is None or builder == build.builder:
        return _make_class(family, build_name, None)
    names = builder_names(family, build.name)
    if builder not in names:
        raise SpecError(f"op {family!r}: build {build_name!r} answers to {list(names)}, not {builder!r}")
    return _make_class(family, build_name, builder)


@functools.cache
def _make_class(family: str, build_name: str, alias: str | None) -> type:
    """The class of [`builder_class`][anyaccel.op_builder.classes.builder_class], made once per (family, build,
    alias)."""
    s = op_spec(family)
    build = s.build(build_name)
    if alias is not None:
        primary = _make_class(family, build_name, None)
        return type(alias, (primary,), {
            "__module__": "anyaccel.op_builder",
            "__doc__": f"{alias}: the {build.builder} build ({build.name}) under another builder name on "
                       f"{', '.join(a for al in aliases.contributed() if al.name == alias for a in al.accelerators)}. "
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


def builder_names(family: str, build_name: str) -> tuple[str, ...]:
    """Every builder name build ``build_name`` (its ``NAME``) of ``family`` answers to: its own, then the
    aliases integrations contribute (`anyaccel.op_builder.core.aliases.names_of`).

    Raises:
        SpecError: no such family or build.

    Side effects: reads the contributed aliases (imports their providers once).
    """
    build = op_spec(family).build(build_name)
    return tuple(dict.fromkeys((build.builder, *aliases.names_of(family, build.name))))


def spec_builds() -> list[tuple[OpSpec, NativeBuild]]:
    """Every (spec, build) pair, in spec then build order (``anyaccel build`` and the report walk these)."""
    return [(s, b) for s in all_op_specs() for b in s.builds]


def native_rows() -> dict[str, dict[str, tuple[OpSpec, NativeBuild]]]:
    """Builder name -> accelerator -> (spec, build), from the op specs' builds alone (no integration asked).

    The native lookup: ``create_op_builder`` answers from these rows, and reads the contributed aliases
    (`alias_rows`) only for a (name, accelerator) no native row answers.

    Raises:
        SpecError: two specs claim the same (builder name, accelerator) row.
    """
    rows: dict[str, dict[str, tuple[OpSpec, NativeBuild]]] = {}
    for s, b in spec_builds():
        for builder, acc in b.rows():
            taken = rows.setdefault(builder, {}).get(acc)
            if taken is not None and taken[0].family != s.family:
                raise SpecError(f"builder {builder!r} on {acc!r} is claimed by op families {taken[0].family!r} "
                                f"and {s.family!r}")
            rows[builder][acc] = (s, b)
    return rows


def alias_rows() -> dict[str, dict[str, tuple[OpSpec, NativeBuild]]]:
    """Builder name -> accelerator -> (spec, build) for the aliases integrations contribute
    (`anyaccel.op_builder.core.aliases`), less the rows a native build already fills.

    An alias whose (name, accelerator) a native row answers, its own accelerator or ``"*"``, is logged once and
    ignored: the spec's build keeps the row.

    Side effects: reads the ``anyaccel.builder_aliases`` entry points and imports their providers (once).
    """
    native = native_rows()
    rows: dict[str, dict[str, tuple[OpSpec, NativeBuild]]] = {}
    for alias in aliases.contributed():
        s = op_spec(alias.family)
        b = s.build(alias.build)
        for acc in alias.accelerators:
            own = native.get(alias.name, {})
            taken = own.get(acc) or own.get(ANY_ACCELERATOR) or rows.get(alias.name, {}).get(acc)
            if taken is not None and taken[1] is not b:
                _log_alias_clash(alias, acc, taken[1])
                continue
            rows.setdefault(alias.name, {})[acc] = (s, b)
    return rows


def spec_rows() -> dict[str, dict[str, tuple[OpSpec, NativeBuild]]]:
    """`native_rows` completed by `alias_rows` (every name any accelerator answers to: listings, the report).

    Raises:
        SpecError: two specs claim the same (builder name, accelerator) row.

    Side effects: reads the contributed aliases (see `alias_rows`).
    """
    rows = native_rows()
    for name, per_acc in alias_rows().items():
        for acc, hit in per_acc.items():
            rows.setdefault(name, {}).setdefault(acc, hit)
    return rows


@functools.cache
def _log_alias_clash(alias: aliases.BuilderAlias, accelerator: str, build: NativeBuild) -> None:
    """Warn once that ``alias`` names a row ``build`` already fills."""
    aliases.logger.warning("builder alias %s of build %s on %r ignored: build %s already fills that row",
                           alias.name, alias.build, accelerator, build.name)


def spec_builder_class(name: str) -> type | None:
    """The spec-made class answering builder name ``name`` (or a build's ``NAME``) on some accelerator: the
    host row first, then CUDA's, then the others by name; None when no build answers to ``name``. For facts
    every row shares (``from anyaccel.op_builder import CPUAdamBuilder``, AOT selection).

    The native rows are read first; the contributed aliases (`alias_rows`) only for a name no build has.
    """
    by_name = {b.name: b.builder for _, b in spec_builds()}
    key = by_name.get(name, name)
    row = native_rows().get(key) or alias_rows().get(key, {})
    for acc in sorted(row, key=lambda a: (a != ANY_ACCELERATOR, a != "cuda", a)):
        s, b = row[acc]
        return builder_class(s.family, b.name, key)
    return None
