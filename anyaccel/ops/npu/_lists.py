"""Shared helpers of the NPU optimizer implementations: fp32 working copies.

(Argument checks are [`anyaccel.ops.validation`][anyaccel.ops.validation]'s, shared by every implementation.)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["as_fp32", "write_back"]


def as_fp32(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """fp32 views of ``tensors``, flattened: the tensors themselves when fp32 (updated in place), else copies."""
    return [t.view(-1) if t.dtype == torch.float32 else t.view(-1).float() for t in tensors]


def write_back(targets: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> None:
    """Copy fp32 ``values`` into ``targets`` (rounding to nearest even for 16-bit targets), skipping aliases."""
    for t, v in zip(targets, values, strict=True):
        if t.data_ptr() != v.data_ptr() or t.dtype != v.dtype:
            t.view(-1).copy_(v)
