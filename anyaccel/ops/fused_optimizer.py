"""``FusedOptimizer``: what anyaccel's device optimizers ``FusedAdam`` and ``FusedLion`` share.

Everything around the kernel call: the hyper-parameter range checks, the cached bucketing of parameters
into one launch per (device, dtype) bucket (:class:`~anyaccel.ops.fused_buckets.BucketPlanner`), the op
chosen per device type by :mod:`anyaccel.ops.dispatch`, DeepSpeed's ``set_grad_none``,
and a ``load_state_dict`` that forgets the cached bucketing. A subclass supplies data (``_NAME``, ``_OP``,
``_STATE_KEYS``, ``_COUNT_STEPS``) and one hook, :meth:`FusedOptimizer._step_bucket`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import torch

from anyaccel.ops import dispatch
from anyaccel.ops.fused_buckets import Bucket, BucketPlanner

__all__ = ["FusedOptimizer"]


class FusedOptimizer(torch.optim.Optimizer):
    """Base of optimizers whose step is one multi-tensor kernel launch per bucket of a parameter group.

    Subclasses set ``_NAME`` (first word of error messages), ``_OP`` (the op family the implementation loader
    knows, e.g. ``"adam"``), ``_STATE_KEYS`` (per-parameter state tensors) and ``_COUNT_STEPS``
    (whether state keeps a step count), and implement :meth:`_step_bucket`.

    Args:
        params: parameters or parameter-group dicts, contiguous, on a GPU device type.
        defaults: the group defaults (hyper-parameters), as for ``torch.optim.Optimizer``.
        checks: ``(name, value, ok, accepted)`` range checks run before anything else.
        set_grad_none: ``zero_grad()`` sets gradients to None (DeepSpeed's argument).
        master_weights: fp32 master weights for 16-bit parameters, written back in the same pass.
        fp32_optimizer_states: state in fp32 for 16-bit parameters (else in the parameter dtype).
        impl: force an implementation by name; else ``ANYACCEL_IMPL_<OP>`` or the highest available priority.

    Raises:
        ValueError: a check fails: ``"<_NAME>: <name>=<value> is invalid; it must be <accepted>"``.
    """

    _NAME: ClassVar[str]
    _OP: ClassVar[str]
    _STATE_KEYS: ClassVar[tuple[str, ...]]
    _COUNT_STEPS: ClassVar[bool]

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any],
                 checks: Sequence[tuple[str, float, bool, str]], set_grad_none: bool, master_weights: bool,
                 fp32_optimizer_states: bool, impl: str | None) -> None:
        for name, value, ok, accepted in checks:
            if not (ok and math.isfinite(value)):
                need = accepted if math.isfinite(value) else f"finite and {accepted}"
                raise ValueError(f"{self._NAME}: {name}={value!r} is invalid; it must be {need}")
        super().__init__(params, defaults)
        self.set_grad_none = set_grad_none
        self.master_weights = master_weights
        self.fp32_optimizer_states = fp32_optimizer_states
        self.impl = impl
        self._planner = BucketPlanner(self._STATE_KEYS, master_weights, fp32_optimizer_states, self._NAME,
                                      count_steps=self._COUNT_STEPS)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's ``load_state_dict``; also forgets the cached bucketing (the state tensors are new)."""
        super().load_state_dict(state_dict)
        self._planner.clear()

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """Clears gradients; to None when ``set_grad_none`` (or ``set_to_none``) is True."""
        super().zero_grad(set_to_none=self.set_grad_none if set_to_none is None else set_to_none)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One optimizer step over every parameter with a gradient: one launch per bucket.

        Args:
            closure: re-evaluates the model and returns the loss (run with gradients enabled).

        Returns:
            The closure's loss, or None.

        Raises:
            RuntimeError: sparse gradients; the op's errors (e.g. parameters on the CPU).
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for index, group in enumerate(self.param_groups):
            for (device, *_rest), bucket in self._planner.buckets(index, group, self.state):
                self._step_bucket(dispatch.load(self._OP, device.type, self.impl), group, bucket)
        return loss

    def _step_bucket(self, op: Any, group: dict[str, Any], bucket: Bucket) -> None:
        """Launch ``op`` once for ``bucket`` (tensors of one device and dtype combination) of ``group``."""
        raise NotImplementedError
