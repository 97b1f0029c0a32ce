"""The validating fake of ``lion_step`` (schema in `anyaccel.ops.lion.spec`); see
`anyaccel.ops.adam.fakes` for why fakes validate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyaccel.ops import validation


def lion_step(device_type: str, params: Sequence[Any], grads: Sequence[Any], exp_avgs: Sequence[Any],
              model_copies: Sequence[Any], lr: float, beta1: float, beta2: float, weight_decay: float) -> None:
    """Fake of ``lion_step``: validates like the kernels of ``device_type``, computes nothing.

    Raises:
        RuntimeError: a scalar outside its range or a bad list entry, named with its value and what is
            accepted.
    """
    from anyaccel.ops.lion.spec import SPEC

    validation.check_scalars(SPEC.function("lion_step"), dict(lr=lr, beta1=beta1, beta2=beta2,
                                                               weight_decay=weight_decay))
    validation.check_optimizer_lists("lion_step", params, grads, {"exp_avgs": exp_avgs}, model_copies,
                                     [c.as_tuple() for c in SPEC.dtypes], device_type)
