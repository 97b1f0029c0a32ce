"""LAMB: ``FusedLamb`` (accelerators, DeepSpeed's arguments) and ``CPULamb`` (host memory), one op spec.

LAMB: You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", ICLR 2020
(https://arxiv.org/abs/1904.00962). Importing this package is cheap; the optimizers are imported on first
attribute access.
"""

from __future__ import annotations

from anyaccel.lazy_exports import lazy_exports

__all__ = ["CPULamb", "FusedLamb"]


__getattr__, __dir__ = lazy_exports(__name__, {
    "FusedLamb": "anyaccel.ops.lamb.fused",
    "CPULamb": "anyaccel.ops.lamb.cpu",
})
