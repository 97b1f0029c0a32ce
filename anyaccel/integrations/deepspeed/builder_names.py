"""DeepSpeed's builder names that anyaccel serves with a build of another name: the table, and its provider.

DeepSpeed asks for some ops under a builder name whose build on that accelerator is, in anyaccel, a build
published under another name: DeepSpeed's ``FusedAdam``, ``FusedLion`` and ``FusedLamb`` on CPU tensors call
``create_op_builder("FusedAdamBuilder")`` (and so on), which anyaccel serves with its CPU SIMD builds. Those
names are DeepSpeed's vocabulary, so they are this table's, not the op specs': `builder_aliases` is
anyaccel's ``anyaccel.builder_aliases`` entry point, through which the op registry learns them without
importing this package (`anyaccel.op_builder.core.aliases`). Every row stays in DeepSpeed's op table too
([`anyaccel.integrations.deepspeed.op_table`][anyaccel.integrations.deepspeed.op_table] completes it from the registry).

Each row's class is checked in, generated from this table by ``scripts/gen_builders.py`` into
`anyaccel.integrations.deepspeed.alias_builders` (``class FusedAdamBuilder(TorchCPUOpBuilder):``); each alias
names its class there (by string: the op registry imports it only when the name is asked for).
"""

from __future__ import annotations

from anyaccel.op_builder.core.aliases import BuilderAlias

__all__ = ["ALIASES", "CLASSES_MODULE", "builder_aliases"]

#: The generated module holding one class per `ALIASES` row, named after the row's builder name.
CLASSES_MODULE = "anyaccel.integrations.deepspeed.alias_builders"

#: ``(DeepSpeed builder name, op family, build NAME, accelerators)``: the build DeepSpeed gets for that name
#: on those accelerators (DeepSpeed 0.19.8's ``FusedAdam``/``FusedLion``/``FusedLamb`` ask for their fused
#: builder whatever the device; on the CPU the CPU builds compute the same step).
ALIASES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("FusedAdamBuilder", "adam", "cpu_adam", ("cpu",)),
    ("FusedLionBuilder", "lion", "cpu_lion", ("cpu",)),
    ("FusedLambBuilder", "lamb", "cpu_lamb", ("cpu",)),
)


def builder_aliases() -> tuple[BuilderAlias, ...]:
    """The `ALIASES` rows as `BuilderAlias` objects naming their classes in `CLASSES_MODULE` (the
    ``anyaccel.builder_aliases`` entry point of anyaccel itself). Imports nothing."""
    return tuple(BuilderAlias(name, family, build, accelerators, f"{CLASSES_MODULE}:{name}")
                 for name, family, build, accelerators in ALIASES)
