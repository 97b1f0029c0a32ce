"""Validating fakes of the plan functions of the fused GPU optimizers (``adam_plan``, ``adam_step_planned``, ...).

A plan (see ``csrc/includes/cuda/multi_tensor_apply.cuh``) is the validated table of one dtype combination's
tensors, kept on the device between steps; a planned step launches from it with no tensor list. These
fakes let ``torch.compile`` and ``opcheck`` trace the functions: the plan's fake validates the lists like
``<family>_step``'s fake and returns an int64 tensor of the plan's size; the planned steps' fakes check the
plan tensor and the device scalars (their scalar ranges are checked by the spec's generated checks and by
[`anyaccel.ops.validation.check_scalars`][anyaccel.ops.validation.check_scalars] in the front ends).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from anyaccel.spec.schema import DtypeCombo

#: Words of a plan's header and of one tensor's row (plus its index), as in multi_tensor_apply.cuh.
PLAN_HEADER = 4
ROW_WORDS = 8


def plan_size(count: int) -> int:
    """The number of int64 words of a plan of ``count`` tensors."""
    return PLAN_HEADER + count * (ROW_WORDS + 1)


def make_plan_fake(op: str, state_names: Sequence[str], dtypes: Sequence[DtypeCombo]) -> Callable[..., Any]:
    """The fake of ``<family>_plan`` (``op``) for a family with the given state lists.

    The fake validates like the step's kernels and returns an int64 tensor of the plan's size; it raises
    ``RuntimeError`` for a bad list entry
    ([`anyaccel.ops.validation.check_optimizer_lists`][anyaccel.ops.validation.check_optimizer_lists]) or tensors of
    more than one dtype combination, with the kernels' words.

    Args:
        op: the plan function's name (``"adam_plan"``).
        state_names: the names of the family's optimizer-state lists, in schema order.
        dtypes: the family's accepted dtype combinations (its spec's ``dtypes``).
    """
    accepted = [c.as_tuple() for c in dtypes]

    def plan_fake(device_type: str | Sequence[str], params: Sequence[Any], grads: Sequence[Any],
                  *states_and_copies: Sequence[Any]) -> Any:
        import torch

        from anyaccel.ops import validation

        *states, copies = states_and_copies
        if not params:
            raise RuntimeError(f"{op}: params is empty; pass at least one tensor")
        validation.check_optimizer_lists(op, params, grads, dict(zip(state_names, states, strict=True)), copies,
                                         accepted, device_type)
        combos = {(p.dtype, g.dtype, states[0][i].dtype, copies[i].dtype if copies else None)
                  for i, (p, g) in enumerate(zip(params, grads, strict=True)) if p.numel() > 0}
        if len(combos) != 1:
            raise RuntimeError(f"{op}: a plan covers tensors of one dtype combination with at least one element; "
                               f"got {len(combos)} combinations (group the tensors by dtype, as anyaccel's fused "
                               "optimizers do)")
        count = sum(1 for p in params if p.numel() > 0)
        return torch.empty(plan_size(count), dtype=torch.int64, device=params[0].device)

    plan_fake.__name__ = f"{op}_fake"
    return plan_fake


def planned_fake(device_type: str | Sequence[str], plan: Any, combo: int, count: int, chunks: int, *rest: Any) -> None:
    """Fake of ``<family>_step_planned[_capturable]``: checks the plan tensor against ``count``.

    Raises:
        RuntimeError: ``plan`` is not a contiguous int64 tensor of ``plan_size(count)`` words.
    """
    import torch

    if plan.dtype != torch.int64 or plan.numel() != plan_size(count) or not plan.is_contiguous():
        raise RuntimeError(f"planned step: plan, combo, count and chunks must be those of one plan built by the "
                           f"op's _plan function; got a {plan.dtype} tensor of {plan.numel()} elements for count "
                           f"{count}")
