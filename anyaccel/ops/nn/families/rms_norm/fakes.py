"""Validating fakes of the RMSNorm ops: the checks of the kernels' wrappers, then empty outputs.

The checks (``check_*``) are shared with both implementations, so a bad call fails with the same error in
eager mode, under ``torch.compile`` and in ``opcheck``.
"""

from __future__ import annotations

import torch

from anyaccel.ops.nn import validation as v
from anyaccel.ops.nn.families.rms_norm.spec import CASTINGS


@v.memoized
def check_forward(op: str, x: torch.Tensor, weight: torch.Tensor | None, eps: float, casting: str,
                  residual: torch.Tensor | None = None) -> None:
    """The forward's argument rules.

    Raises:
        OpInputError: x (or residual, weight) is not a float tensor, tensors on different devices, x without
            dimensions or with an empty last dimension, weight not of shape ``[N]``, residual not shaped and
            typed like x, eps not a finite float >= 0, casting not one of ``"torch"``, ``"llama"``.
    """
    v.check_float(op, "x", x)
    v.check_min_dim(op, "x", x, 1)
    if x.shape[-1] == 0:
        raise v.OpInputError(f"{op}: x has shape {list(x.shape)}; accepted: a non-empty last dimension")
    v.check_same_device(op, {"x": x, "residual": residual, "weight": weight})
    if residual is not None:
        v.check_float(op, "residual", residual)
        v.check_shape(op, "residual", residual, x.shape, "the shape of x")
        if residual.dtype != x.dtype:
            raise v.OpInputError(f"{op}: residual has dtype {residual.dtype} but x has {x.dtype}; accepted: one "
                                 "dtype. Cast residual with .to(x.dtype)")
    if weight is not None:
        v.check_float(op, "weight", weight)
        v.check_shape(op, "weight", weight, (x.shape[-1],), "the last dimension of x")
    v.check_finite_nonneg(op, "eps", eps)
    v.check_choice(op, "casting", casting, CASTINGS)


def out_dtype(x: torch.Tensor, weight: torch.Tensor | None, casting: str) -> torch.dtype:
    """``x.dtype`` (casting="torch"), or ``promote(x, weight)`` (casting="llama", as LlamaRMSNorm)."""
    if casting == "llama" and weight is not None:
        return torch.promote_types(x.dtype, weight.dtype)
    return x.dtype


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float, casting: str
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake of ``rms_norm``: y (x's shape, see `out_dtype`) and rstd (fp32, ``x.shape[:-1]``)."""
    check_forward("rms_norm", x, weight, eps, casting)
    return (x.new_empty(x.shape, dtype=out_dtype(x, weight, casting)),
            x.new_empty(x.shape[:-1], dtype=torch.float32))


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float,
                       casting: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fake of ``fused_add_rms_norm``: y, h (x's dtype) and rstd."""
    check_forward("fused_add_rms_norm", x, weight, eps, casting, residual)
    return (x.new_empty(x.shape, dtype=out_dtype(x, weight, casting)), x.new_empty(x.shape),
            x.new_empty(x.shape[:-1], dtype=torch.float32))


@v.memoized
def check_backward(grad_y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor,
                   grad_residual: torch.Tensor | None, casting: str) -> None:
    """The backward's argument rules (shapes of the forward's outputs).

    Raises:
        OpInputError: as `check_forward`, or grad_y/grad_residual not shaped like x, rstd not
            ``x.shape[:-1]`` fp32.
    """
    op = "rms_norm_backward"
    check_forward(op, x, weight, 0.0, casting)
    v.check_float(op, "grad_y", grad_y)
    v.check_shape(op, "grad_y", grad_y, x.shape, "the shape of x")
    v.check_shape(op, "rstd", rstd, x.shape[:-1], "x.shape[:-1]")
    if rstd.dtype != torch.float32:
        raise v.OpInputError(f"{op}: rstd has dtype {rstd.dtype}; accepted: float32 (the forward's rstd)")
    if grad_residual is not None:
        v.check_float(op, "grad_residual", grad_residual)
        v.check_shape(op, "grad_residual", grad_residual, x.shape, "the shape of x")
    v.check_same_device(op, {"x": x, "grad_y": grad_y, "rstd": rstd, "grad_residual": grad_residual})


def rms_norm_backward(grad_y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor,
                      grad_residual: torch.Tensor | None, casting: str, weight_grad: bool
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake of ``rms_norm_backward``: grad of x (x's dtype and shape) and of weight (``[N]`` in weight's
    dtype when ``weight_grad`` and a weight is given, else empty)."""
    check_backward(grad_y, x, weight, rstd, grad_residual, casting)
    if weight_grad and weight is not None:
        dw = weight.new_empty(weight.shape)
    else:
        dw = x.new_empty((0,))
    return x.new_empty(x.shape), dw
