"""Validating fakes of the rotary-embedding ops and the argument rules both implementations check."""

from __future__ import annotations

import torch

from anyaccel.ops.nn import validation as v
from anyaccel.ops.nn.errors import OpInputError


@v.memoized
def check(op: str, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, name: str | None = None) -> None:
    """The rules.

    Args:
        name: x's name in messages (default ``"x"`` for ``rope``, else ``"grad_y"``).

    Raises:
        OpInputError: x, cos or sin not a float tensor or on another device, x's last dimension not even and
            positive, cos/sin not of one shape ``[..., D/2]`` broadcastable to ``x.shape[:-1]``.
    """
    name = name or ("x" if op == "rope" else "grad_y")
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


@v.memoized
def check_qk(op: str, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """The rules of ``rope_qk`` (and its backward): `check` for each of q and k, and one device.

    Raises:
        OpInputError: as `check`, naming q (grad_q) or k (grad_k); k with another last dimension or on
            another device than q.
    """
    names = ("q", "k") if op == "rope_qk" else ("grad_q", "grad_k")
    check(op, q, cos, sin, names[0])
    if k.dim() == 0 or k.shape[-1] != q.shape[-1]:
        raise OpInputError(f"{op}: {names[1]} has shape {list(k.shape)} but {names[0]} has {list(q.shape)}; "
                           "accepted: one last dimension (the head size) for both")
    check(op, k, cos, sin, names[1])
    v.check_same_device(op, {names[0]: q, names[1]: k})


def rope_qk(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake of ``rope_qk``: q's and k's shapes, dtypes and layouts."""
    check_qk("rope_qk", q, k, cos, sin)
    return torch.empty_like(q), torch.empty_like(k)


def rope_qk_backward(grad_q: torch.Tensor, grad_k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     interleaved: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake of ``rope_qk_backward``."""
    check_qk("rope_qk_backward", grad_q, grad_k, cos, sin)
    return torch.empty_like(grad_q), torch.empty_like(grad_k)
