"""Native builds: what one compiled library of an op family is made of, and the builder names it answers to."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuilderAlias:
    """One more DeepSpeed builder name a build answers to, on some accelerators.

    A build is compiled once, under its own ``NAME``; an alias publishes the same build (same sources, same
    cache entry, same loaded library) under another builder class name where DeepSpeed asks for it by
    that name. Example: DeepSpeed's ``FusedAdam`` on the CPU asks for ``FusedAdamBuilder``, which anyaccel
    serves with its CPU Adam build (``BuilderAlias("FusedAdamBuilder", ("cpu",))`` on ``cpu_adam``).

    Attributes:
        builder: the builder class name (``"FusedAdamBuilder"``).
        accelerators: the accelerators (``_name``) on which ``create_op_builder(builder)`` returns the build;
            never ``"*"`` (an alias serves named accelerators only, so it cannot hide another build's row).
    """

    builder: str
    accelerators: tuple[str, ...]



#: Host-compiler flags for a CPU build's registration translation unit (the stable-ABI wrappers and the
#: per-call list validation; the SIMD loops are in the ``*_kernel.cpp`` unit, at ``-O3``). Parsing torch's
#: stable headers makes that unit the slowest of a build, and ``-O3`` adds about a third to its compile
#: time for no measured per-call difference.
REGISTRATION_CXX_ARGS: tuple[str, ...] = ("-O1",)


@dataclass(frozen=True)
class NativeBuild:
    """One compiled build of an op family: sources and flags for one backend, under a DeepSpeed builder name.

    Attributes:
        builder: the builder class name DeepSpeed callers pass to ``create_op_builder`` (``"CPUAdamBuilder"``).
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
        aliases: more builder names the build answers to on given accelerators (:class:`BuilderAlias`).
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
    aliases: tuple[BuilderAlias, ...] = ()

    @property
    def build_var(self) -> str:
        """The variable that selects this build for AOT builds (``ANYACCEL_BUILD_CPU_ADAM``)."""
        return f"ANYACCEL_BUILD_{self.name.upper()}"

    @property
    def builder_names(self) -> tuple[str, ...]:
        """Every builder class name the build answers to: :attr:`builder`, then its aliases'."""
        return (self.builder, *(a.builder for a in self.aliases if a.builder != self.builder))

    def rows(self) -> tuple[tuple[str, str], ...]:
        """``(builder name, accelerator)`` for every registry row the build fills (aliases included)."""
        return (tuple((self.builder, acc) for acc in self.accelerators)
                + tuple((a.builder, acc) for a in self.aliases for acc in a.accelerators))


#: The op-builder backends a :class:`NativeBuild` may name.
BACKENDS = frozenset({"cpu", "cuda", "xpu", "npu"})
