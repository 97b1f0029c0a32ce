"""Lion: ``CPULion`` (host memory, SIMD) and ``FusedLion`` (accelerators), one op spec (``spec.py``).

As DeepSpeed's ``deepspeed.ops.lion`` offers its CPU and fused optimizers side by side. Importing this
package is cheap (the op spec is read by the registry without importing the optimizers); the optimizers
are imported on first attribute access.
"""

from __future__ import annotations

from anyaccel.lazy_exports import lazy_exports

__all__ = ["CPULion", "FusedLion"]


__getattr__, __dir__ = lazy_exports(__name__, {
    "CPULion": "anyaccel.ops.lion.cpu",
    "FusedLion": "anyaccel.ops.lion.fused",
})
