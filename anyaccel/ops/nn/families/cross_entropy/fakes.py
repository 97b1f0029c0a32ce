"""Validating fakes of the cross-entropy ops and the argument rules both implementations check."""

from __future__ import annotations

import torch

from anyaccel.ops.nn import validation as v
from anyaccel.ops.nn.errors import OpInputError
from anyaccel.ops.nn.families.cross_entropy.spec import FUSED_REDUCTIONS, NLL_REDUCTIONS


def check_target(op: str, target: torch.Tensor, rows: int, device: torch.device) -> None:
    """Raise unless ``target`` is an integer ``[rows]`` tensor on ``device``.

    Raises:
        OpInputError: with the target's dtype, shape or device.
    """
    if target.dtype not in (torch.int64, torch.int32):
        raise OpInputError(f"{op}: target has dtype {target.dtype}; accepted: int64 or int32 class indices. "
                           "Cast it with .long()")
    v.check_shape(op, "target", target, (rows,), "one class index per row")
    if target.device != device:
        raise OpInputError(f"{op}: target is on {target.device} but the logits are on {device}; move it with "
                           f".to({str(device)!r})")


def check_logits(op: str, logits: torch.Tensor, target: torch.Tensor, label_smoothing: float) -> None:
    """The rules of ``cross_entropy``'s arguments.

    Raises:
        OpInputError: logits not a float ``[rows, V]`` tensor with V >= 1, a bad target, label_smoothing
            outside [0, 1].
    """
    v.check_float(op, "logits", logits)
    if logits.dim() != 2 or logits.shape[1] == 0:
        raise OpInputError(f"{op}: logits has shape {list(logits.shape)}; accepted: [rows, V] with V >= 1 (the "
                           "front end flattens leading dimensions)")
    check_target(op, target, logits.shape[0], logits.device)
    v.check_finite_nonneg(op, "label_smoothing", label_smoothing, 1.0)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int, label_smoothing: float
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake of ``cross_entropy``: loss and lse, fp32 ``[rows]``."""
    check_logits("cross_entropy", logits, target, label_smoothing)
    rows = logits.shape[0]
    return logits.new_empty((rows,), dtype=torch.float32), logits.new_empty((rows,), dtype=torch.float32)


def check_backward(grad_loss: torch.Tensor, logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor,
                   label_smoothing: float) -> None:
    """The rules of ``cross_entropy_backward``'s arguments.

    Raises:
        OpInputError: as `check_logits`, or grad_loss/lse not float ``[rows]``.
    """
    op = "cross_entropy_backward"
    check_logits(op, logits, target, label_smoothing)
    for name, t in (("grad_loss", grad_loss), ("lse", lse)):
        v.check_float(op, name, t)
        v.check_shape(op, name, t, (logits.shape[0],), "one value per row")
    v.check_same_device(op, {"logits": logits, "grad_loss": grad_loss, "lse": lse})


def cross_entropy_backward(grad_loss: torch.Tensor, logits: torch.Tensor, target: torch.Tensor,
                           lse: torch.Tensor, ignore_index: int, label_smoothing: float) -> torch.Tensor:
    """Fake of ``cross_entropy_backward``: logits' shape and dtype."""
    check_backward(grad_loss, logits, target, lse, label_smoothing)
    return logits.new_empty(logits.shape)


def check_fused(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None,
                label_smoothing: float, reduction: str, accum_dtype: torch.dtype) -> None:
    """The rules of ``fused_linear_cross_entropy``'s arguments.

    Raises:
        OpInputError: hidden not float ``[rows, H]``, weight not ``[V, H]`` of hidden's dtype, bias not
            ``[V]``, a bad target, label_smoothing outside [0, 1], reduction not ``"mean"``/``"sum"``,
            accum_dtype neither float32 nor the weight's dtype.
    """
    op = "fused_linear_cross_entropy"
    v.check_float(op, "hidden", hidden)
    v.check_float(op, "weight", weight)
    if hidden.dim() != 2:
        raise OpInputError(f"{op}: hidden has shape {list(hidden.shape)}; accepted: [rows, H]")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[1] or weight.shape[0] == 0:
        raise OpInputError(f"{op}: weight has shape {list(weight.shape)}; accepted: [V, {hidden.shape[1]}] with "
                           "V >= 1 (the lm_head weight, one row per class)")
    if weight.dtype != hidden.dtype:
        raise OpInputError(f"{op}: weight has dtype {weight.dtype} but hidden has {hidden.dtype}; accepted: one "
                           "dtype (as for torch.nn.functional.linear)")
    v.check_same_device(op, {"hidden": hidden, "weight": weight, "bias": bias})
    if bias is not None:
        v.check_float(op, "bias", bias)
        v.check_shape(op, "bias", bias, (weight.shape[0],), "one value per class")
    check_target(op, target, hidden.shape[0], hidden.device)
    v.check_finite_nonneg(op, "label_smoothing", label_smoothing, 1.0)
    v.check_choice(op, "reduction", reduction, FUSED_REDUCTIONS)
    if accum_dtype not in (torch.float32, weight.dtype):
        raise OpInputError(f"{op}: accum_dtype={accum_dtype} is not accepted for a {weight.dtype} weight; accepted: "
                           f"torch.float32 (exact accumulation, an fp32 V x H buffer) or {weight.dtype} (the "
                           "gradient itself accumulates, rounding once per chunk)")


