"""The model ops' front ends: ``anyaccel.ops.nn.families.rms_norm(x, weight)`` and friends.

Each front end picks the implementation for the inputs' device type (:mod:`anyaccel.ops.nn.implementations`:
``impl=`` argument, else ``ANYACCEL_IMPL_<FAMILY>``, else Triton on CUDA/XPU and the portable torch ops
elsewhere) and calls its torch op, which carries the autograd formula. Every front end works under
``torch.compile(fullgraph=True)`` without a graph break.
"""

from __future__ import annotations

import torch

from anyaccel.ops.nn import validation as v
from anyaccel.ops.nn.errors import OpInputError, UnsupportedOpError
from anyaccel.ops.nn.implementations import ops

__all__ = [
    "cross_entropy", "fused_add_rms_norm", "fused_linear_cross_entropy", "layer_norm", "log_softmax", "rms_norm",
    "rope", "silu", "softmax", "swiglu",
]


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6, *, casting: str = "torch",
             impl: str | None = None) -> torch.Tensor:
    """RMSNorm over the last dimension (Zhang & Sennrich 2019), computed in fp32.

    Args:
        x: ``[..., N]``, float32/bfloat16/float16, any strides.
        weight: ``[N]`` (any of the three float dtypes) or None.
        eps: added to the mean square, ``>= 0``.
        casting: ``"torch"`` (as ``torch.nn.functional.rms_norm``: one rounding, result in x's dtype) or
            ``"llama"`` (as Hugging Face ``LlamaRMSNorm``: rounds the normalised value to x's dtype before
            the weight; result in ``promote(x, weight)``).
        impl: force an implementation (``"triton"``, ``"torch"``, ``"triton_interpreter"``).

    Returns:
        ``y``, x's shape, contiguous.

    Raises:
        OpInputError: bad dtype, device, shape, eps or casting (the message names the fix).
    """
    return ops("rms_norm", x.device.type, impl).rms_norm(x, weight, float(eps), casting)[0]


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None,
                       eps: float = 1e-6, *, casting: str = "torch", impl: str | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """``h = x + residual`` (rounded to x's dtype) and ``rms_norm(h)``, in one pass over memory.

    The functional form of vLLM's/FlagGems's in-place ``fused_add_rms_norm``: it returns new tensors, so
    autograd can differentiate it (the gradient of ``h`` is added to ``x``'s and ``residual``'s).

    Args:
        x, residual: ``[..., N]``, one float dtype, one shape (any strides).
        weight, eps, casting, impl: as for :func:`rms_norm`.

    Returns:
        ``(y, h)``: the normalised output and the new residual stream.

    Raises:
        OpInputError: as :func:`rms_norm`, or residual of another shape or dtype.
    """
    y, h, _ = ops("rms_norm", x.device.type, impl).fused_add_rms_norm(x, residual, weight, float(eps), casting)
    return y, h
