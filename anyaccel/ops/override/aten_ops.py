"""The aten ops the override mode replaces, and how each maps onto anyaccel's model ops.

Each `AtenOverride` names an aten op (default overload), the op family that implements it, a
``describe`` that returns the call's policy key (`anyaccel.ops.override.policy.key`) when anyaccel's
kernel can produce exactly what aten would (same shapes, dtypes, strides), or None when it cannot (the call
then goes to aten whatever the policy says), and ``run``, the call through the family's ops.

Eligible calls: float32/bfloat16/float16 inputs of at least one element; softmax, log-softmax and their
backwards along any dimension with any strides (the outputs are contiguous, as aten's); the norms on contiguous
inputs reduced over their last dimension(s); ``half_to_float=True`` softmax and softmax backward with
``input_dtype`` different from the output's (the fp16-in, fp32-out form) go to aten: the family's ops return
their input's dtype. ``_fused_rms_norm`` (what ``torch.nn.functional.rms_norm`` calls on CUDA) is replaced
only where aten has a kernel for it on the dispatch key. ``nll_loss_forward`` / ``nll_loss_backward`` (what
``torch.nn.functional.cross_entropy`` and ``nll_loss`` run after ``log_softmax`` on ``[rows, C]`` or ``[C]``
log-probabilities) and ``nll_loss2d_forward`` / ``nll_loss2d_backward`` (``[N, C, H, W]``, what they run for
class-first inputs with spatial dimensions), with or without class weights, sum in fp32 whatever the input's
dtype; a target
outside ``[0, C)`` other than ``ignore_index`` fails there as in aten: ``TargetIndexError`` (an ``IndexError``)
on the CPU, a device-side assertion on a GPU (no synchronisation). ``cross_entropy_loss`` (registered on the
autograd key: it is a composite op) takes only float16/bfloat16 calls with label smoothing or probability
targets, the ones aten's composite sums in 16 bits; its other calls run aten's composite, whose
``_log_softmax`` and ``nll_loss_forward`` are replaced on their own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from anyaccel.ops.override.policy import key


@dataclass(frozen=True)
class AtenOverride:
    """One replaced aten op.

    Attributes:
        name: the aten op (``"_softmax"``; its default overload).
        family: the anyaccel op family implementing it.
        describe: args -> policy key, or None when the call must go to aten.
        run: (family ops, args) -> aten's return value.
        accurate: args -> whether the call needs anyaccel's fp32 accumulation (a 16-bit sum or mean that aten
            accumulates in 16 bits); such calls go to anyaccel in every policy but ``"never"``, whatever the
            speed tables say, and with the portable implementation too. None: the op has no accuracy route.
        key_prefix: prefixed to the device's dispatch key to name the key the kernel is registered on:
            ``"Autograd"`` for composite ops (``cross_entropy_loss`` has no backend kernel: its autograd comes
            from the ops it calls, so the replacement runs above autograd, as FlagGems registers it).
    """

    name: str
    family: str
    describe: Callable[[tuple[Any, ...]], str | None]
    run: Callable[[Any, tuple[Any, ...]], Any]
    accurate: Callable[[tuple[Any, ...]], bool] | None = None
    key_prefix: str = ""


_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _rows_cols(x: torch.Tensor, k: int) -> tuple[int, int]:
    cols = 1
    for s in x.shape[x.dim() - k:]:
        cols *= int(s)
    return (x.numel() // cols if cols else 0), cols


def _any_dim_ok(x: torch.Tensor, dim: int) -> bool:
    """A float tensor of at least one element with ``dim`` in range (any dimension, any strides)."""
    nd = max(x.dim(), 1)
    return x.dtype in _FLOATS and x.numel() > 0 and -nd <= dim < nd


def _reduced_key(op: str, x: torch.Tensor, dim: int) -> str:
    """The key of a reduction of ``x`` along ``dim``: rows = the other elements, cols = the reduced length."""
    n = int(x.shape[dim]) if x.dim() else 1
    return key(op, x.dtype, x.numel() // n, n)


def _softmax_key(op: str) -> Callable[[tuple[Any, ...]], str | None]:
    def describe(args: tuple[Any, ...]) -> str | None:
        x, dim, half_to_float = args
        if half_to_float or not _any_dim_ok(x, dim):
            return None
        return _reduced_key(op, x, dim)

    return describe


def _softmax_bwd_key(op: str) -> Callable[[tuple[Any, ...]], str | None]:
    def describe(args: tuple[Any, ...]) -> str | None:
        grad, out, dim, input_dtype = args
        if input_dtype != out.dtype or grad.dtype != out.dtype or grad.shape != out.shape \
                or not _any_dim_ok(out, dim):
            return None
        return _reduced_key(op, out, dim)

    return describe


def _norm_ok(x: torch.Tensor, normalized_shape: Sequence[int], params: Sequence[torch.Tensor | None]) -> bool:
    k = len(normalized_shape)
    return (x.dtype in _FLOATS and x.numel() > 0 and x.is_contiguous() and 0 < k <= x.dim()
            and all(p is None or (p.is_contiguous() and p.dtype in _FLOATS) for p in params))


def _stat_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype of aten's layer-norm statistics: the input's on the CPU, float32 for 16-bit inputs on
    accelerators (CUDA's acc_type)."""
    return x.dtype if x.device.type == "cpu" else torch.float32


