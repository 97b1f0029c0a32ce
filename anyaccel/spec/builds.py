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



@dataclass(frozen=True)
class DeepSpeedABI:
    """DeepSpeed's module ABI over an op family: the functions DeepSpeed's Python callers call on the module
    their builder's ``load()`` returns (``create_adam``, ``adam_update``, ``multi_tensor_adam``...).

    The functions are Python adapters over the family's torch ops (anyaccel's own functions stay on the
    module). Which of them a loaded module offers follows from the builder names its build answers to
    (the build's ``builder`` and its :class:`BuilderAlias` names): the CPU Adam build offers
    ``CPUAdamBuilder``'s functions and, as ``FusedAdamBuilder`` on the CPU, ``multi_tensor_adam``.

    Attributes:
        adapter: ``"module:factory"``; the factory is called once per loaded module with that module and
            the tuple of function names it offers, and returns the object whose attributes those functions
            are (:class:`anyaccel.op_builder.core.module.OpModule` forwards names it lacks to it).
        builders: ``(DeepSpeed builder name, function names)`` pairs: what DeepSpeed's callers use on a
            module loaded through that builder name (sources: DeepSpeed's ``ops/<family>/*.py``).
        platform_functions: ``(function name, sys.platform prefix)`` pairs for functions offered only on
            some platforms (DeepSpeed defines ZenFlow's cross-process control on Linux only).
    """

    adapter: str
    builders: tuple[tuple[str, tuple[str, ...]], ...]
    platform_functions: tuple[tuple[str, str], ...] = ()

    def functions_for(self, builder_names: tuple[str, ...] | list[str], platform: str | None = None
                      ) -> tuple[str, ...]:
        """The ABI functions a module serving ``builder_names`` offers on ``platform`` (default: this one).

        Returns:
            The names, in :attr:`builders` order, without repeats.
        """
        import sys

        here = sys.platform if platform is None else platform
        only = dict(self.platform_functions)
        out: list[str] = []
        for builder, names in self.builders:
            if builder in builder_names:
                out.extend(n for n in names if n not in out and here.startswith(only.get(n, "")))
        return tuple(out)


#: Host-compiler flags for a CPU build's registration translation unit (the stable-ABI wrappers and the
#: per-call list validation; the SIMD loops are in the ``*_kernel.cpp`` unit, at ``-O3``). Parsing torch's
#: stable headers makes that unit the slowest of a build, and ``-O3`` adds about 1 s to it on the 2-core
#: development machine (3.9 s against 3.0 s for ``cpu_adam.cpp``) for no measured per-call difference.
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
