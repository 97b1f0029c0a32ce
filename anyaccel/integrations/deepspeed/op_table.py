"""DeepSpeed's op table (``deepspeed.ops.op_builder.all_ops.ALL_OPS``) completed with every op anyaccel answers.

DeepSpeed builds ``ALL_OPS`` (op ``NAME`` -> builder instance; ``ds_report`` and ``deepspeed.ops.__compatible_ops__``
read it) from the builder classes in its own op-builder package for the device (``op_builder_dir()``), so an
op anyaccel answers under a builder name that package lacks is missing from it: on the CPU, DeepSpeed has no
``FusedLambBuilder``, anyaccel answers it with its ``cpu_lamb`` build, and DeepSpeed code reading
``__compatible_ops__[FusedLambBuilder.NAME]`` fails with ``KeyError: 'cpu_lamb'``. After DeepSpeed builds the
table, [`complete`][anyaccel.integrations.deepspeed.op_table.complete] adds one entry per op anyaccel answers on the
accelerator, derived from the op
registry (every builder name whose lookup is not DeepSpeed's placeholder), keeping DeepSpeed's entries.
"""

from __future__ import annotations

import logging
import types
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["ALL_OPS_MODULE", "complete"]

#: The DeepSpeed module holding ``ALL_OPS`` and ``__op_builders__``.
ALL_OPS_MODULE = "deepspeed.ops.op_builder.all_ops"


def complete(all_ops: types.ModuleType, view: Any) -> list[str]:
    """Add to ``all_ops.ALL_OPS`` (and ``__op_builders__``) every op anyaccel answers on ``view``'s accelerator.

    Args:
        all_ops: DeepSpeed's executed ``all_ops`` module.
        view: the DeepSpeed-facing accelerator (`anyaccel.integrations.deepspeed.view`).

    Returns:
        The op names added, sorted.

    Side effects: instantiates the builders added (cheap: no build, no probe) and mutates DeepSpeed's table
    and list in place, so holders of them see the entries.
    """
    from anyaccel.integrations.deepspeed.builders import implemented_builders

    table: dict[str, Any] = all_ops.ALL_OPS
    builders: list[Any] = all_ops.__op_builders__
    added = []
    for name in implemented_builders(str(view._name)):
        builder = view.create_op_builder(name)
        if builder.name not in table:
            table[builder.name] = builder
            builders.append(builder)
            added.append(builder.name)
    if added:
        logger.debug("DeepSpeed's op table: added anyaccel's %s", ", ".join(sorted(added)))
    return sorted(added)
