"""Validating fake (meta) implementations for the host optimizer ops (``cpu_adam``, ``cpu_lion``).

A fake runs in two situations: while ``torch.compile`` traces a call, and when a caller passes
``device="meta"`` tensors, which the dispatcher routes to the fake instead of the CPU kernel. Both ops
mutate their tensor lists in place and return nothing, so the fake computes nothing; it checks what the
kernel checks that is visible on fake tensors (list lengths, device, layout, contiguity, shapes, dtypes,
hyper-parameters), so a bad call fails while tracing and a meta call is refused rather than silently
doing nothing (P17 in shared/reference/user-pains.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

#: (param dtype, optimizer-state dtype) pairs the host kernels accept (kCombos in csrc/adam/cpu_adam.cpp and
#: csrc/lion/cpu_lion.cpp); grads have the param dtype. Strings, so importing this module needs no torch.
ACCEPTED_COMBOS: frozenset[tuple[str, str]] = frozenset({
    ("torch.float32", "torch.float32"),
    ("torch.bfloat16", "torch.float32"),
    ("torch.float16", "torch.float32"),
    ("torch.bfloat16", "torch.bfloat16"),
    ("torch.float16", "torch.float16"),
})

#: The accelerator op each host op points to when given device tensors.
_DEVICE_ALTERNATIVE = {"adam_step": "FusedAdam", "lion_step": "FusedLion"}


def check_hyper_parameters(op: str, specs: Sequence[tuple[str, float, bool, str]]) -> None:
    """Raise for the first ``(name, value, ok, accepted)`` whose value is not finite or not ``ok``.

    Raises:
        RuntimeError: ``"<op>: <name>=<value> is invalid; accepted: <accepted>"``.
    """
    for name, value, ok, accepted in specs:
        if not (math.isfinite(value) and ok):
            raise RuntimeError(f"{op}: {name}={value} is invalid; accepted: {accepted}")


def check_host_tensor_lists(op: str, params: Sequence[Any], grads: Sequence[Any],
                            states: dict[str, Sequence[Any]]) -> None:
    """Check the tensor lists of a host optimizer op as its kernel does.

    Args:
        op: the op name for messages (``"adam_step"``).
        params, grads: equal-length lists of tensors; grads shaped and typed like their params.
        states: optimizer-state lists by name (``{"exp_avgs": [...], "exp_avg_sqs": [...]}``), each shaped
            like ``params``, each entry of one dtype among :data:`ACCEPTED_COMBOS` for its param.

    Raises:
        RuntimeError: naming the list, the index, the bad value and what is accepted.
    """
    import torch

    lists = {"params": params, "grads": grads, **states}
    lengths = ", ".join(f"{len(v)} {k}" for k, v in lists.items())
    if any(len(v) != len(params) for v in lists.values()):
        raise RuntimeError(f"{op}: got {lengths}; the lists must have one entry per parameter")
    for i, param in enumerate(params):
        for list_name, values in lists.items():
            t = values[i]
            if t.device.type != "cpu":
                raise RuntimeError(f"{op}: {list_name}[{i}] is on device {t.device}; the CPU kernel accepts CPU "
                                   f"tensors only (use {_DEVICE_ALTERNATIVE.get(op, 'the fused op')} for "
                                   "accelerator tensors, or move the tensor to the CPU)")
            if t.layout != torch.strided:
                raise RuntimeError(f"{op}: {list_name}[{i}] has layout {t.layout}; only dense (strided) tensors "
                                   "are accepted, sparse gradients are not supported")
            if not t.is_contiguous():
                raise RuntimeError(f"{op}: {list_name}[{i}] is not contiguous (sizes {list(t.shape)}, strides "
                                   f"{list(t.stride())}); pass contiguous tensors")
            if t.shape != param.shape:
                raise RuntimeError(f"{op}: {list_name}[{i}] has shape {list(t.shape)} but params[{i}] has shape "
                                   f"{list(param.shape)}; they must have the same shape")
        if grads[i].dtype != param.dtype:
            raise RuntimeError(f"{op}: grads[{i}] has dtype {grads[i].dtype} but params[{i}] has dtype "
                               f"{param.dtype}; a gradient must have its parameter's dtype")
        for list_name, values in states.items():
            if (str(param.dtype), str(values[i].dtype)) not in ACCEPTED_COMBOS:
                raise RuntimeError(f"{op}: params[{i}] has dtype {param.dtype} with {list_name}[{i}] of dtype "
                                   f"{values[i].dtype}, which is not supported. Accepted (param, state): "
                                   f"{sorted(ACCEPTED_COMBOS)}")


def adam_step_fake(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay,
                   bias_correction, adamw_mode) -> None:
    """Fake of ``adam_step`` (schema in docs/architecture.md): validates like the kernel, computes nothing.

    Raises:
        RuntimeError: a bad list entry or hyper-parameter, named with its value and what is accepted.
    """
    if step < 1:
        raise RuntimeError(f"adam_step: step={step} is invalid; accepted: step >= 1 (the 1-based number of this step)")
    check_hyper_parameters("adam_step", (
        ("lr", lr, lr >= 0.0, "a finite lr >= 0"),
        ("beta1", beta1, 0.0 <= beta1 < 1.0, "0 <= beta1 < 1"),
        ("beta2", beta2, 0.0 <= beta2 < 1.0, "0 <= beta2 < 1"),
        ("eps", eps, eps > 0.0, "a finite eps > 0"),
        ("weight_decay", weight_decay, weight_decay >= 0.0, "a finite weight_decay >= 0"),
    ))
    check_host_tensor_lists("adam_step", params, grads, {"exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs})


def lion_step_fake(params, grads, exp_avgs, lr, beta1, beta2, weight_decay) -> None:
    """Fake of ``lion_step`` (schema in docs/architecture.md): validates like the kernel, computes nothing.

    Raises:
        RuntimeError: a bad list entry or hyper-parameter, named with its value and what is accepted.
    """
    check_hyper_parameters("lion_step", (
        ("lr", lr, lr >= 0.0, "a finite lr >= 0"),
        ("beta1", beta1, 0.0 <= beta1 <= 1.0, "0 <= beta1 <= 1"),
        ("beta2", beta2, 0.0 <= beta2 <= 1.0, "0 <= beta2 <= 1"),
        ("weight_decay", weight_decay, weight_decay >= 0.0, "a finite weight_decay >= 0"),
    ))
    check_host_tensor_lists("lion_step", params, grads, {"exp_avgs": exp_avgs})
