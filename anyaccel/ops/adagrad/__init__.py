"""Adagrad: ``CPUAdagrad`` (host memory, SIMD), one op spec (``spec.py``).

As DeepSpeed's ``deepspeed.ops.adagrad`` offers ``DeepSpeedCPUAdagrad``. Importing this package is cheap (the op
spec is read by the registry without importing the optimizer); the optimizer is imported on first attribute
access.
"""

from __future__ import annotations

from anyaccel.lazy_exports import lazy_exports

__all__ = ["CPUAdagrad"]


__getattr__, __dir__ = lazy_exports(__name__, {
    "CPUAdagrad": "anyaccel.ops.adagrad.cpu",
})