def _ln_describe(args: tuple[Any, ...]) -> str | None:
    x, shape, w, b, _eps = args
    if not _norm_ok(x, shape, (w, b)):
        return None
    rows, cols = _rows_cols(x, len(shape))
    return key("native_layer_norm", x.dtype, rows, cols)


def _ln_run(ns: Any, args: tuple[Any, ...]) -> Any:
    x, shape, w, b, eps = args
    k = len(shape)
    rows, cols = _rows_cols(x, k)
    lead = tuple(x.shape[: x.dim() - k])
    y, mean, rstd = ns.layer_norm(x.view(*lead, cols), None if w is None else w.view(cols),
                                  None if b is None else b.view(cols), float(eps))
    stat = (*lead, *([1] * k))
    dt = _stat_dtype(x)
    return y.view(x.shape), mean.view(stat).to(dt), rstd.view(stat).to(dt)


def _ln_bwd_describe(args: tuple[Any, ...]) -> str | None:
    g, x, shape, mean, rstd, w, b, _mask = args
    if not _norm_ok(x, shape, (w, b)) or not g.is_contiguous() or g.dtype != x.dtype:
        return None
    rows, cols = _rows_cols(x, len(shape))
    return key("native_layer_norm_backward", x.dtype, rows, cols)


def _ln_bwd_run(ns: Any, args: tuple[Any, ...]) -> Any:
    g, x, shape, mean, rstd, w, b, mask = args
    k = len(shape)
    rows, cols = _rows_cols(x, k)
    lead = tuple(x.shape[: x.dim() - k])
    want_w, want_b = bool(mask[1]) and w is not None, bool(mask[2]) and b is not None
    dx, dw, db = ns.layer_norm_backward(g.view(*lead, cols), x.view(*lead, cols),
                                        None if w is None else w.view(cols), mean.reshape(lead).float(),
                                        rstd.reshape(lead).float(), want_w, want_b)
    return (dx.view(x.shape) if mask[0] else None, dw.view(w.shape) if want_w and w is not None else None,
            db.view(b.shape).to(b.dtype) if want_b and b is not None else None)


def _rms_describe(args: tuple[Any, ...]) -> str | None:
    x, shape, w, _eps = args
    if not _norm_ok(x, shape, (w,)):
        return None
    rows, cols = _rows_cols(x, len(shape))
    return key("_fused_rms_norm", x.dtype, rows, cols)


def _rms_run(ns: Any, args: tuple[Any, ...]) -> Any:
    x, shape, w, eps = args
    k = len(shape)
    rows, cols = _rows_cols(x, k)
    lead = tuple(x.shape[: x.dim() - k])
    e = float(eps) if eps is not None else float(torch.finfo(x.dtype).eps)
    y, rstd = ns.rms_norm(x.view(*lead, cols), None if w is None else w.view(cols), e, "torch")
    return y.view(x.shape), rstd.view(*lead, *([1] * k))


def _rms_bwd_describe(args: tuple[Any, ...]) -> str | None:
    g, x, shape, _rstd, w, _mask = args
    if not _norm_ok(x, shape, (w,)) or not g.is_contiguous() or g.dtype != x.dtype:
        return None
    rows, cols = _rows_cols(x, len(shape))
    return key("_fused_rms_norm_backward", x.dtype, rows, cols)


