"""``OpSpec``: an op family described once (functions, dtypes, native builds, implementations)."""

from __future__ import annotations

from dataclasses import dataclass, field

from anyaccel.spec.builds import BACKENDS, NativeBuild
from anyaccel.spec.errors import SpecError
from anyaccel.spec.implementations import Implementation
from anyaccel.spec.intervals import Interval
from anyaccel.spec.schema import SCALAR_TYPES, DtypeCombo, Function


@dataclass(frozen=True)
class OpSpec:
    """An op family, described once.

    Attributes:
        family: the family's name (``"adam"``); the loader's op name and ``ANYACCEL_IMPL_<FAMILY>``.
        summary: one line for the report and docs.
        functions: every function any build or implementation offers.
        dtypes: the dtype combinations the kernels accept (empty for ops without tensor-list dtypes).
        builds: the native builds.
        implementations: the implementations the loader chooses among, per device type.
        benchmarks: benchmark scripts (``benchmarks/<file>``) that measure the family.
        source: the module that defined the spec (set by [`all_op_specs`][anyaccel.spec.all_op_specs]).
    """

    family: str
    summary: str
    functions: tuple[Function, ...]
    dtypes: tuple[DtypeCombo, ...] = ()
    builds: tuple[NativeBuild, ...] = ()
    implementations: tuple[Implementation, ...] = ()
    benchmarks: tuple[str, ...] = ()
    source: str = field(default="", compare=False)

    def function(self, name: str) -> Function:
        """The function called ``name``.

        Raises:
            SpecError: no such function (the message lists the spec's functions).
        """
        for fn in self.functions:
            if fn.name == name:
                return fn
        raise SpecError(f"op {self.family!r} has no function {name!r}; it has {[f.name for f in self.functions]}")

    def build(self, name: str) -> NativeBuild:
        """The native build whose ``name`` (``NAME``) or ``builder`` is ``name``.

        Raises:
            SpecError: no such build.
        """
        for b in self.builds:
            if name in (b.name, b.builder):
                return b
        raise SpecError(f"op {self.family!r} has no build {name!r}; it has {[b.name for b in self.builds]}")

    def functions_of(self, build: NativeBuild) -> tuple[Function, ...]:
        """The functions ``build`` registers, in spec order."""
        return tuple(fn for fn in self.functions if fn.name in build.functions)

    def accepted_dtypes_text(self) -> str:
        """The accepted combinations in words, for error messages (``"(float32, float32, float32, none), ..."``)."""
        return ", ".join("(" + ", ".join(c.as_tuple()) + ")" for c in self.dtypes)

    def validate(self) -> None:
        """Check the spec's internal consistency.

        Raises:
            SpecError: a schema does not parse (or, for a function a native build registers, has no C++
                mapping), a build names an unknown function or backend or gives per-source flags for a file
                that is not one of its ``.cpp`` sources, an implementation names an unknown build, or names
                are not unique.
        """
        names = [f.name for f in self.functions]
        if len(set(names)) != len(names):
            raise SpecError(f"op {self.family!r}: function names repeat: {names}")
        native = {name for b in self.builds if not b.module for name in b.functions}
        for fn in self.functions:
            _ = fn.arguments, fn.return_types  # parse them (SpecError when malformed)
            if fn.name in native:
                fn.cxx_signature()
            arg_types = {a.name: a.type for a in fn.arguments}
            for arg, interval in fn.ranges:
                if arg_types.get(arg) not in ("int", "float"):
                    raise SpecError(f"op {self.family!r}: function {fn.name!r} ranges {arg!r}, which is not an int "
                                    "or float argument")
                try:
                    Interval.parse(interval)
                except ValueError as exc:
                    raise SpecError(f"op {self.family!r}: function {fn.name!r} range of {arg!r}: {exc}") from None
        for c in self.dtypes:
            bad = [d for d in c.as_tuple() if d not in SCALAR_TYPES]
            if bad:
                raise SpecError(f"op {self.family!r}: dtype {bad[0]!r} is not one of {sorted(SCALAR_TYPES)}")
        for b in self.builds:
            if b.backend not in BACKENDS:
                raise SpecError(f"op {self.family!r}: build {b.name!r} has backend {b.backend!r}; accepted: "
                                f"{sorted(BACKENDS)}")
            unknown = [f for f in b.functions if f not in names]
            if unknown:
                raise SpecError(f"op {self.family!r}: build {b.name!r} registers unknown functions {unknown}")
            if not b.name.isidentifier():
                raise SpecError(f"op {self.family!r}: build name {b.name!r} must be an identifier")
            stray = [src for src, _ in b.source_cxx_args if src not in b.sources or not src.endswith(".cpp")]
            if stray:
                raise SpecError(f"op {self.family!r}: build {b.name!r} gives source_cxx_args for {stray}, which are "
                                f"not among its .cpp sources {list(b.sources)}")
        rows = [row for b in self.builds for row in b.rows()]
        repeated = sorted({row for row in rows if rows.count(row) > 1})
        if repeated:
            raise SpecError(f"op {self.family!r}: (builder, accelerator) rows {repeated} are served by more than "
                            "one build; give each row to exactly one build")
        builds = {b.name for b in self.builds}
        impl_names = [i.name for i in self.implementations]
        if len(set(impl_names)) != len(impl_names):
            raise SpecError(f"op {self.family!r}: implementation names repeat: {impl_names}")
        for impl in self.implementations:
            if (impl.build is None) == (impl.module is None):
                raise SpecError(f"op {self.family!r}: implementation {impl.name!r} needs exactly one of build= "
                                "and module=")
            if impl.build is not None and impl.build not in builds:
                raise SpecError(f"op {self.family!r}: implementation {impl.name!r} names unknown build {impl.build!r}")

