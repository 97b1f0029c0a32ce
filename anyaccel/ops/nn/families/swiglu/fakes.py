"""Validating fakes of the SwiGLU/SiLU ops and the rules both implementations check; the output layout
is `anyaccel.ops.triton.broadcast.empty_output`'s, as the generated kernels'."""

from __future__ import annotations

import torch

from anyaccel.ops.nn import validation as v
from anyaccel.ops.nn.errors import OpInputError
from anyaccel.ops.triton.broadcast import broadcast_shape, empty_output


def check(op: str, tensors: dict[str, torch.Tensor]) -> torch.Size:
    """Validate and return the broadcast shape.

    Raises:
        OpInputError: a tensor not float, on another device, or shapes that do not broadcast.
    """
    for name, t in tensors.items():
        v.check_float(op, name, t)
    v.check_same_device(op, dict(tensors))
    try:
        return broadcast_shape(list(tensors.values()))
    except RuntimeError:
        shapes = ", ".join(f"{k} {list(t.shape)}" for k, t in tensors.items())
        raise OpInputError(f"{op}: shapes {shapes} do not broadcast; accepted: broadcastable shapes") from None


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Fake of ``swiglu``: broadcast shape, ``torch.result_type(a, b)``."""
    shape = check("swiglu", {"a": a, "b": b})
    return empty_output([a, b], shape, torch.result_type(a, b), a.device)


def grad_dtype(t: torch.Tensor, shape: torch.Size) -> torch.dtype:
    """The dtype of an element-wise backward's gradient for input ``t``: ``t``'s own, or float32 when ``t`` was
    broadcast (the autograd formula then sums the gradient over the broadcast dimensions in float32 and
    rounds once, instead of summing values already rounded to 16 bits)."""
    return t.dtype if tuple(t.shape) == tuple(shape) else torch.float32


def swiglu_backward(grad_y: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake of ``swiglu_backward``: two tensors of the broadcast shape, in `grad_dtype` of a and b."""
    shape = check("swiglu_backward", {"grad_y": grad_y, "a": a, "b": b})
    ops = [grad_y, a, b]
    return (empty_output(ops, shape, grad_dtype(a, shape), a.device),
            empty_output(ops, shape, grad_dtype(b, shape), a.device))


def swiglu_backward_recompute(grad_y: torch.Tensor, a: torch.Tensor, b: torch.Tensor
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fake of ``swiglu_backward_recompute``: `swiglu_backward`'s two gradients, then the recomputed
    ``swiglu(a, b)`` in ``torch.result_type(a, b)``; all three of the broadcast shape of the three inputs (the
    forward's shape when ``grad_y`` has it, as in a backward)."""
    shape = check("swiglu_backward_recompute", {"grad_y": grad_y, "a": a, "b": b})
    ops = [grad_y, a, b]
    return (empty_output(ops, shape, grad_dtype(a, shape), a.device),
            empty_output(ops, shape, grad_dtype(b, shape), a.device),
            empty_output(ops, shape, torch.result_type(a, b), a.device))


def silu(x: torch.Tensor) -> torch.Tensor:
    """Fake of ``silu``: x's shape, dtype and layout."""
    check("silu", {"x": x})
    return empty_output([x], x.shape, x.dtype, x.device)


def silu_backward(grad_y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Fake of ``silu_backward``: the broadcast shape in `grad_dtype` of x."""
    shape = check("silu_backward", {"grad_y": grad_y, "x": x})
    return empty_output([grad_y, x], shape, grad_dtype(x, shape), x.device)
