"""The model ops' front ends: ``anyaccel.ops.nn.families.rms_norm(x, weight)`` and friends.

Each front end picks the implementation for the inputs' device type (`anyaccel.ops.nn.implementations`:
``impl=`` argument, else ``ANYACCEL_IMPL_<FAMILY>``, else Triton on CUDA/XPU and the portable torch ops
elsewhere) and calls its torch op, which carries the autograd formula. Every front end works under
``torch.compile(fullgraph=True)`` without a graph break.
"""

from __future__ import annotations

import torch

from anyaccel.ops.nn import validation as v
from anyaccel.ops.nn.errors import OpInputError, UnsupportedOpError
from anyaccel.ops.nn.implementations import check_mode, ops, tracing

__all__ = [
    "cross_entropy", "fused_add_rms_norm", "fused_linear_cross_entropy", "layer_norm", "log_softmax", "rms_norm",
    "rope", "rope_qk", "silu", "softmax", "swiglu", "swiglu_linear",
]


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6, *, casting: str = "torch",
             impl: str | None = None, mode: str | None = None) -> torch.Tensor:
    """RMSNorm over the last dimension (Zhang & Sennrich 2019), computed in fp32.

    Args:
        x: ``[..., N]``, float32/bfloat16/float16, any strides.
        weight: ``[N]`` (any of the three float dtypes) or None.
        eps: added to the mean square, ``>= 0``.
        casting: ``"torch"`` (as ``torch.nn.functional.rms_norm``: one rounding, result in x's dtype) or
            ``"llama"`` (as Hugging Face ``LlamaRMSNorm``: rounds the normalised value to x's dtype before
            the weight; result in ``promote(x, weight)``).
        impl: force an implementation (``"triton"``, ``"torch"``, ``"triton_interpreter"``).
        mode: the callable form, picked by the caller once: ``"eager"`` or ``"compile"`` (for
            ``torch.compile``); None asks per call whether ``torch.compile`` traces (`anyaccel.ops.nn.implementations`).

    Returns:
        ``y``, x's shape, contiguous.

    Raises:
        OpInputError: bad dtype, device, shape, eps or casting (the message names the fix).
    """
    return ops("rms_norm", x.device.type, impl, mode).rms_norm(x, weight, float(eps), casting)[0]


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None,
                       eps: float = 1e-6, *, casting: str = "torch", impl: str | None = None,
                       mode: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``h = x + residual`` (rounded to x's dtype) and ``rms_norm(h)``, in one pass over memory.

    The functional form of vLLM's/FlagGems's in-place ``fused_add_rms_norm``: it returns new tensors, so
    autograd can differentiate it (the gradient of ``h`` is added to ``x``'s and ``residual``'s).

    Args:
        x: ``[..., N]``, float32/bfloat16/float16 (any strides).
        residual: x's shape and dtype (any strides).
        weight: as for [`rms_norm`][anyaccel.ops.nn.functional.rms_norm].
        eps: as for [`rms_norm`][anyaccel.ops.nn.functional.rms_norm].
        casting: as for [`rms_norm`][anyaccel.ops.nn.functional.rms_norm].
        impl: as for [`rms_norm`][anyaccel.ops.nn.functional.rms_norm].
        mode: the callable form, picked by the caller once: ``"eager"`` or ``"compile"`` (for
            ``torch.compile``); None asks per call whether ``torch.compile`` traces (`anyaccel.ops.nn.implementations`).

    Returns:
        ``(y, h)``: the normalised output and the new residual stream.

    Raises:
        OpInputError: as [`rms_norm`][anyaccel.ops.nn.functional.rms_norm], or residual of another shape or dtype.
    """
    y, h, _ = ops("rms_norm", x.device.type, impl, mode).fused_add_rms_norm(x, residual, weight, float(eps), casting)
    return y, h


def layer_norm(x: torch.Tensor, normalized_shape: int | list[int] | tuple[int, ...],
               weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = 1e-5, *,
               impl: str | None = None, mode: str | None = None) -> torch.Tensor:
    """LayerNorm over the trailing ``normalized_shape`` dimensions (as ``torch.nn.functional.layer_norm``).

    Args:
        x: ``[..., *normalized_shape]``, float32/bfloat16/float16.
        normalized_shape: the trailing dimensions normalised together (flattened into one row).
        weight: ``normalized_shape``-shaped, or None.
        bias: ``normalized_shape``-shaped, or None.
        eps: added to the variance, ``>= 0``.
        impl: force an implementation.
        mode: the callable form, picked by the caller once: ``"eager"`` or ``"compile"`` (for
            ``torch.compile``); None asks per call whether ``torch.compile`` traces (`anyaccel.ops.nn.implementations`).

    Returns:
        ``y``, x's shape and dtype, contiguous.

    Raises:
        OpInputError: x's trailing dimensions are not ``normalized_shape``, or a bad dtype/device/eps.
    """
    if type(normalized_shape) is int and x.dim() and x.shape[-1] == normalized_shape:  # the usual call, first
        return ops("layer_norm", x.device.type, impl, mode).layer_norm(x, weight, bias, float(eps))[0]
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or tuple(x.shape[x.dim() - k:]) != shape or x.dim() < k:
        raise OpInputError(f"layer_norm: normalized_shape={list(shape)} does not match the trailing dimensions "
                           f"of x {list(x.shape)}; accepted: a non-empty suffix of x's shape")
    n = 1
    for s in shape:
        n *= s
    xr = x.reshape(*x.shape[:x.dim() - k], n) if k > 1 else x
    w = weight.reshape(n) if weight is not None and k > 1 else weight
    b = bias.reshape(n) if bias is not None and k > 1 else bias
    y = ops("layer_norm", x.device.type, impl, mode).layer_norm(xr, w, b, float(eps))[0]
    return y.view(x.shape) if k > 1 else y


def softmax(x: torch.Tensor, dim: int = -1, *, dtype: torch.dtype | None = None,
            impl: str | None = None, mode: str | None = None) -> torch.Tensor:
    """Softmax along ``dim`` (as ``torch.softmax``), computed in fp32.

    Args:
        x: float32/bfloat16/float16, any strides.
        dim: the reduced dimension.
        dtype: cast x to this dtype first (torch's ``dtype=``).
        impl: force an implementation.
        mode: the callable form, picked by the caller once: ``"eager"`` or ``"compile"`` (for
            ``torch.compile``); None asks per call whether ``torch.compile`` traces (`anyaccel.ops.nn.implementations`).

    Returns:
        x's shape and dtype (or ``dtype``), contiguous.

    Raises:
        OpInputError: bad dtype or dim.
    """
    if dtype is not None:
        x = x.to(dtype)
    return ops("softmax", x.device.type, impl, mode).softmax(x, dim)


def log_softmax(x: torch.Tensor, dim: int = -1, *, dtype: torch.dtype | None = None,
                impl: str | None = None, mode: str | None = None) -> torch.Tensor:
    """Log-softmax along ``dim`` (as ``torch.log_softmax``); arguments as
    [`softmax`][anyaccel.ops.nn.functional.softmax] (``mode`` included)."""
    if dtype is not None:
        x = x.to(dtype)
    return ops("softmax", x.device.type, impl, mode).log_softmax(x, dim)


def swiglu(a: torch.Tensor, b: torch.Tensor, *, impl: str | None = None, mode: str | None = None) -> torch.Tensor:
    """``silu(a) * b`` (Shazeer 2020), broadcasting, computed in fp32 and rounded once.

    Args:
        a: the gate (``gate_proj(x)`` in Llama's MLP). b: the up projection. Float dtypes, any strides,
            broadcastable shapes.
        impl: force an implementation.
        mode: the callable form, picked by the caller once: ``"eager"`` or ``"compile"`` (for
            ``torch.compile``); None asks per call whether ``torch.compile`` traces (`anyaccel.ops.nn.implementations`).

    Returns:
        The broadcast shape in ``torch.result_type(a, b)``.

    Raises:
        OpInputError: bad dtype/device or shapes that do not broadcast.
    """
    return ops("swiglu", a.device.type, impl, mode).swiglu(a, b)


def swiglu_linear(a: torch.Tensor, b: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                  impl: str | None = None, mode: str | None = None) -> torch.Tensor:
    """``torch.nn.functional.linear(swiglu(a, b), weight, bias)`` (a Llama MLP's ``down_proj(act(gate) * up)``),
    keeping ``a`` and ``b`` for the backward and recomputing ``swiglu(a, b)`` there instead of keeping it.

    Saves ``a.numel()`` elements of activation memory per call against the unfused pair (Liger-Kernel's
    included). When the input and weight gradients are both needed, the backward recomputes the product in the
    pass that computes the input gradients (one more write, no extra read); otherwise in an element-wise pass
    of its own (`anyaccel.ops.nn.families.swiglu.linear`). Gradients are bit-identical either way.

    Args:
        a: the gate, ``[..., I]``, float32/bfloat16/float16.
        b: the up projection, ``a``'s shape and dtype.
        weight: ``[O, I]``, ``a``'s dtype.
        bias: ``[O]`` or None.
        impl: force the SwiGLU implementation.
        mode: the callable form, picked by the caller once: ``"eager"`` or ``"compile"`` (for
            ``torch.compile``); None asks per call whether ``torch.compile`` traces (`anyaccel.ops.nn.implementations`).

    Returns:
        ``[..., O]`` in ``a``'s dtype.

    Raises:
        OpInputError: ``a`` and ``b`` differ in shape or dtype, ``weight`` is not ``[O, I]`` of their
            dtype (the unfused [`swiglu`][anyaccel.ops.nn.functional.swiglu] broadcasts; this does not),
            ``bias`` is not ``[O]``, or the tensors are not on one device (a meta weight, such as one
            accelerate has offloaded, included).
    """
    if a.shape != b.shape or a.dtype != b.dtype:
        raise OpInputError(f"swiglu_linear: a {tuple(a.shape)} {a.dtype} and b {tuple(b.shape)} {b.dtype} must "
                           "have one shape and dtype; use swiglu() then linear() to broadcast")
    if weight.dim() != 2 or weight.shape[1] != a.shape[-1] or weight.dtype != a.dtype:
        raise OpInputError(f"swiglu_linear: weight {tuple(weight.shape)} {weight.dtype} must be [O, "
                           f"{a.shape[-1]}] of a's dtype {a.dtype}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise OpInputError(f"swiglu_linear: bias has shape {list(bias.shape)} and weight {list(weight.shape)}; "
                           f"accepted: bias of shape [{weight.shape[0]}] (one value per output, weight's rows) or "
                           "None")
    v.check_same_device("swiglu_linear", {"a": a, "b": b, "weight": weight, "bias": bias})
    from anyaccel.ops.nn.families.swiglu import linear

    check_mode(mode)
    if mode == "compile" or (mode is None and tracing()):
        return linear.compiled(a, b, weight, bias, impl)
    return linear.apply(a, b, weight, bias, impl)


def silu(x: torch.Tensor, *, impl: str | None = None, mode: str | None = None) -> torch.Tensor:
    """``x * sigmoid(x)`` (``torch.nn.functional.silu``), computed in fp32; ``impl`` and ``mode`` as for
    [`swiglu`][anyaccel.ops.nn.functional.swiglu]."""
    return ops("swiglu", x.device.type, impl, mode).silu(x)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = False,
         impl: str | None = None, mode: str | None = None) -> torch.Tensor:
    """Rotary position embedding of ``x`` (Su et al. 2021).

    Args:
        x: ``[..., D]`` (D even), e.g. ``[B, H, S, D]`` queries, any strides (kept in the output).
        cos: one value per pair, ``[..., D/2]``, or a Hugging Face table ``[..., D]`` whose halves repeat
            (``cat(freqs, freqs)``; interleaved: ``repeat_interleave(freqs, 2)``), of which the first half
            (interleaved: every other value) is used; broadcastable against ``x.shape[:-1]``.
        sin: like ``cos`` (the sines of the same angles).
        interleaved: pairs ``(x[2j], x[2j+1])`` (GPT-J/RoFormer) instead of ``(x[j], x[j + D/2])``
            (Llama/``rotate_half``).
        impl: force an implementation.
        mode: the callable form, picked by the caller once: ``"eager"`` or ``"compile"`` (for
            ``torch.compile``); None asks per call whether ``torch.compile`` traces (`anyaccel.ops.nn.implementations`).

    Returns:
        x rotated, x's shape, dtype and layout. No gradient flows into ``cos`` and ``sin``.

    Raises:
        OpInputError: odd D, or cos/sin of another size or not broadcastable.
    """
    cos, sin = _pair_tables(x, cos, sin, interleaved)
    return ops("rope", x.device.type, impl, mode).rope(x, cos, sin, bool(interleaved))


def rope_qk(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = False,
            impl: str | None = None, mode: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding of the queries and keys of one attention layer, in one kernel launch.

    ``rope(q, cos, sin), rope(k, cos, sin)`` with one op's host cost: Hugging Face's
    ``apply_rotary_pos_emb(q, k, cos, sin)`` (what [`anyaccel.ops.nn.patch`][anyaccel.ops.nn.hf_patch.patch] replaces it
    with), and
    Liger-Kernel's ``liger_rope``.

    Args:
        q: ``[..., D]`` (D even), e.g. ``[B, H, S, D]``, any strides (kept in the output).
        k: ``[..., D]``, same dtype rules, e.g. ``[B, H_kv, S, D]`` (fewer heads under grouped-query attention:
            the leading dimensions may differ from q's where the table broadcasts).
        cos: as for [`rope`][anyaccel.ops.nn.functional.rope], broadcastable against both ``q.shape[:-1]`` and
            ``k.shape[:-1]``.
        sin: like ``cos``.
        interleaved: as for [`rope`][anyaccel.ops.nn.functional.rope].
        impl: force an implementation.
        mode: the callable form, picked by the caller once: ``"eager"`` or ``"compile"`` (for
            ``torch.compile``); None asks per call whether ``torch.compile`` traces (`anyaccel.ops.nn.implementations`).

    Returns:
        ``(q_rotated, k_rotated)``, each with its input's shape, dtype and layout. No gradient flows into
        ``cos`` and ``sin``.

    Raises:
        OpInputError: as [`rope`][anyaccel.ops.nn.functional.rope] for either tensor (naming ``q`` or ``k``), or q and k
            on different
            devices.
    """
    cos, sin = _pair_tables(q, cos, sin, interleaved)
    return ops("rope", q.device.type, impl, mode).rope_qk(q, k, cos, sin, bool(interleaved))


def _pair_tables(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-pair ``[..., D/2]`` tables: a Hugging Face ``[..., D]`` table's first half (interleaved: every
    other value); other tables unchanged (the op checks them)."""
    d = x.shape[-1] if x.dim() else 0
    if cos.dim() and cos.shape[-1] == d and d % 2 == 0 and d > 0:
        cos = cos[..., 0::2] if interleaved else cos[..., : d // 2]
        sin = sin[..., 0::2] if interleaved else sin[..., : d // 2]
    return cos, sin


_REDUCTIONS = ("mean", "sum", "none")


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, *, ignore_index: int = -100,
                  label_smoothing: float = 0.0, reduction: str = "mean", impl: str | None = None,
                  mode: str | None = None) -> torch.Tensor:
    """Cross-entropy of ``logits [..., V]`` against class indices ``target [...]``, for large vocabularies.

    As ``torch.nn.functional.cross_entropy`` with the class dimension last (the language-model layout),
    without class weights; the log-softmax is never materialised (one pass over the logits forward, one
    backward).

    Args:
        logits: ``[..., V]`` float32/bfloat16/float16 (any row stride).
        target: ``logits.shape[:-1]``, int64/int32 in ``[0, V)`` or ``ignore_index``.
        ignore_index: rows with this target contribute nothing (and no gradient).
        label_smoothing: in ``[0, 1]`` (torch's definition).
        reduction: ``"mean"`` (over non-ignored rows), ``"sum"`` or ``"none"``.
        impl: force an implementation.
        mode: the callable form, picked by the caller once: ``"eager"`` or ``"compile"`` (for
            ``torch.compile``); None asks per call whether ``torch.compile`` traces (`anyaccel.ops.nn.implementations`).

    Returns:
        The loss in logits' dtype: 0-dim, or ``target``'s shape for ``"none"``.

    Raises:
        OpInputError: bad shapes, dtypes, label_smoothing or reduction.
        TargetIndexError: (an `IndexError`, as torch raises) a CPU target outside ``[0, V)`` other than
            ``ignore_index``; checked by both implementations. On a GPU the device asserts instead, as torch's
            CUDA kernels do, with no synchronisation (`anyaccel.ops.nn.families.cross_entropy.targets`).
    """
    v.check_choice("cross_entropy", "reduction", reduction, _REDUCTIONS)
    if logits.dim() < 1 or tuple(target.shape) != tuple(logits.shape[:-1]):
        raise OpInputError(f"cross_entropy: target has shape {list(target.shape)} and logits "
                           f"{list(logits.shape)}; accepted: target.shape == logits.shape[:-1] (class dimension "
                           "last)")
    vocab = logits.shape[-1]
    z = logits.reshape(-1, vocab) if logits.dim() != 2 else logits
    t = target.reshape(-1)
    loss, _ = ops("cross_entropy", logits.device.type, impl, mode).cross_entropy(z, t, int(ignore_index),
                                                                            float(label_smoothing))
    if reduction == "none":
        return loss.view(target.shape).to(logits.dtype)
    total = loss.sum()
    if reduction == "mean":
        total = total / (t != ignore_index).sum()
    return total.to(logits.dtype)


def fused_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                               bias: torch.Tensor | None = None, *, ignore_index: int = -100,
                               label_smoothing: float = 0.0, reduction: str = "mean",
                               accum_dtype: torch.dtype = torch.float32, impl: str | None = None,
                               mode: str | None = None) -> torch.Tensor:
    """``cross_entropy(hidden @ weight.T + bias, target)`` without materialising the logits.

    The rows are processed in chunks whose logits take about as much memory as ``hidden``; the gradients of
    hidden, weight and bias are computed in the same pass (Liger-Kernel's FusedLinearCrossEntropy), so peak
    memory drops from ``rows x V`` logits (and their fp32 copies and gradient) to one chunk plus the
    weight-gradient accumulator. The backward scales the saved gradients in place (eager; out of place under
    ``torch.compile``), so it allocates no second weight gradient.

    Args:
        hidden: ``[..., H]`` (the last hidden states), float32/bfloat16/float16.
        weight: ``[V, H]`` (the lm_head weight), hidden's dtype.
        target: ``hidden.shape[:-1]`` class indices or ``ignore_index``.
        bias: ``[V]`` or None.
        ignore_index: as [`cross_entropy`][anyaccel.ops.nn.functional.cross_entropy].
        label_smoothing: as [`cross_entropy`][anyaccel.ops.nn.functional.cross_entropy].
        reduction: ``"mean"`` or ``"sum"``.
        accum_dtype: the weight gradient's accumulation dtype when there are several chunks.
            ``torch.float32`` (default): an fp32 ``V x H`` accumulator, rounded once at the end (for a 16-bit
            weight, twice the weight's memory while the forward runs). The weight's dtype (Liger-Kernel's
            default): the gradient accumulates in place, no extra memory, one rounding per chunk.
        impl: force an implementation.
        mode: the callable form, picked by the caller once: ``"eager"`` or ``"compile"`` (for
            ``torch.compile``); None asks per call whether ``torch.compile`` traces (`anyaccel.ops.nn.implementations`).

    Returns:
        The loss, fp32, 0-dim.

    Raises:
        OpInputError: bad shapes, dtypes or arguments; ``accum_dtype`` neither float32 nor the weight's dtype.
        TargetIndexError: as [`cross_entropy`][anyaccel.ops.nn.functional.cross_entropy], with ``V`` the
            weight's rows.
        UnsupportedOpError: ``reduction="none"`` (per-row weights cannot be applied to a weight gradient
            accumulated in the forward; use [`cross_entropy`][anyaccel.ops.nn.functional.cross_entropy] on the logits);
            from the backward, a second
            backward over the same loss (``retain_graph=True``).
    """
    if reduction == "none":
        raise UnsupportedOpError("fused_linear_cross_entropy: reduction='none' is not supported (the weight "
                                 "gradient is accumulated during the forward for a scalar loss); accepted: "
                                 "'mean', 'sum'. Use cross_entropy(hidden @ weight.T, target, reduction='none')")
    if hidden.dim() < 1 or tuple(target.shape) != tuple(hidden.shape[:-1]):
        raise OpInputError(f"fused_linear_cross_entropy: target has shape {list(target.shape)} and hidden "
                           f"{list(hidden.shape)}; accepted: target.shape == hidden.shape[:-1]")
    h2 = hidden.reshape(-1, hidden.shape[-1]) if hidden.dim() != 2 else hidden
    t = target.reshape(-1)
    needs = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad or
                                         (bias is not None and bias.requires_grad))
    loss = ops("cross_entropy", hidden.device.type, impl, mode).fused_linear_cross_entropy(
        h2, weight, t, bias, int(ignore_index), float(label_smoothing), reduction, bool(needs), accum_dtype)[0]
    return loss
