"""One validation vocabulary for anyaccel's ops: scalar ranges and optimizer tensor lists.

The same rules run in three places, so a bad call fails the same way wherever it is caught:

- the C++ kernels (``csrc/includes/stable/checks.h``; the scalar ranges are generated from the op spec
  into each build's schema header, so the kernel and this module read one description);
- the validating fakes (meta implementations) registered for ``torch.compile`` and ``opcheck``;
- the Python front ends (``CPUAdam``, ``FusedAdam``, ...) before they mutate anything.

Messages follow one form: ``"<owner>: <what> is invalid; accepted: <rule>"`` for scalars and
``"<op>: <list>[<i>] <problem>; <fix>"`` for tensors. Scalar ranges are written as intervals
(``"[0, 1)"``, ``"(0, inf)"``): [`Interval`][anyaccel.spec.Interval] parses them; every value must also be
finite and, for ``float`` arguments, representable in float32 (the kernels compute in fp32: ``lr=1e39`` would
become inf).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from anyaccel.spec.intervals import Interval

#: The largest finite float32 (``torch.finfo(torch.float32).max``).
FLOAT32_MAX = 3.4028234663852886e38


def scalar_problem(name: str, value: Any, interval: Interval, kind: str = "float") -> str | None:
    """Why ``value`` is not an acceptable ``name``, or None when it is.

    Args:
        name: the argument name used in the rule (``"beta1"``).
        value: the value (a Python number; bools and tensors are refused).
        interval: the accepted range.
        kind: ``"float"`` (must also fit in float32) or ``"int"``.

    Returns:
        ``"accepted: a finite 0 <= beta1 < 1"``-style text, or None.
    """
    def rule() -> str:
        return f"a finite {interval.describe(name)}" + (" representable in float32" if kind == "float" else "")

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"accepted: {rule()} (a Python {kind}, got {type(value).__name__})"
    if not math.isfinite(value) or not interval.contains(value) or (kind == "float" and abs(value) > FLOAT32_MAX):
        return f"accepted: {rule()}"
    return None


def check_scalar(owner: str, name: str, value: Any, interval: str | Interval, kind: str = "float",
                 error: type[Exception] = ValueError) -> None:
    """Raise ``error`` unless ``value`` is an acceptable ``name``.

    Args:
        owner: the message prefix (``"adam_step"``, ``"CPUAdam"``).
        name: the argument name (``"lr"``, ``"betas[0]"``).
        value: the value.
        interval: the accepted range (an [`Interval`][anyaccel.spec.Interval] or its text).
        kind: ``"float"`` or ``"int"`` (see [`scalar_problem`][anyaccel.ops.validation.scalar_problem]).
        error: the exception class (``ValueError`` for front ends, ``RuntimeError`` where the kernel's
            ``STD_TORCH_CHECK`` would raise).

    Raises:
        error: ``"<owner>: <name>=<value> is invalid; accepted: ..."``.
    """
    iv = Interval.parse(interval) if isinstance(interval, str) else interval
    problem = scalar_problem(name, value, iv, kind)
    if problem is not None:
        raise error(f"{owner}: {name}={value!r} is invalid; {problem}")


def check_beta_pair(owner: str, betas: Any) -> None:
    """Raise ``ValueError`` unless ``betas`` is a pair (tuple or list of two numbers).

    Raises:
        ValueError: ``"<owner>: betas=<value> is invalid; accepted: a pair (beta1, beta2)"``.
    """
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ValueError(f"{owner}: betas={betas!r} is invalid; accepted: a pair (beta1, beta2) of Python floats")


def check_scalars(function: Any, values: Mapping[str, Any], error: type[Exception] = RuntimeError) -> None:
    """Check every ranged scalar of a spec function ([`anyaccel.spec.Function`][anyaccel.spec.Function]).

    Args:
        function: the spec function (its ``ranges`` and ``arguments``).
        values: argument name -> value.
        error: exception class.

    Raises:
        error: for the first value outside its range, in argument order.
    """
    kinds = {a.name: a.type for a in function.arguments}
    for name, interval in function.ranges:
        check_scalar(function.name, name, values[name], interval, "int" if kinds[name] == "int" else "float", error)


#: The accelerator optimizer each host op points to when given device tensors (and vice versa).
DEVICE_ALTERNATIVE = {"adam_step": "FusedAdam", "lion_step": "FusedLion", "adagrad_step": "FusedAdagrad",
                      "lamb_step": "FusedLamb"}


def check_optimizer_lists(op: str, params: Sequence[Any], grads: Sequence[Any], states: Mapping[str, Sequence[Any]],
                          model_copies: Sequence[Any], accepted: Sequence[tuple[str, str, str, str]],
                          device_type: str | Sequence[str], error: type[Exception] = RuntimeError) -> None:
    """Check the tensor lists of an element-wise optimizer op as its kernels do.

    The rules, in the kernels' order (``csrc/includes/stable/checks.h``): the lists have one entry per
    parameter (``model_copies`` none or one per parameter); then per parameter ``i``, for each list: the
    tensor is on ``device_type`` (and, for accelerator kernels, on ``params[0]``'s device), dense, contiguous
    and shaped like ``params[i]``; every state list has one dtype; and ``(params[i], grads[i], state,
    model_copies[i] or none)`` is an accepted combination.

    Args:
        op: the op name for messages (``"adam_step"``).
        params: the parameter list.
        grads: the gradient list.
        states: optimizer-state lists by name, in schema order (``{"exp_avgs": [...], ...}``).
        model_copies: empty, or the 16-bit model copies written from fp32 masters.
        accepted: the spec's dtype combinations as ``(param, grad, state, copy)`` dtype names.
        device_type: ``"cpu"`` for host kernels, ``"cuda"``/``"xpu"``/... for accelerator kernels, or a tuple
            of device types an implementation serves (Triton: ``("cuda", "xpu")``).
        error: exception class (the kernels raise ``RuntimeError``).

    Raises:
        error: naming the list, the index, the bad value and what is accepted.
    """
    n = len(params)
    lists: dict[str, Sequence[Any]] = {"params": params, "grads": grads, **states}
    if any(len(v) != n for v in lists.values()) or len(model_copies) not in (0, n):
        counts = ", ".join(f"{len(v)} {k}" for k, v in lists.items())
        raise error(f"{op}: got {counts} and {len(model_copies)} model_copies; grads and every state list need one "
                    "entry per parameter, model_copies none or one per parameter")
    if model_copies:
        lists["model_copies"] = model_copies
    allowed = (device_type,) if isinstance(device_type, str) else tuple(device_type)
    host = allowed == ("cpu",)
    accepted_set = set(accepted)
    first_device = params[0].device if n else None
    if not _all_fine(lists, params, grads, states, model_copies, allowed, host, first_device, accepted_set):
        _first_problem(op, lists, params, grads, states, model_copies, accepted, allowed, host, first_device,
                       accepted_set, error)
    check_no_overlap(op, params, grads, states, model_copies, error)


def _all_fine(lists: Mapping[str, Sequence[Any]], params: Sequence[Any], grads: Sequence[Any],
              states: Mapping[str, Sequence[Any]], model_copies: Sequence[Any], allowed: tuple[str, ...], host: bool,
              first_device: Any, accepted_set: set[tuple[str, str, str, str]]) -> bool:
    """The fast path of [`check_optimizer_lists`][anyaccel.ops.validation.check_optimizer_lists]: True when every rule
    holds (one pass, no message built).

    A call that fails any rule, or holds objects that are not tensors, returns False and is examined again by
    `_first_problem` in the kernels' order, for the exact message.
    """
    import torch

    if first_device is not None and first_device.type not in allowed:
        return False
    strided = torch.strided
    tensor = torch.Tensor
    columns = list(lists.values())
    state_columns = list(states.values())
    names = _dtype_names()
    for i, p in enumerate(params):
        shape = p.shape
        for values in columns:
            t = values[i]
            if not isinstance(t, tensor) or t.layout is not strided or t.shape != shape or not t.is_contiguous():
                return False
            d = t.device
            if (d.type not in allowed) if host else (d != first_device):
                return False
        state_dtype = state_columns[0][i].dtype if state_columns else None
        if any(column[i].dtype is not state_dtype for column in state_columns[1:]):
            return False
        combo = (names.get(p.dtype), names.get(grads[i].dtype), names.get(state_dtype) if state_columns else "none",
                 names.get(model_copies[i].dtype) if model_copies else "none")
        if combo not in accepted_set:
            return False
    return True


def _dtype_names() -> dict[Any, str]:
    """torch dtype -> ``"float32"``-style name (``_dtype``), for every dtype torch has."""
    global _DTYPE_NAMES
    if not _DTYPE_NAMES:
        import torch

        _DTYPE_NAMES = {v: _dtype(v) for v in vars(torch).values() if isinstance(v, torch.dtype)}
    return _DTYPE_NAMES


_DTYPE_NAMES: dict[Any, str] = {}


def _first_problem(op: str, lists: Mapping[str, Sequence[Any]], params: Sequence[Any], grads: Sequence[Any],
                   states: Mapping[str, Sequence[Any]], model_copies: Sequence[Any],
                   accepted: Sequence[tuple[str, str, str, str]], allowed: tuple[str, ...], host: bool,
                   first_device: Any, accepted_set: set[tuple[str, str, str, str]],
                   error: type[Exception]) -> None:
    """Raise for the first broken rule of [`check_optimizer_lists`][anyaccel.ops.validation.check_optimizer_lists], in
    the kernels' order."""
    for i, param in enumerate(params):
        for list_name, values in lists.items():
            t = values[i]
            where = f"{op}: {list_name}[{i}]"
            if t.device.type not in allowed or (not host and t.device != first_device):
                fix = (f"the CPU kernel takes CPU tensors (use {DEVICE_ALTERNATIVE.get(op, 'the fused optimizer')} "
                       "for accelerator tensors, or move the tensor to the CPU)") if host else (
                       f"every tensor of one call must be on {first_device} (params[0]'s device)"
                       if t.device.type in allowed else f"this kernel takes {' or '.join(allowed)} tensors")
                raise error(f"{where} is on device {t.device}; {fix}")
            if t.layout != _strided():
                raise error(f"{where} has layout {t.layout}; only dense (strided) tensors are accepted, sparse "
                            "gradients are not supported")
            if not t.is_contiguous():
                raise error(f"{where} is not contiguous (sizes {list(t.shape)}, strides {list(t.stride())}); pass "
                            "contiguous tensors (the kernel updates tensors in place, so a .contiguous() copy "
                            "would not be updated)")
            if t.shape != param.shape:
                raise error(f"{where} has shape {list(t.shape)} but params[{i}] has shape {list(param.shape)}; they "
                            "must have the same shape")
        state_dtypes = {name: values[i].dtype for name, values in states.items()}
        if len(set(state_dtypes.values())) > 1:
            detail = ", ".join(f"{k}[{i}] {_dtype(v)}" for k, v in state_dtypes.items())
            raise error(f"{op}: the optimizer states of params[{i}] have different dtypes ({detail}); every state "
                        "list must share one dtype")
        combo = (_dtype(param.dtype), _dtype(grads[i].dtype),
                 _dtype(next(iter(state_dtypes.values()))) if state_dtypes else "none",
                 _dtype(model_copies[i].dtype) if model_copies else "none")
        if combo not in accepted_set:
            raise error(f"{op}: params[{i}] has the dtype combination (param, grad, state, model_copy) = "
                        f"({', '.join(combo)}), which is not supported; accepted: "
                        + ", ".join("(" + ", ".join(c) + ")" for c in accepted))


def check_no_overlap(op: str, params: Sequence[Any], grads: Sequence[Any], states: Mapping[str, Sequence[Any]],
                     model_copies: Sequence[Any], error: type[Exception] = RuntimeError) -> None:
    """Raise when a written tensor of a call shares memory with another tensor of the call (as the kernels do).

    Written: params, every state list, model_copies; read: grads (which may share memory with each other).
    Byte ranges are compared after sorting by (start, list, index), so the message names the same pair as
    ``csrc/includes/stable/checks.h``'s ``check_no_overlap``. Tensors without real storage (meta, fake) are
    not checked (their aliasing is unknown until run).

    Raises:
        error: ``"<op>: <list>[i] and <list>[j] share memory (...)"``.
    """
    import torch

    lists: list[tuple[str, Sequence[Any]]] = [("params", params), ("grads", grads), *states.items()]
    if model_copies:
        lists.append(("model_copies", model_copies))
    first = params[0] if len(params) else None
    if first is None or not isinstance(first, torch.Tensor) or first.device.type == "meta" or _is_fake(first):
        return  # stand-ins, meta and fake tensors (torch.compile, opcheck) have no real addresses
    spans = []
    tensor = torch.Tensor
    for order, (name, values) in enumerate(lists):
        for i, t in enumerate(values):
            if not isinstance(t, tensor):
                return
            n = t.numel()
            if n == 0:
                continue
            try:
                start = t.data_ptr()
            except RuntimeError:  # a tensor without storage (functional wrappers) has no data pointer
                return
            if start == 0:
                return
            spans.append((start, order, i, start + n * t.element_size(), name))
    spans.sort()
    widest_any: tuple[int, str] | None = None
    widest_written: tuple[int, str] | None = None
    for start, order, i, end, name in spans:
        written = order != 1
        other = widest_any if written else widest_written
        if other is not None and start < other[0]:
            raise error(f"{op}: {name}[{i}] and {other[1]} share memory (the same tensor twice, or overlapping views "
                        "of one storage); updating them in one call is a data race. Pass each tensor once, each with "
                        "its own storage")
        if widest_any is None or end > widest_any[0]:
            widest_any = (end, f"{name}[{i}]")
        if written and (widest_written is None or end > widest_written[0]):
            widest_written = (end, f"{name}[{i}]")


def _is_fake(t: Any) -> bool:
    from anyaccel._compat.fake_tensor import is_fake

    return is_fake(t)


def _strided() -> Any:
    import torch

    return torch.strided


def _dtype(dtype: Any) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).removeprefix("torch.")