def fused_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                               bias: torch.Tensor | None, ignore_index: int, label_smoothing: float, reduction: str,
                               compute_grad: bool, accum_dtype: torch.dtype
                               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fake of ``fused_linear_cross_entropy``: the loss (fp32, 0-dim) and the gradients of hidden, weight and
    bias in their dtypes (empty when ``compute_grad`` is False, or for an absent bias)."""
    check_fused(hidden, weight, target, bias, label_smoothing, reduction, accum_dtype)
    loss = hidden.new_empty((), dtype=torch.float32)
    if not compute_grad:
        e = hidden.new_empty((0,))
        return loss, e, torch.empty_like(e), torch.empty_like(e)
    gb = bias.new_empty(bias.shape) if bias is not None else hidden.new_empty((0,))
    return loss, hidden.new_empty(hidden.shape), weight.new_empty(weight.shape), gb


def check_nll(op: str, logp: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
              reduction: int) -> None:
    """The rules of ``nll_loss``'s arguments (aten's ``nll_loss_forward`` and ``nll_loss2d_forward``).

    Raises:
        OpInputError: logp not a float ``[N, C, d...]`` or ``[C]`` tensor with C >= 1, target not integer class
            indices ``[N, d...]`` (0-dim for a 1-D logp) on logp's device, weight not a float ``[C]`` tensor on
            logp's device, reduction not 0 (none), 1 (mean) or 2 (sum).
    """
    v.check_float(op, "logp", logp)
    if logp.dim() == 0 or (logp.dim() == 1 and logp.shape[0] == 0) or (logp.dim() >= 2 and logp.shape[1] == 0):
        raise OpInputError(f"{op}: logp has shape {list(logp.shape)}; accepted: [N, C, d...] or [C] with C >= 1 "
                           "(log-probabilities, classes in dimension 1)")
    if target.dtype not in (torch.int64, torch.int32):
        raise OpInputError(f"{op}: target has dtype {target.dtype}; accepted: int64 or int32 class indices. "
                           "Cast it with .long()")
    want = (logp.shape[0], *logp.shape[2:]) if logp.dim() >= 2 else ()
    v.check_shape(op, "target", target, want, "logp's shape without the class dimension")
    v.check_same_device(op, {"logp": logp, "target": target, "weight": weight})
    if weight is not None:
        v.check_float(op, "weight", weight)
        classes = logp.shape[1] if logp.dim() >= 2 else logp.shape[0]
        v.check_shape(op, "weight", weight, (classes,), "one weight per class")
    v.check_choice(op, "reduction", reduction, NLL_REDUCTIONS)


def nll_loss(logp: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
             ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake of ``nll_loss``: the loss (logp's dtype; target's shape for reduction 0, else 0-dim) and the total
    weight (0-dim, logp's dtype)."""
    check_nll("nll_loss", logp, target, weight, reduction)
    shape = tuple(target.shape) if reduction == 0 else ()
    return logp.new_empty(shape), logp.new_empty(())


def nll_loss_backward(grad_output: torch.Tensor, logp: torch.Tensor, target: torch.Tensor,
                      weight: torch.Tensor | None, reduction: int, ignore_index: int,
                      total_weight: torch.Tensor) -> torch.Tensor:
    """Fake of ``nll_loss_backward``: logp's shape and dtype."""
    check_nll("nll_loss_backward", logp, target, weight, reduction)
    v.check_float("nll_loss_backward", "grad_output", grad_output)
    return logp.new_empty(logp.shape)
