"""LAMB: ``FusedLamb`` (accelerators, DeepSpeed's arguments) and ``CPULamb`` (host memory), one op spec.

LAMB: You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", ICLR 2020
(https://arxiv.org/abs/1904.00962). Importing this package is cheap; the optimizers are imported on first
attribute access.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CPULamb", "FusedLamb"]


def __getattr__(name: str) -> Any:
    if name == "FusedLamb":
        from anyaccel.ops.lamb.fused import FusedLamb

        return FusedLamb
    if name == "CPULamb":
        from anyaccel.ops.lamb.cpu import CPULamb

        return CPULamb
    raise AttributeError(f"module 'anyaccel.ops.lamb' has no attribute {name!r}")
