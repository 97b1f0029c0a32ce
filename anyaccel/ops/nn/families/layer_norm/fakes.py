"""Validating fakes of the LayerNorm ops and the argument rules both implementations check."""

from __future__ import annotations

import torch

from anyaccel.ops.nn import validation as v
from anyaccel.ops.nn.errors import OpInputError


@v.memoized
def check_forward(op: str, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                  eps: float) -> None:
    """The forward's argument rules.

    Raises:
        OpInputError: x, weight or bias not a float tensor, on another device, x without a non-empty last
            dimension, weight/bias not ``[N]``, eps not a finite float >= 0.
    """
    v.check_float(op, "x", x)
    v.check_min_dim(op, "x", x, 1)
    if x.shape[-1] == 0:
        raise OpInputError(f"{op}: x has shape {list(x.shape)}; accepted: a non-empty last dimension")
    v.check_same_device(op, {"x": x, "weight": weight, "bias": bias})
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            v.check_float(op, name, t)
            v.check_shape(op, name, t, (x.shape[-1],), "the last dimension of x")
    v.check_finite_nonneg(op, "eps", eps)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fake of ``layer_norm``: y (x's shape and dtype), mean and rstd (fp32, ``x.shape[:-1]``)."""
    check_forward("layer_norm", x, weight, bias, eps)
    stat = x.new_empty(x.shape[:-1], dtype=torch.float32)
    return x.new_empty(x.shape), stat, torch.empty_like(stat)


@v.memoized
def check_backward(grad_y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
                   rstd: torch.Tensor) -> None:
    """The backward's argument rules.

    Raises:
        OpInputError: as `check_forward`, grad_y not shaped like x, mean/rstd not fp32 ``x.shape[:-1]``.
    """
    op = "layer_norm_backward"
    check_forward(op, x, weight, None, 0.0)
    v.check_float(op, "grad_y", grad_y)
    v.check_shape(op, "grad_y", grad_y, x.shape, "the shape of x")
    for name, t in (("mean", mean), ("rstd", rstd)):
        v.check_shape(op, name, t, x.shape[:-1], "x.shape[:-1]")
        if t.dtype != torch.float32:
            raise OpInputError(f"{op}: {name} has dtype {t.dtype}; accepted: float32 (the forward's {name})")
    v.check_same_device(op, {"x": x, "grad_y": grad_y, "mean": mean, "rstd": rstd})


def layer_norm_backward(grad_y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
                        rstd: torch.Tensor, weight_grad: bool, bias_grad: bool
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fake of ``layer_norm_backward``: dx (x's), dweight and dbias (``[N]``, weight's dtype, else x's; empty
    unless asked for)."""
    check_backward(grad_y, x, weight, mean, rstd)
    n = x.shape[-1]
    pdtype = weight.dtype if weight is not None else x.dtype
    dw = x.new_empty((n,) if weight_grad else (0,), dtype=pdtype)
    db = x.new_empty((n,) if bias_grad else (0,), dtype=pdtype)
    return x.new_empty(x.shape), dw, db
