"""Entry-point groups through which integrations contribute to the op core, read so a stale install is loud.

The op core never imports an integration: an integration names what it contributes in an entry-point group
(``anyaccel.module_functions``: DeepSpeed's ``create_adam``, ``multi_tensor_adam``...;
``anyaccel.builder_aliases``: DeepSpeed's ``FusedAdamBuilder`` on the CPU) and the core reads the group.
anyaccel's own integrations are declared in its own ``pyproject.toml``, so they exist only in the
installed distribution metadata: an environment installed (``pip install -e .``) before a group was added has
source code that relies on the group and metadata that lacks it, and what the group contributes would be
missing without a word. `entry_points` refuses that case with `StaleInstallError` naming the fix.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging

from anyaccel.op_builder.errors import StaleInstallError

logger = logging.getLogger(__name__)

__all__ = ["DISTRIBUTION", "OWN_GROUPS", "check_own_group", "entry_points"]

#: anyaccel's distribution name.
DISTRIBUTION = "anyaccel"

#: The entry-point groups in which anyaccel's own ``pyproject.toml`` declares entries (a test keeps this equal
#: to ``pyproject.toml``): a group here that anyaccel's installed metadata lacks means a stale install.
OWN_GROUPS: frozenset[str] = frozenset({"anyaccel.module_functions", "anyaccel.builder_aliases"})


@functools.cache
def check_own_group(group: str) -> None:
    """Check that anyaccel's installed metadata declares its own entries of ``group`` (once per group).

    Args:
        group: an entry-point group name; groups not in `OWN_GROUPS` are not checked.

    Raises:
        StaleInstallError: anyaccel is installed but its metadata has no entry in ``group`` although its
            ``pyproject.toml`` declares some (the environment predates the group); the message names the fix.

    Side effects: reads anyaccel's distribution metadata; logs a warning when anyaccel is imported without
    being installed (a source tree on ``sys.path``), since then no group has anyaccel's entries either.
    """
    if group not in OWN_GROUPS:
        return
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        logger.warning("anyaccel is imported without being installed, so its entry points (%s) are missing and "
                       "what they contribute (DeepSpeed's module functions) is absent; run `pip install -e .` in "
                       "the source checkout", group)
        return
    if not any(ep.group == group for ep in dist.entry_points):
        where = dist.locate_file("")
        raise StaleInstallError(
            f"anyaccel {dist.version}'s installed metadata (found in {where}) has no {group!r} entry points, "
            f"which its pyproject.toml declares: the environment was installed before they existed, and what "
            f"they contribute would be missing. Reinstall anyaccel: `pip install -e .` in the source checkout, "
            f"else `pip install --force-reinstall anyaccel`; a stale anyaccel.egg-info directory left in a "
            f"source checkout shadows the installed metadata when Python runs from there: delete it")


def entry_points(group: str) -> tuple[importlib.metadata.EntryPoint, ...]:
    """The installed entry points of ``group``, sorted by name, after `check_own_group`.

    Raises:
        StaleInstallError: ``group`` is one of anyaccel's own and its installed metadata lacks it.
    """
    check_own_group(group)
    return tuple(sorted(importlib.metadata.entry_points(group=group), key=lambda e: (e.name, e.value)))
