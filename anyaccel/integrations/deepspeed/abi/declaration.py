"""How the DeepSpeed integration declares DeepSpeed's module ABI over one op family."""

from __future__ import annotations

from dataclasses import dataclass

from anyaccel.spec import OpSpec, SpecError


@dataclass(frozen=True)
class DeepSpeedABI:
    """DeepSpeed's module ABI over an op family: the functions DeepSpeed's Python callers call on the module
    their builder's ``load()`` returns (``create_adam``, ``adam_update``, ``multi_tensor_adam``...).

    The functions are Python adapters over the family's torch ops (anyaccel's own functions stay on the
    module). Which of them a loaded module offers follows from the builder names its build answers to
    (the build's ``builder`` and the aliases of `anyaccel.integrations.deepspeed.builder_names`): the CPU
    Adam build offers ``CPUAdamBuilder``'s functions and, as ``FusedAdamBuilder`` on the CPU, ``multi_tensor_adam``.

    Attributes:
        family: the op family whose builds' modules offer the functions (``"adam"``).
        adapter: ``"module:factory"``; the factory is called once per loaded module with that module and
            the tuple of function names it offers, and returns the object whose attributes those functions
            are ([`anyaccel.op_builder.core.module.OpModule`][anyaccel.op_builder.core.module.OpModule] forwards names
            it lacks to it).
        builders: ``(DeepSpeed builder name, function names)`` pairs: what DeepSpeed's callers use on a
            module loaded through that builder name (sources: DeepSpeed's ``ops/<family>/*.py``).
        platform_functions: ``(function name, sys.platform prefix)`` pairs for functions offered only on
            some platforms (DeepSpeed defines ZenFlow's cross-process control on Linux only).
    """

    family: str
    adapter: str
    builders: tuple[tuple[str, tuple[str, ...]], ...]
    platform_functions: tuple[tuple[str, str], ...] = ()

    def functions_for(self, builder_names: tuple[str, ...] | list[str], platform: str | None = None
                      ) -> tuple[str, ...]:
        """The ABI functions a module serving ``builder_names`` offers on ``platform`` (default: this one).

        Returns:
            The names, in `builders` order, without repeats.
        """
        import sys

        here = sys.platform if platform is None else platform
        only = dict(self.platform_functions)
        out: list[str] = []
        for builder, names in self.builders:
            if builder in builder_names:
                out.extend(n for n in names if n not in out and here.startswith(only.get(n, "")))
        return tuple(out)

    def validate(self, spec: OpSpec) -> None:
        """Check the declaration against the family's spec.

        Raises:
            SpecError: it names builders no build of ``spec`` answers to, or functions with the names of spec
                functions (torch ops), which would hide them on the loaded module.
        """
        from anyaccel.op_builder.core.aliases import names_of

        served = {name for b in spec.builds for name in (b.builder, *names_of(spec.family, b.name))}
        unknown = [name for name, _ in self.builders if name not in served]
        if unknown:
            raise SpecError(f"op {spec.family!r}: deepspeed ABI names builders {unknown} that no build answers to; "
                            f"builds answer to {sorted(served)}")
        names = {f.name for f in spec.functions}
        clash = [fn for _, fns in self.builders for fn in fns if fn in names]
        if clash:
            raise SpecError(f"op {spec.family!r}: deepspeed ABI functions {clash} have the names of spec functions "
                            "(torch ops), which would hide them on the loaded module; rename the spec function")
