"""Device-module internals with no public equivalent: oneDNN's float16 support query, the MPS default generator.

Private names used (tested on torch 2.10.0, 2.13.0 and 2.15.0):

* ``torch.ops.mkldnn._is_mkldnn_fp16_supported``: whether oneDNN has fast float16 kernels on this CPU;
* ``torch.mps._get_default_mps_generator``: the MPS default ``torch.Generator``.

Fallbacks: float16 is reported unsupported (the conservative answer DeepSpeed's callers handle); the MPS
generator raises `PrivateAPIUnavailableError`, as torch has no public way to reach it.
"""

from __future__ import annotations

import torch

from anyaccel._compat import PrivateAPIUnavailableError

__all__ = ["mkldnn_fp16_supported", "mps_default_generator"]


def mkldnn_fp16_supported() -> bool:
    """Whether oneDNN reports fast float16 kernels on this CPU; False where torch cannot tell."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except (AttributeError, RuntimeError):
        return False


def mps_default_generator() -> torch.Generator:
    """The MPS default generator.

    Raises:
        PrivateAPIUnavailableError: this torch has no ``torch.mps._get_default_mps_generator``.
    """
    get = getattr(torch.get_device_module("mps"), "_get_default_mps_generator", None)
    if get is None:
        raise PrivateAPIUnavailableError("the MPS default generator", "torch.mps._get_default_mps_generator",
                                         "seed with torch.mps.manual_seed and read the state with "
                                         "torch.mps.get_rng_state()")
    return get()
