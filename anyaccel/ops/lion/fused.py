"""``FusedLion``: the Lion optimizer on GPU parameters, one multi-tensor kernel launch per dtype bucket.

Lion: Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms" (Algorithm 2). Argument names
follow DeepSpeed's ``deepspeed.ops.lion.FusedLion``. The kernel is the ``fused_lion`` op, chosen among its
implementations (CUDA C++, Triton) by :mod:`anyaccel.ops.dispatch`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from anyaccel.ops.fused_buckets import Bucket
from anyaccel.ops.fused_optimizer import FusedOptimizer

__all__ = ["FusedLion"]


class FusedLion(FusedOptimizer):
    """Lion for parameters on a GPU (CUDA, or XPU through Triton).

    Per element, in fp32::

        p = p * (1 - lr * weight_decay)
        p = p - lr * sign(beta1 * m + (1 - beta1) * g)
        m = beta2 * m + (1 - beta2) * g

    Storage: params fp32/bf16/fp16 with an fp32 ``exp_avg`` (or, with ``fp32_optimizer_states=False``,
    one in the 16-bit parameters' dtype); ``master_weights=True`` keeps fp32 masters for 16-bit
    parameters and writes the parameters from them in the same pass. The bucketing is cached between
    steps (:class:`~anyaccel.ops.fused_buckets.BucketPlanner`).

    Args:
        params: parameters or parameter-group dicts, contiguous, on a GPU.
        lr: learning rate, ``>= 0`` (Lion's is typically 3-10x smaller than AdamW's).
        betas: ``(beta1, beta2)`` in ``[0, 1]``.
        weight_decay: decoupled weight decay, ``>= 0``.
        set_grad_none: ``zero_grad()`` sets gradients to None.
        master_weights: fp32 master weights for 16-bit parameters.
        fp32_optimizer_states: keep ``exp_avg`` in fp32 for 16-bit parameters (default True).
        impl: force an implementation (``"cuda"``, ``"triton"``); else ``ANYACCEL_IMPL_FUSED_LION`` or the
            available one of highest priority.

    Raises:
        ValueError: a hyper-parameter is out of range.

    Side effects: the first ``step()`` loads the op (may compile).
    """

    _NAME: ClassVar[str] = "FusedLion"
    _OP: ClassVar[str] = "lion"
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ("exp_avg",)
    _COUNT_STEPS: ClassVar[bool] = False

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
        set_grad_none: bool = True,
        master_weights: bool = False,
        impl: str | None = None,
        fp32_optimizer_states: bool = True,
    ) -> None:
        checks = (
            ("lr", lr, lr >= 0.0, ">= 0"),
            ("weight_decay", weight_decay, weight_decay >= 0.0, ">= 0"),
            ("betas[0]", betas[0], 0.0 <= betas[0] <= 1.0, "in [0, 1]"),
            ("betas[1]", betas[1], 0.0 <= betas[1] <= 1.0, "in [0, 1]"),
        )
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay), checks, set_grad_none,
                         master_weights, fp32_optimizer_states, impl)

    def _step_bucket(self, op: Any, group: dict[str, Any], bucket: Bucket) -> None:
        """One ``lion_step`` launch (schema in docs/architecture.md); Lion uses no step count."""
        beta1, beta2 = group["betas"]
        op.lion_step(bucket.params, bucket.grads, bucket.states["exp_avg"], bucket.copies, float(group["lr"]),
                     float(beta1), float(beta2), float(group["weight_decay"]))
