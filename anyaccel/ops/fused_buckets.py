"""Grouping of an optimizer's parameters into the lists one fused multi-tensor launch takes, cached per step.

A fused kernel launch needs tensors of one device and one dtype combination. :class:`BucketPlanner` walks a
parameter group and returns, per (device, param dtype, grad dtype, state dtype, model-copy dtype, step) key,
the parallel lists the ops take. The optimizers (:class:`anyaccel.ops.fused_adam.FusedAdam`,
:class:`anyaccel.ops.lion.FusedLion`) share it.

The grouping of a parameter group is the same step after step (same parameters with gradients, same
state tensors), so the planner caches it: a later step with the same parameters only collects the
gradients (``p.grad`` of each parameter, checked for dtype, layout and contiguity) and advances the step
counts. The per-parameter Python work of the first step (state creation, dict lookups, key building) is
not repeated, which keeps ``optimizer.step()`` on hundreds of tensors close to the op's own time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

LOW_PRECISION = frozenset({torch.bfloat16, torch.float16})


@dataclass
class Bucket:
    """The parallel tensor lists of one launch.

    Attributes:
        params: the tensors the kernel updates in place (the fp32 master weights in master-weight mode).
        grads: gradients, one per parameter (refreshed every step).
        states: one list per optimizer state name, all of one dtype (float32, or the 16-bit dtype of the
            parameters when the optimizer keeps state in the parameter dtype).
        copies: the model parameters written from the masters (empty without master weights).
        owners: the model parameters, one per entry (their ``.grad`` is read each step).
        step_states: the per-parameter state dicts whose ``"step"`` the bucket advances.
        grad_dtype: the gradients' dtype at planning time.
    """

    params: list[torch.Tensor] = field(default_factory=list)
    grads: list[torch.Tensor] = field(default_factory=list)
    states: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    copies: list[torch.Tensor] = field(default_factory=list)
    owners: list[torch.Tensor] = field(default_factory=list)
    step_states: list[dict[str, Any]] = field(default_factory=list)
    grad_dtype: torch.dtype | None = None

    @property
    def step(self) -> int:
        """The step count shared by every parameter of the bucket (0 when the optimizer counts none)."""
        return int(self.step_states[0].get("step", 0)) if self.step_states else 0


@dataclass
class _Plan:
    signature: tuple[int, ...]
    live: list[torch.Tensor]
    buckets: list[tuple[tuple, Bucket]]


class BucketPlanner:
    """Buckets parameter groups for fused launches and caches the result between steps.

    Args:
        state_names: the state tensors per parameter, e.g. ``("exp_avg", "exp_avg_sq")``.
        master_weights: keep fp32 master weights (``state["master"]``) for bf16/fp16 parameters and write
            the parameter from them in the same kernel pass.
        fp32_optimizer_states: keep state in float32; when False, 16-bit parameters without master weights
            keep state in their own dtype (as torch's fused AdamW does; fewer bytes per step, less
            accurate moments).
        op: the optimizer name for messages.
        count_steps: increment ``state["step"]`` of every parameter each step (its value joins the key, so
            one launch has one bias correction).
    """

    def __init__(self, state_names: tuple[str, ...], master_weights: bool, fp32_optimizer_states: bool, op: str,
                 count_steps: bool) -> None:
        self.state_names = state_names
        self.master_weights = master_weights
        self.fp32_optimizer_states = fp32_optimizer_states
        self.op = op
        self.count_steps = count_steps
        self._plans: dict[int, _Plan] = {}

    def clear(self) -> None:
        """Forget every cached plan (call after replacing state tensors, e.g. in ``load_state_dict``)."""
        self._plans.clear()

    def state_dtype(self, target: torch.Tensor) -> torch.dtype:
        """The dtype of the state of a parameter whose kernel-updated tensor is ``target``."""
        if self.fp32_optimizer_states or target.dtype not in LOW_PRECISION:
            return torch.float32
        return target.dtype

    def buckets(self, group_index: int, group: dict[str, Any], state: dict[torch.Tensor, dict[str, Any]]
                ) -> list[tuple[tuple, Bucket]]:
        """This step's buckets of ``group``, their gradients refreshed and step counts advanced.

        Args:
            group_index: the group's index in ``param_groups`` (the cache key).
            group: the parameter group (``group["params"]``).
            state: the optimizer's per-parameter state; missing entries are created (zeros for each state
                name, an fp32 ``master`` copy of 16-bit parameters when ``master_weights``, ``step`` 0).

        Returns:
            (key, bucket) pairs in first-seen order; key is (device, target dtype, grad dtype, state dtype,
            copy dtype or None, step).

        Raises:
            RuntimeError: a gradient is sparse.
            ValueError: a parameter is not contiguous or its gradient's shape differs.

        Side effects: allocates state on first use; increments ``state[p]["step"]`` when counting steps.
        """
        live = [p for p in group["params"] if p.grad is not None]
        signature = tuple(map(id, live))
        plan = self._plans.get(group_index)
        if plan is not None and plan.signature == signature and self._refresh(plan):
            return plan.buckets
        plan = self._plan(live, signature, state)
        self._plans[group_index] = plan
        return plan.buckets

    def _refresh(self, plan: _Plan) -> bool:
        """Collect the gradients into the cached buckets; False when one no longer fits the plan."""
        strided = torch.strided
        for _, b in plan.buckets:
            grads = [p.grad for p in b.owners]
            gd = b.grad_dtype
            for g in grads:
                if g.dtype != gd or g.layout != strided or not g.is_contiguous():
                    return False
            b.grads = grads
        if self.count_steps:
            for _, b in plan.buckets:
                for st in b.step_states:
                    st["step"] += 1
        return True

    def _plan(self, live: list[torch.Tensor], signature: tuple[int, ...], state: dict[torch.Tensor, dict[str, Any]]
              ) -> _Plan:
        by_key: dict[tuple, Bucket] = {}
        for p in live:
            g = p.grad
            if g.is_sparse:
                raise RuntimeError(f"{self.op} does not support sparse gradients; use torch.optim.SparseAdam")
            if g.shape != p.shape:
                raise ValueError(f"{self.op}: gradient of shape {tuple(g.shape)} for a parameter of shape "
                                 f"{tuple(p.shape)}")
            if not p.is_contiguous():
                raise ValueError(f"{self.op}: parameters must be contiguous; got a tensor with strides {p.stride()}")
            if not g.is_contiguous():
                g = g.contiguous()
            st = state.setdefault(p, {})
            if not st:
                st["step"] = 0
                if self.master_weights and p.dtype in LOW_PRECISION:
                    st["master"] = p.detach().to(torch.float32).contiguous()
                target = st.get("master", p)
                for name in self.state_names:
                    st[name] = torch.zeros(p.shape, dtype=self.state_dtype(target), device=p.device)
            if self.count_steps:
                st["step"] += 1
            master = st.get("master")
            target = master if master is not None else p
            key = (p.device, target.dtype, g.dtype, st[self.state_names[0]].dtype,
                   p.dtype if master is not None else None, st["step"] if self.count_steps else 0)
            b = by_key.setdefault(key, Bucket(states={n: [] for n in self.state_names}, grad_dtype=g.dtype))
            b.params.append(target)
            b.grads.append(g)
            b.owners.append(p)
            b.step_states.append(st)
            for name in self.state_names:
                b.states[name].append(st[name])
            if master is not None:
                b.copies.append(p)
        return _Plan(signature, live, list(by_key.items()))  # non-contiguous gradients fail _refresh: replanned
