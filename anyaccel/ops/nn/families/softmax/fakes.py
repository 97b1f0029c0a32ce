"""Validating fakes of the softmax ops and the argument rules both implementations check."""

from __future__ import annotations

import torch

from anyaccel.ops.nn import validation as v
from anyaccel.ops.nn.errors import OpInputError


def check(op: str, x: torch.Tensor, dim: int, grad_y: torch.Tensor | None = None) -> int:
    """Validate and return ``dim`` made non-negative.

    Raises:
        OpInputError: x (or grad_y) not a float tensor, grad_y not shaped like x or on another device, dim
            out of range.
    """
    v.check_float(op, "x" if grad_y is None else "y", x)
    nd = max(x.dim(), 1)
    if not -nd <= dim < nd:
        raise OpInputError(f"{op}: dim={dim} is out of range for a tensor of shape {list(x.shape)}; accepted: "
                           f"{-nd} <= dim < {nd}")
    if grad_y is not None:
        v.check_float(op, "grad_y", grad_y)
        v.check_shape(op, "grad_y", grad_y, x.shape, "the shape of y")
        v.check_same_device(op, {"y": x, "grad_y": grad_y})
    return dim % nd


def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Fake of ``softmax``: x's shape and dtype, contiguous."""
    check("softmax", x, dim)
    return x.new_empty(x.shape)


def log_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Fake of ``log_softmax``."""
    check("log_softmax", x, dim)
    return x.new_empty(x.shape)


def softmax_backward(grad_y: torch.Tensor, y: torch.Tensor, dim: int) -> torch.Tensor:
    """Fake of ``softmax_backward``: y's shape and dtype."""
    check("softmax_backward", y, dim, grad_y)
    return y.new_empty(y.shape)


def log_softmax_backward(grad_y: torch.Tensor, y: torch.Tensor, dim: int) -> torch.Tensor:
    """Fake of ``log_softmax_backward``."""
    check("log_softmax_backward", y, dim, grad_y)
    return y.new_empty(y.shape)
