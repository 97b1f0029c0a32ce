"""Python front ends of anyaccel's native kernels.

Importing this package builds nothing and loads no native library: each optimizer builds or loads its op
on first use through the matching builder in ``anyaccel.op_builder``.
"""

from anyaccel.ops.adam import CPUAdam, FusedAdam
from anyaccel.ops.lion import CPULion, FusedLion

__all__ = ["CPUAdam", "CPULion", "FusedAdam", "FusedLion"]