def _rms_bwd_run(ns: Any, args: tuple[Any, ...]) -> Any:
    g, x, shape, rstd, w, mask = args
    k = len(shape)
    rows, cols = _rows_cols(x, k)
    lead = tuple(x.shape[: x.dim() - k])
    want_w = bool(mask[1]) and w is not None
    dx, dw = ns.rms_norm_backward(g.view(*lead, cols), x.view(*lead, cols), None if w is None else w.view(cols),
                                  rstd.reshape(lead).float(), None, "torch", want_w)
    return (dx.view(x.shape) if mask[0] else None, dw.view(w.shape) if want_w and w is not None else None)


def _silu_describe(args: tuple[Any, ...]) -> str | None:
    (x,) = args
    if x.dtype not in _FLOATS or x.numel() == 0:
        return None
    return key("silu", x.dtype, 1, x.numel())


def _silu_bwd_describe(args: tuple[Any, ...]) -> str | None:
    g, x = args
    if x.dtype not in _FLOATS or g.dtype != x.dtype or g.shape != x.shape or x.numel() == 0:
        return None
    return key("silu_backward", x.dtype, 1, x.numel())


_INDEX = (torch.int64, torch.int32)


def _nll_ok(logp: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
            dims: tuple[int, ...]) -> bool:
    if logp.dtype not in _FLOATS or logp.dim() not in dims or logp.numel() == 0 or target.dtype not in _INDEX:
        return False
    want = (logp.shape[0], *logp.shape[2:]) if logp.dim() >= 2 else ()
    if tuple(target.shape) != tuple(want) or reduction not in (0, 1, 2):
        return False
    classes = logp.shape[1] if logp.dim() >= 2 else logp.shape[0]
    return weight is None or (weight.dtype in _FLOATS and tuple(weight.shape) == (classes,))


