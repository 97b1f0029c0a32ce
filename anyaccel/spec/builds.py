"""Native builds: what one compiled library of an op family is made of, and the builder class it makes."""

from __future__ import annotations

from dataclasses import dataclass

#: Host-compiler flags for a CPU build's registration translation unit (the stable-ABI wrappers and the
#: per-call list validation; the SIMD loops are in the ``*_kernel.cpp`` unit, at ``-O3``). Parsing torch's
#: stable headers makes that unit the slowest of a build, and ``-O3`` adds about a third to its compile
#: time for no measured per-call difference.
REGISTRATION_CXX_ARGS: tuple[str, ...] = ("-O1",)


@dataclass(frozen=True)
class NativeBuild:
    """One compiled build of an op family: sources and flags for one backend, and the builder class it makes.

    Integrations may publish a build under more builder names on named accelerators (DeepSpeed's
    ``FusedAdamBuilder`` on the CPU is the CPU Adam build); those names are theirs, contributed through the
    ``anyaccel.builder_aliases`` entry-point group (`anyaccel.op_builder.core.aliases`), not the spec's.

    Attributes:
        builder: the name of the builder class made from the build, which ``create_op_builder`` takes
            (``"CPUAdamBuilder"``; the accelerator interface's names are DeepSpeed's).
        name: the build's ``NAME``: the cache directory, the namespace prefix and the AOT variable
            (``ANYACCEL_BUILD_<NAME>``).
        backend: ``"cpu"``, ``"cuda"``, ``"xpu"`` or ``"npu"``: which op-builder backend base compiles it.
        sources: source files relative to the package directory.
        functions: the spec functions the sources register (a subset of the spec's).
        accelerators: the accelerators whose ``create_op_builder(builder)`` returns this build; ``("*",)``
            for host ops, which serve every accelerator.
        isa_levels: for CPU builds, the SIMD levels the sources implement (best first).
        cxx_args: extra host-compiler flags.
        nvcc_args: extra device-compiler flags.
        source_cxx_args: ``(source, flags)`` pairs: host-compiler flags for one ``.cpp`` source only, after
            every other flag (so ``"-O1"`` overrides the backend's ``-O3``). For translation units whose code
            is registration and per-call validation (torch's stable-ABI headers make them the slowest to
            compile) rather than the vectorised kernels.
        module: for builds that compile nothing (NPU delegation), ``"module:load"`` returning the op module.
    """

    builder: str
    name: str
    backend: str
    sources: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    accelerators: tuple[str, ...] = ()
    isa_levels: tuple[str, ...] = ()
    cxx_args: tuple[str, ...] = ()
    nvcc_args: tuple[str, ...] = ()
    source_cxx_args: tuple[tuple[str, tuple[str, ...]], ...] = ()
    module: str | None = None

    @property
    def build_var(self) -> str:
        """The variable that selects this build for AOT builds (``ANYACCEL_BUILD_CPU_ADAM``)."""
        return f"ANYACCEL_BUILD_{self.name.upper()}"

    @property
    def builder_names(self) -> tuple[str, ...]:
        """The builder names the spec gives the build: `builder` alone. What the op-builder layer passes
        to module-function providers, which then add the aliases integrations contribute
        (`anyaccel.op_builder.core.module_functions.for_build`)."""
        return (self.builder,)

    def rows(self) -> tuple[tuple[str, str], ...]:
        """``(builder name, accelerator)`` for every registry row the spec gives the build (contributed aliases:
        [`anyaccel.op_builder.classes.spec_rows`][anyaccel.op_builder.classes.spec_rows])."""
        return tuple((self.builder, acc) for acc in self.accelerators)


#: The op-builder backends a [`NativeBuild`][anyaccel.spec.builds.NativeBuild] may name.
BACKENDS = frozenset({"cpu", "cuda", "xpu", "npu"})
