"""Shared helpers of the NPU optimizer implementations: argument checks and fp32 working copies.

The checks and their messages are those of the CUDA/SYCL ops (csrc/includes/cuda/multi_tensor_apply.cuh),
so every implementation of ``adam_step``/``lion_step`` rejects the same inputs the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["check_lists", "as_fp32", "write_back"]


def check_lists(op: str, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
                states: dict[str, Sequence[torch.Tensor]], copies: Sequence[torch.Tensor]) -> None:
    """Validate one step's tensor lists.

    Args:
        op: "adam_step" or "lion_step", for the messages.
        params: the parameters (or fp32 master weights), any shape, contiguous.
        grads, states[...], copies: one tensor per parameter with its element count and device;
            ``copies`` may be empty.

    Raises:
        ValueError: an empty or mismatched list, a tensor on another device, with another element count
            or not contiguous; the message names the list and index.
        TypeError: a list whose tensors do not share one dtype.
    """
    n = len(params)
    if n == 0:
        raise ValueError(f"{op}: params is empty; pass at least one tensor")
    if len(grads) != n:
        raise ValueError(f"{op}: got {n} params but {len(grads)} grads; pass one gradient per parameter")
    for name, lst in states.items():
        if len(lst) != n:
            raise ValueError(f"{op}: got {n} params but {len(lst)} {name}; pass one state tensor per parameter")
    if copies and len(copies) != n:
        raise ValueError(f"{op}: got {n} params but {len(copies)} model_copies; pass none or one per parameter")
    lists = {"params": params, "grads": grads, **states, **({"model_copies": copies} if copies else {})}
    for name, lst in lists.items():
        dtype = lst[0].dtype
        for i, t in enumerate(lst):
            p = params[i]
            if t.device != p.device:
                raise ValueError(f"{op}: {name}[{i}] is on {t.device} but params[{i}] is on {p.device}; move every "
                                 f"tensor of a step to one device")
            if t.dtype != dtype:
                raise TypeError(f"{op}: {name}[{i}] has dtype {t.dtype}, expected {dtype}; every tensor of one list "
                                f"must share a dtype (the Python front end groups parameters by dtype)")
            if t.numel() != p.numel():
                raise ValueError(f"{op}: {name}[{i}] has {t.numel()} elements but params[{i}] has {p.numel()}; "
                                 f"shapes must match")
            if not t.is_contiguous():
                raise ValueError(f"{op}: {name}[{i}] is not contiguous; call .contiguous() on it")


def as_fp32(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """fp32 views of ``tensors``, flattened: the tensors themselves when fp32 (updated in place), else copies."""
    return [t.view(-1) if t.dtype == torch.float32 else t.view(-1).float() for t in tensors]


def write_back(targets: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> None:
    """Copy fp32 ``values`` into ``targets`` (rounding to nearest even for 16-bit targets), skipping aliases."""
    for t, v in zip(targets, values):
        if t.data_ptr() != v.data_ptr() or t.dtype != v.dtype:
            t.view(-1).copy_(v)
