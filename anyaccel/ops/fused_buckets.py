"""Grouping of an optimizer's parameters into the lists one fused multi-tensor launch takes.

A fused kernel launch needs tensors of one device and one dtype combination. :func:`bucket_params` walks
a parameter group and returns, per (device, param dtype, grad dtype, model-copy dtype, step) key, the
parallel lists the ops take. The optimizers (:class:`anyaccel.ops.fused_adam.FusedAdam`,
:class:`anyaccel.ops.lion.FusedLion`) share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

LOW_PRECISION = frozenset({torch.bfloat16, torch.float16})


@dataclass
class Bucket:
    """The parallel tensor lists of one launch.

    Attributes:
        params: the tensors the kernel updates in place (the fp32 master weights in master-weight mode).
        grads: gradients, one per parameter.
        states: one list per optimizer state name, float32 tensors.
        copies: the model parameters written from the masters (empty without master weights).
    """

    params: list[torch.Tensor] = field(default_factory=list)
    grads: list[torch.Tensor] = field(default_factory=list)
    states: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    copies: list[torch.Tensor] = field(default_factory=list)


def bucket_params(
    group: dict[str, Any],
    state: dict[torch.Tensor, dict[str, Any]],
    state_names: tuple[str, ...],
    master_weights: bool,
    op: str,
    step_of: Optional[Callable[[dict[str, Any]], int]] = None,
) -> dict[tuple, Bucket]:
    """Initialises missing state and buckets the group's parameters that have gradients.

    Args:
        group: an optimizer parameter group (``group["params"]``).
        state: the optimizer's per-parameter state dict; missing entries are created (float32 zeros for
            each of ``state_names``, an fp32 ``master`` copy of 16-bit parameters when ``master_weights``,
            ``step`` 0).
        state_names: the float32 state tensors per parameter (``("exp_avg", "exp_avg_sq")``).
        master_weights: keep fp32 master weights for bf16/fp16 parameters and write the parameter from
            them in the same kernel pass.
        op: the optimizer name for messages.
        step_of: when given, increments and returns the parameter's step (its value joins the key, so one
            launch has one bias correction).

    Returns:
        key -> bucket, in first-seen order.

    Raises:
        RuntimeError: a gradient is sparse.
        ValueError: a parameter is not contiguous or its gradient's shape differs.
    """
    buckets: dict[tuple, Bucket] = {}
    for p in group["params"]:
        if p.grad is None:
            continue
        g = p.grad
        if g.is_sparse:
            raise RuntimeError(f"{op} does not support sparse gradients; use torch.optim.SparseAdam")
        if g.shape != p.shape:
            raise ValueError(f"{op}: gradient of shape {tuple(g.shape)} for a parameter of shape {tuple(p.shape)}")
        if not p.is_contiguous():
            raise ValueError(f"{op}: parameters must be contiguous; got a tensor with strides {p.stride()}")
        if not g.is_contiguous():
            g = g.contiguous()
        st = state[p]
        if not st:
            st["step"] = 0
            for name in state_names:
                st[name] = torch.zeros(p.shape, dtype=torch.float32, device=p.device)
            if master_weights and p.dtype in LOW_PRECISION:
                st["master"] = p.detach().to(torch.float32).contiguous()
        step = step_of(st) if step_of is not None else 0
        master = st.get("master")
        target = master if master is not None else p
        copy_dtype = p.dtype if master is not None else None
        key = (p.device, target.dtype, g.dtype, copy_dtype, step)
        b = buckets.setdefault(key, Bucket(states={n: [] for n in state_names}))
        b.params.append(target)
        b.grads.append(g)
        for name in state_names:
            b.states[name].append(st[name])
        if master is not None:
            b.copies.append(p.data)
    return buckets
