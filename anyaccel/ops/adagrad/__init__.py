"""Adagrad: ``CPUAdagrad`` (host memory, SIMD), one op spec (``spec.py``).

As DeepSpeed's ``deepspeed.ops.adagrad`` offers ``DeepSpeedCPUAdagrad``. Importing this package is cheap (the op
spec is read by the registry without importing the optimizer); the optimizer is imported on first attribute
access.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CPUAdagrad"]


def __getattr__(name: str) -> Any:
    if name == "CPUAdagrad":
        from anyaccel.ops.adagrad.cpu import CPUAdagrad

        return CPUAdagrad
    raise AttributeError(f"module 'anyaccel.ops.adagrad' has no attribute {name!r}")
