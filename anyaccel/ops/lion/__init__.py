"""Lion: ``CPULion`` (host memory, SIMD) and ``FusedLion`` (accelerators), one op spec (``spec.py``).

As DeepSpeed's ``deepspeed.ops.lion`` offers its CPU and fused optimizers side by side. Importing this
package is cheap (the op spec is read by the registry without importing the optimizers); the optimizers
are imported on first attribute access.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CPULion", "FusedLion"]


def __getattr__(name: str) -> Any:
    if name == "CPULion":
        from anyaccel.ops.lion.cpu import CPULion

        return CPULion
    if name == "FusedLion":
        from anyaccel.ops.lion.fused import FusedLion

        return FusedLion
    raise AttributeError(f"module 'anyaccel.ops.lion' has no attribute {name!r}")
