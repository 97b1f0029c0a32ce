"""Functions a loaded op module offers besides its torch ops, contributed by integrations.

An integration (DeepSpeed's module ABI: ``create_adam``, ``multi_tensor_adam``...) registers a provider in
the ``anyaccel.module_functions`` entry-point group (``name = "module:function"``). The op-builder layer asks
the providers when it loads a build and never imports an integration itself; the provider named there is
imported once per process, on the first load. The group is read through
`anyaccel.op_builder.core.entry_points.entry_points`, so an environment installed before the group
existed raises `StaleInstallError` instead of loading modules without
their functions.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from anyaccel.op_builder.core.entry_points import entry_points

logger = logging.getLogger(__name__)

__all__ = ["ENTRY_POINT_GROUP", "Provider", "for_build", "providers"]

#: The entry-point group of the providers.
ENTRY_POINT_GROUP = "anyaccel.module_functions"

#: ``provider(family, builder_names) -> (adapter "module:factory", function names) | None``.
Provider = Callable[[str, tuple[str, ...]], "tuple[str, tuple[str, ...]] | None"]


@functools.lru_cache(maxsize=1)
def providers() -> tuple[Provider, ...]:
    """The providers of the ``anyaccel.module_functions`` entry points, by entry-point name.

    A provider that fails to import is logged and skipped (its functions are then missing from the modules).

    Raises:
        StaleInstallError: anyaccel's installed metadata lacks its own entries of the group (reinstall).

    Side effects: reads the installed distributions' entry points and imports the providers once; cached.
    """
    found: list[Provider] = []
    for ep in entry_points(ENTRY_POINT_GROUP):
        try:
            found.append(ep.load())
        except (ImportError, AttributeError) as exc:
            logger.warning("module-functions entry point %s (%s) skipped: %s", ep.name, ep.value, exc)
    return tuple(found)


def for_build(family: str, builder_names: tuple[str, ...]) -> tuple[str, tuple[str, ...]] | None:
    """The first provider's answer for a build of ``family`` answering to ``builder_names``.

    Args:
        family: the op family of the build.
        builder_names: the build's own builder names
            ([`anyaccel.spec.NativeBuild.builder_names`][anyaccel.spec.NativeBuild.builder_names]); the
            aliases integrations contribute for the family's builds of those names
            (`anyaccel.op_builder.core.aliases`) are added before the providers are asked, so a module
            loaded as ``CPUAdamBuilder`` also offers what DeepSpeed calls on it as ``FusedAdamBuilder``.

    Returns:
        ``(adapter, function names)``: the ``"module:factory"`` called as ``factory(module, names)`` on the
        first use of one of the names; None when no provider offers functions for the build.

    Raises:
        StaleInstallError: anyaccel's installed metadata lacks its own entry-point groups (reinstall).
    """
    from anyaccel.op_builder.core import aliases
    from anyaccel.spec import op_spec

    builds = [b.name for b in op_spec(family).builds if b.builder in builder_names]
    names = tuple(dict.fromkeys((*builder_names, *(n for b in builds for n in aliases.names_of(family, b)))))
    for provider in providers():
        answer = provider(family, names)
        if answer is not None:
            return answer
    return None
