"""Validating fakes of the rotary-embedding ops and the argument rules both implementations check."""

from __future__ import annotations

import torch

from anyaccel.ops.nn import validation as v
from anyaccel.ops.nn.errors import OpInputError


def check(op: str, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """The rules.

    Raises:
        OpInputError: x, cos or sin not a float tensor or on another device, x's last dimension not even and
            positive, cos/sin not of one shape ``[..., D/2]`` broadcastable to ``x.shape[:-1]``.
    """
    name = "x" if op == "rope" else "grad_y"
    for n, t in ((name, x), ("cos", cos), ("sin", sin)):
        v.check_float(op, n, t)
    v.check_min_dim(op, name, x, 1)
    d = x.shape[-1]
    if d == 0 or d % 2:
        raise OpInputError(f"{op}: {name} has shape {list(x.shape)}; accepted: an even, non-zero last dimension "
                           "(the rotated pairs)")
    v.check_same_device(op, {name: x, "cos": cos, "sin": sin})
    if cos.shape != sin.shape:
        raise OpInputError(f"{op}: cos has shape {list(cos.shape)} but sin has {list(sin.shape)}; accepted: one "
                           "shape")
    if cos.dim() == 0 or cos.shape[-1] != d // 2:
        raise OpInputError(f"{op}: cos has shape {list(cos.shape)}; accepted: [..., {d // 2}] (one value per "
                           "pair; the front end takes the first half of a Hugging Face [..., D] table)")
    lead, target = cos.shape[:-1], x.shape[:-1]
    if all(type(d) is int for d in (*lead, *target)):
        # concrete sizes (eager): the rule directly; torch.broadcast_shapes costs about 50 us per call
        # (lead may have fewer dimensions: aligned from the right, the missing ones broadcast)
        pairs = zip(reversed(lead), reversed(target), strict=False)
        if len(lead) <= len(target) and all(c in (1, t) for c, t in pairs):
            return
    try:
        torch.broadcast_shapes(lead, target)
    except RuntimeError:
        raise OpInputError(f"{op}: cos has shape {list(cos.shape)}, which does not broadcast against "
                           f"{name}.shape[:-1] = {list(target)}") from None
    if torch.broadcast_shapes(lead, target) != target:
        raise OpInputError(f"{op}: cos has shape {list(cos.shape)}, which broadcasts {name}.shape[:-1] = "
                           f"{list(target)} to a larger shape; accepted: cos broadcastable to {name}'s shape")


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Fake of ``rope``: x's shape and dtype, x's layout (``empty_like``)."""
    check("rope", x, cos, sin)
    return torch.empty_like(x)


def rope_backward(grad_y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Fake of ``rope_backward``."""
    check("rope_backward", grad_y, cos, sin)
    return torch.empty_like(grad_y)
