"""The validating fake of ``adam_step`` (schema in `anyaccel.ops.adam.spec`).

Registered by every build of the family for its namespace (with the build's device type bound), it runs
while ``torch.compile`` traces a call and for ``device="meta"`` tensors. The op mutates its lists in place
and returns nothing, so the fake computes nothing: it checks what the kernels check (the spec's scalar
ranges, then [`anyaccel.ops.validation.check_optimizer_lists`][anyaccel.ops.validation.check_optimizer_lists]), so a bad
call fails while tracing the
same way it fails at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyaccel.ops import validation


def adam_step(device_type: str, params: Sequence[Any], grads: Sequence[Any], exp_avgs: Sequence[Any],
              exp_avg_sqs: Sequence[Any], model_copies: Sequence[Any], step: int, lr: float, beta1: float,
              beta2: float, eps: float, weight_decay: float, bias_correction: bool, adamw_mode: bool) -> None:
    """Fake of ``adam_step``: validates like the kernels of ``device_type``, computes nothing.

    Raises:
        RuntimeError: a scalar outside its range or a bad list entry, named with its value and what is
            accepted.
    """
    from anyaccel.ops.adam.spec import SPEC

    fn = SPEC.function("adam_step")
    validation.check_scalars(fn, dict(step=step, lr=lr, beta1=beta1, beta2=beta2, eps=eps,
                                      weight_decay=weight_decay))
    validation.check_optimizer_lists("adam_step", params, grads, {"exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs},
                                     model_copies, [c.as_tuple() for c in SPEC.dtypes], device_type)


def adam_rollback_step(device_type: str, params: Sequence[Any], grads: Sequence[Any], exp_avgs: Sequence[Any],
                       exp_avg_sqs: Sequence[Any], model_copies: Sequence[Any], step: int, lr: float, beta1: float,
                       beta2: float, eps: float, weight_decay: float, bias_correction: bool,
                       adamw_mode: bool) -> None:
    """Fake of ``adam_rollback_step``: validates like the kernels of ``device_type``, computes nothing.

    Raises:
        RuntimeError: a scalar outside its range (``beta1`` and ``beta2`` must be in ``(0, 1)``: the rollback
            divides by them) or a bad list entry, named with its value and what is accepted.
    """
    from anyaccel.ops.adam.spec import SPEC

    fn = SPEC.function("adam_rollback_step")
    validation.check_scalars(fn, dict(step=step, lr=lr, beta1=beta1, beta2=beta2, eps=eps,
                                      weight_decay=weight_decay))
    validation.check_optimizer_lists("adam_rollback_step", params, grads,
                                     {"exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs}, model_copies,
                                     [c.as_tuple() for c in SPEC.dtypes], device_type)