def _nll_key(op: str, logp: torch.Tensor) -> str:
    classes = int(logp.shape[1] if logp.dim() >= 2 else logp.shape[0])
    return key(op, logp.dtype, logp.numel() // classes, classes)


def _nll_describe(op: str, dims: tuple[int, ...]) -> Callable[[tuple[Any, ...]], str | None]:
    def describe(args: tuple[Any, ...]) -> str | None:
        logp, target, weight, reduction, _ignore = args
        return _nll_key(op, logp) if _nll_ok(logp, target, weight, reduction, dims) else None

    return describe


def _nll_bwd_describe(op: str, dims: tuple[int, ...]) -> Callable[[tuple[Any, ...]], str | None]:
    def describe(args: tuple[Any, ...]) -> str | None:
        grad, logp, target, weight, reduction, _ignore, total = args
        if not _nll_ok(logp, target, weight, reduction, dims) or grad.dtype not in _FLOATS \
                or total.dtype not in _FLOATS or tuple(grad.shape) != (tuple(target.shape) if reduction == 0 else ()):
            return None
        return _nll_key(op, logp)

    return describe


_HALF = (torch.bfloat16, torch.float16)


def _nll_accurate(args: tuple[Any, ...]) -> bool:
    """A 16-bit ``nll_loss`` mean (1) or sum (2): aten's CPU kernel accumulates it in 16 bits."""
    return bool(args[0].dtype in _HALF and int(args[3]) in (1, 2))


#: ``cross_entropy_loss``'s defaults after ``self`` and ``target`` (weight, reduction mean, ignore_index,
#: label_smoothing): the dispatcher leaves trailing arguments that equal their defaults out of the call.
_CE_DEFAULTS = (None, 1, -100, 0.0)


def _ce_loss_args(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return (*args, *_CE_DEFAULTS[len(args) - 2:])


def _ce_loss_describe(args: tuple[Any, ...]) -> str | None:
    """A 16-bit ``cross_entropy_loss`` with label smoothing or probability targets (the calls aten's composite
    sums in 16 bits); None for the rest, which aten's composite runs through ``_log_softmax`` and
    ``nll_loss_forward`` (replaced on their own)."""
    x, target, weight, _reduction, _ignore, smoothing = _ce_loss_args(args)
    if x.dtype not in _HALF or x.numel() == 0 or (weight is not None and weight.dtype != x.dtype):
        return None
    probabilities = target.is_floating_point()
    if (probabilities and target.dtype != x.dtype) or not (probabilities or float(smoothing) > 0):
        return None
    classes = int(x.shape[1] if x.dim() >= 2 else x.shape[0])
    return key("cross_entropy_loss", x.dtype, x.numel() // max(classes, 1), classes)


_REDUCTIONS = ("none", "mean", "sum")


def _ce_loss_run(_ns: Any, args: tuple[Any, ...]) -> Any:
    """torch's own ``cross_entropy`` on fp32 copies of the logits, weights and probability targets, rounded once
    to the input's dtype: torch's semantics (class dimension 1, ``ignore_index``, weights, label smoothing,
    probability targets), summed in fp32; autograd records the casts, so the gradient reaches the 16-bit
    input. Costs an fp32 copy of the logits (and of probability targets) per call."""
    x, target, weight, reduction, ignore_index, smoothing = _ce_loss_args(args)
    out = torch.nn.functional.cross_entropy(
        x.float(), target.float() if target.is_floating_point() else target,
        None if weight is None else weight.float(), ignore_index=int(ignore_index),
        reduction=_REDUCTIONS[int(reduction)], label_smoothing=float(smoothing))
    return out.to(x.dtype)


def _nll_run(ns: Any, a: tuple[Any, ...]) -> Any:
    return ns.nll_loss(a[0], a[1], a[2], int(a[3]), int(a[4]))


def _nll_bwd_run(ns: Any, a: tuple[Any, ...]) -> Any:
    return ns.nll_loss_backward(a[0], a[1], a[2], a[3], int(a[4]), int(a[5]), a[6])


#: Every op the mode can replace.
OVERRIDES: tuple[AtenOverride, ...] = (
    AtenOverride("_softmax", "softmax", _softmax_key("_softmax"), lambda ns, a: ns.softmax(a[0], a[1])),
    AtenOverride("_log_softmax", "softmax", _softmax_key("_log_softmax"), lambda ns, a: ns.log_softmax(a[0], a[1])),
    AtenOverride("_softmax_backward_data", "softmax", _softmax_bwd_key("_softmax_backward_data"),
                 lambda ns, a: ns.softmax_backward(a[0], a[1], a[2])),
    AtenOverride("_log_softmax_backward_data", "softmax", _softmax_bwd_key("_log_softmax_backward_data"),
                 lambda ns, a: ns.log_softmax_backward(a[0], a[1], a[2])),
    AtenOverride("native_layer_norm", "layer_norm", _ln_describe, _ln_run),
    AtenOverride("native_layer_norm_backward", "layer_norm", _ln_bwd_describe, _ln_bwd_run),
    AtenOverride("_fused_rms_norm", "rms_norm", _rms_describe, _rms_run),
    AtenOverride("_fused_rms_norm_backward", "rms_norm", _rms_bwd_describe, _rms_bwd_run),
    AtenOverride("silu", "swiglu", _silu_describe, lambda ns, a: ns.silu(a[0])),
    AtenOverride("silu_backward", "swiglu", _silu_bwd_describe, lambda ns, a: ns.silu_backward(a[0], a[1])),
    AtenOverride("nll_loss_forward", "cross_entropy", _nll_describe("nll_loss_forward", (1, 2)), _nll_run,
                 accurate=_nll_accurate),
    AtenOverride("nll_loss_backward", "cross_entropy", _nll_bwd_describe("nll_loss_backward", (1, 2)), _nll_bwd_run),
    AtenOverride("nll_loss2d_forward", "cross_entropy", _nll_describe("nll_loss2d_forward", (4,)), _nll_run,
                 accurate=_nll_accurate),
    AtenOverride("nll_loss2d_backward", "cross_entropy", _nll_bwd_describe("nll_loss2d_backward", (4,)),
                 _nll_bwd_run),
    AtenOverride("cross_entropy_loss", "cross_entropy", _ce_loss_describe, _ce_loss_run,
                 accurate=lambda _args: True, key_prefix="Autograd"),
)


def select(include: Sequence[str] | None, exclude: Sequence[str] | None) -> list[AtenOverride]:
    """The overrides named by ``include`` (aten op names or family names; all when None) minus ``exclude``.

    Raises:
        ValueError: a name that is neither an aten op of `OVERRIDES` nor a family (lists them).
    """
    names = {o.name for o in OVERRIDES} | {o.family for o in OVERRIDES}
    for n in [*(include or ()), *(exclude or ())]:
        if n not in names:
            raise ValueError(f"override: {n!r} is not an aten op or family the mode replaces; accepted: "
                             f"{', '.join(sorted(names))}")
    chosen = [o for o in OVERRIDES if include is None or o.name in include or o.family in include]
    return [o for o in chosen if not exclude or (o.name not in exclude and o.family not in exclude)]
