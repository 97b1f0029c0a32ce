"""The validating fake of ``adagrad_step`` (schema in `anyaccel.ops.adagrad.spec`); see
`anyaccel.ops.adam.fakes` for why fakes validate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyaccel.ops import validation


def adagrad_step(device_type: str, params: Sequence[Any], grads: Sequence[Any], exp_avg_sqs: Sequence[Any],
                 model_copies: Sequence[Any], lr: float, eps: float, weight_decay: float) -> None:
    """Fake of ``adagrad_step``: validates like the kernels of ``device_type``, computes nothing.

    Raises:
        RuntimeError: a scalar outside its range or a bad list entry, named with its value and what is
            accepted.
    """
    from anyaccel.ops.adagrad.spec import SPEC

    validation.check_scalars(SPEC.function("adagrad_step"), dict(lr=lr, eps=eps, weight_decay=weight_decay))
    validation.check_optimizer_lists("adagrad_step", params, grads, {"exp_avg_sqs": exp_avg_sqs}, model_copies,
                                     [c.as_tuple() for c in SPEC.dtypes], device_type)
