"""Adam: ``CPUAdam`` (host memory, SIMD) and ``FusedAdam`` (accelerators), one op spec (``spec.py``).

As DeepSpeed's ``deepspeed.ops.adam`` offers its CPU and fused optimizers side by side. Importing this
package is cheap (the op spec is read by the registry without importing the optimizers); the optimizers
are imported on first attribute access.
"""

from __future__ import annotations

from anyaccel.lazy_exports import lazy_exports

__all__ = ["CPUAdam", "FusedAdam"]


__getattr__, __dir__ = lazy_exports(__name__, {
    "CPUAdam": "anyaccel.ops.adam.cpu",
    "FusedAdam": "anyaccel.ops.adam.fused",
})
