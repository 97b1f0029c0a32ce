"""Adam: ``CPUAdam`` (host memory, SIMD) and ``FusedAdam`` (accelerators), one op spec (``spec.py``).

As DeepSpeed's ``deepspeed.ops.adam`` offers its CPU and fused optimizers side by side. Importing this
package is cheap (the op spec is read by the registry without importing the optimizers); the optimizers
are imported on first attribute access.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CPUAdam", "FusedAdam"]


def __getattr__(name: str) -> Any:
    if name == "CPUAdam":
        from anyaccel.ops.adam.cpu import CPUAdam

        return CPUAdam
    if name == "FusedAdam":
        from anyaccel.ops.adam.fused import FusedAdam

        return FusedAdam
    raise AttributeError(f"module 'anyaccel.ops.adam' has no attribute {name!r}")
