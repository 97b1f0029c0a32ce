"""Builder aliases: more builder names a build answers to on named accelerators, contributed by integrations.

A build is compiled once, under its own ``NAME``, and makes one builder class (`NativeBuild.builder
<anyaccel.spec.NativeBuild>`). An integration whose callers ask for a build under another builder name
(DeepSpeed's ``FusedAdam`` on CPU tensors asks for ``FusedAdamBuilder``, which anyaccel serves with its CPU
Adam build) contributes a `BuilderAlias` through the ``anyaccel.builder_aliases`` entry-point group
(``name = "module:function"``, the function returning the aliases). The alias publishes the same build (same
sources, cache entry and loaded library) under that name, so ``create_op_builder("FusedAdamBuilder")`` on
the CPU answers through the op registry while the op specs and the op-builder layer stay free of the
integration's vocabulary and never import it.

The group is read on the first lookup (`contributed`), through
`anyaccel.op_builder.core.entry_points.entry_points`, so an environment installed before the group
existed raises `StaleInstallError` instead of losing the names.

An alias may name a class written for it (`BuilderAlias.builder_class`, ``"module:Name"``: DeepSpeed's are
generated into ``anyaccel/integrations/deepspeed/alias_builders.py``), so that the class ``create_op_builder``
returns for it has a ``class`` line to find with grep; the op-builder layer imports it by that string, on first
use, and never by name.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from anyaccel.op_builder.core.entry_points import entry_points
from anyaccel.spec import SpecError, op_spec

logger = logging.getLogger(__name__)

__all__ = ["ENTRY_POINT_GROUP", "BuilderAlias", "contributed", "names_of"]

#: The entry-point group of the alias providers.
ENTRY_POINT_GROUP = "anyaccel.builder_aliases"


@dataclass(frozen=True)
class BuilderAlias:
    """One more builder name a build answers to, on named accelerators.

    Attributes:
        name: the builder class name (``"FusedAdamBuilder"``); ``create_op_builder(name)`` on one of
            `accelerators` returns a subclass of the build's class under that name.
        family: the op family (``"adam"``).
        build: the build's ``NAME`` (``"cpu_adam"``).
        accelerators: accelerator names (``_name``); never ``"*"``, so an alias cannot hide another build's row.
        builder_class: ``"module:Name"`` of a class written for the alias (``Name`` is ``name``; the build's
            backend base, with ``NAME``, ``BUILD_VAR``, ``SPEC`` and ``BUILD`` the build's), returned when it
            is still the build's (`anyaccel.op_builder.classes.builder_class`); "" (or a class out of step with
            the build): a class is made on first use.
    """

    name: str
    family: str
    build: str
    accelerators: tuple[str, ...]
    builder_class: str = ""

    def validate(self) -> None:
        """Check the alias against the op specs.

        Raises:
            SpecError: the name is not an identifier, the accelerators are empty or include ``"*"``,
                ``builder_class`` is not ``"module:<name>"``, or the family or build does not exist; the message
                names the alias and what is accepted.
        """
        if not self.name.isidentifier() or not self.accelerators or "*" in self.accelerators:
            raise SpecError(f"builder alias {self!r}: accepted: an identifier name and at least one named "
                            "accelerator (not '*')")
        module, _, name = self.builder_class.rpartition(":")
        if self.builder_class and (not module or name != self.name):
            raise SpecError(f"builder alias {self.name!r}: builder_class {self.builder_class!r} is not "
                            f"'<module>:{self.name}'")
        build = op_spec(self.family).build(self.build)  # SpecError naming the family's builds
        if build.name != self.build:
            raise SpecError(f"builder alias {self.name!r} names build {self.build!r} by its builder name; give "
                            f"the build's NAME, {build.name!r}")


def _load(value: Callable[[], Iterable[BuilderAlias]], where: str) -> list[BuilderAlias]:
    found = list(value())
    for alias in found:
        if not isinstance(alias, BuilderAlias):
            raise SpecError(f"builder-alias provider {where} returned {alias!r}; accepted: BuilderAlias objects")
        alias.validate()
    return found


@functools.cache
def contributed() -> tuple[BuilderAlias, ...]:
    """Every alias the ``anyaccel.builder_aliases`` providers contribute, in entry-point name order.

    A provider that fails to import, or returns an invalid alias, is logged and skipped (its names are then
    unknown to ``create_op_builder``).

    Raises:
        StaleInstallError: anyaccel's installed metadata lacks its own entries of the group (reinstall).

    Side effects: imports the providers once; cached.
    """
    out: list[BuilderAlias] = []
    for ep in entry_points(ENTRY_POINT_GROUP):
        try:
            out.extend(_load(ep.load(), ep.value))
        except (ImportError, AttributeError, SpecError) as exc:
            logger.warning("builder-alias entry point %s (%s) skipped: %s", ep.name, ep.value, exc)
    return tuple(out)


def names_of(family: str, build: str) -> tuple[str, ...]:
    """The alias names contributed for build ``build`` (its ``NAME``) of ``family``, without repeats."""
    return tuple(dict.fromkeys(a.name for a in contributed() if a.family == family and a.build == build))
