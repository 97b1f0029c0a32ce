"""A device-side assertion: a check on an accelerator's data that needs no synchronisation.

Private name used (tested on torch 2.10.0, 2.13.0 and 2.15.0): ``torch._assert_async(cond, msg)``, the op torch's
own code uses to check a condition on device data without waiting for it (the kernel asserts on the device,
as torch's CUDA ``nll_loss`` does for an out-of-range target: the error surfaces at the next synchronisation,
and the CUDA context is then unusable). It can be captured in a CUDA graph and traced by ``torch.compile``;
a host read (``bool(t)``) can be neither.

Fallback: where the op is missing, `assert_async` returns False and the caller checks on the host (one
synchronisation per call: correct, slower, and not capturable).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["assert_async"]


def assert_async(condition: torch.Tensor, message: str) -> bool:
    """Queue a device-side check that the one-element boolean ``condition`` is true.

    Args:
        condition: a one-element ``torch.bool`` tensor on the device (no host copy is made).
        message: what the device assertion reports when ``condition`` is false.

    Returns:
        True when the check was queued; False when this torch has no device-side assertion (the caller must
        check on the host instead).
    """
    op: Any = getattr(torch, "_assert_async", None)
    if op is None:
        return False
    op(condition, message)
    return True
