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
    names = builder_names(family, build.name)
    if builder is not None and builder not in names:
        raise SpecError(f"op {family!r}: build {build_name!r} answers to {list(names)}, not {builder!r}")
    return _make_class(family, build_name, None if builder == build.builder else builder)


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
    """
    build = op_spec(family).build(build_name)
    return tuple(dict.fromkeys((build.builder, *aliases.names_of(family, build.name))))


def spec_builds() -> list[tuple[OpSpec, NativeBuild]]:
    """Every (spec, build) pair, in spec then build order (``anyaccel build`` and the report walk these)."""
    return [(s, b) for s in all_op_specs() for b in s.builds]


def spec_rows() -> dict[str, dict[str, tuple[OpSpec, NativeBuild]]]:
    """Builder name -> accelerator -> (spec, build), from every build's rows, then the contributed aliases'.

    Raises:
        SpecError: two specs claim the same (builder name, accelerator) row.

    An alias whose row a build already fills is logged and ignored: the spec's build keeps the row.
    """
    rows: dict[str, dict[str, tuple[OpSpec, NativeBuild]]] = {}
    for s, b in spec_builds():
        for builder, acc in b.rows():
            taken = rows.setdefault(builder, {}).get(acc)
            if taken is not None and taken[0].family != s.family:
                raise SpecError(f"builder {builder!r} on {acc!r} is claimed by op families {taken[0].family!r} "
                                f"and {s.family!r}")
            rows[builder][acc] = (s, b)
    for alias in aliases.contributed():
        s = op_spec(alias.family)
        b = s.build(alias.build)
        for acc in alias.accelerators:
            taken = rows.setdefault(alias.name, {}).get(acc)
            if taken is not None and taken[1] is not b:
                _log_alias_clash(alias, acc, taken[1])
                continue
            rows[alias.name][acc] = (s, b)
    return rows


@functools.cache
def _log_alias_clash(alias: aliases.BuilderAlias, accelerator: str, build: NativeBuild) -> None:
    """Warn once that ``alias`` names a row ``build`` already fills."""
    aliases.logger.warning("builder alias %s of build %s on %r ignored: build %s already fills that row",
                           alias.name, alias.build, accelerator, build.name)


def spec_builder_class(name: str) -> type | None:
    """The spec-made class answering builder name ``name`` (or a build's ``NAME``) on some accelerator: the
    host row first, then CUDA's, then the others by name; None when no build answers to ``name``. For facts
    every row shares (``from anyaccel.op_builder import CPUAdamBuilder``, AOT selection)."""
    rows = spec_rows()
    by_name = {b.name: b.builder for _, b in spec_builds()}
    row = rows.get(by_name.get(name, name), {})
    for acc in sorted(row, key=lambda a: (a != ANY_ACCELERATOR, a != "cuda", a)):
        s, b = row[acc]
        return builder_class(s.family, b.name, by_name.get(name, name))
    return None
