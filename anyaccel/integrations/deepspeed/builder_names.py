"""DeepSpeed's builder names that anyaccel serves with a build of another name: the table, and its provider.

DeepSpeed asks for some ops under a builder name whose build on that accelerator is, in anyaccel, a build
published under another name: DeepSpeed's ``FusedAdam``, ``FusedLion`` and ``FusedLamb`` on CPU tensors call
``create_op_builder("FusedAdamBuilder")`` (and so on), which anyaccel serves with its CPU SIMD builds. Those
names are DeepSpeed's vocabulary, so they are this table's, not the op specs': `builder_aliases` is
anyaccel's ``anyaccel.builder_aliases`` entry point, through which the op registry learns them without
importing this package (`anyaccel.op_builder.core.aliases`). Every row stays in DeepSpeed's op table too
([`anyaccel.integrations.deepspeed.op_table`][anyaccel.integrations.deepspeed.op_table] completes it from the registry).
"""

from __future__ import annotations

from anyaccel.op_builder.core.aliases import BuilderAlias

__all__ = ["ALIASES", "builder_aliases"]

#: ``(DeepSpeed builder name, op family, build NAME, accelerators)``: the build DeepSpeed gets for that name
#: on those accelerators (DeepSpeed 0.19.8's ``FusedAdam``/``FusedLion``/``FusedLamb`` ask for their fused
#: builder whatever the device; on the CPU the CPU builds compute the same step).
ALIASES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("FusedAdamBuilder", "adam", "cpu_adam", ("cpu",)),
    ("FusedLionBuilder", "lion", "cpu_lion", ("cpu",)),
    ("FusedLambBuilder", "lamb", "cpu_lamb", ("cpu",)),
)


def builder_aliases() -> tuple[BuilderAlias, ...]:
    """The `ALIASES` rows as `BuilderAlias` objects (the
    ``anyaccel.builder_aliases`` entry point of anyaccel itself)."""
    return tuple(BuilderAlias(name, family, build, accelerators) for name, family, build, accelerators in ALIASES)
