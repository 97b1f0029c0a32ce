"""``FusedAdam``: Adam / AdamW on GPU parameters, one multi-tensor kernel launch per dtype bucket.

Drop-in for DeepSpeed's ``deepspeed.ops.adam.FusedAdam`` (same argument names: ``adam_w_mode``,
``bias_correction``, ``set_grad_none``) computing what ``torch.optim.AdamW`` (``adam_w_mode=True``) or
``torch.optim.Adam`` (False) computes (https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html;
Kingma & Ba 2015; Loshchilov & Hutter 2019). The kernel is the ``fused_adam`` op, chosen among its
implementations (CUDA C++, Triton) by :mod:`anyaccel.ops.dispatch`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from anyaccel.ops.fused_buckets import Bucket
from anyaccel.ops.fused_optimizer import FusedOptimizer

__all__ = ["FusedAdam"]


class FusedAdam(FusedOptimizer):
    """Adam / AdamW for parameters on a GPU (CUDA, or XPU through Triton).

    Per element, with ``t`` the parameter's step count (from 1)::

        g = grad + weight_decay * p            (adam_w_mode=False)
        p = p * (1 - lr * weight_decay)        (adam_w_mode=True)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        p = p - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

    (no ``1 - beta**t`` factors when ``bias_correction`` is False), computed in fp32.

    Storage: params fp32, bf16 or fp16. ``exp_avg``/``exp_avg_sq`` are fp32 (``fp32_optimizer_states=True``,
    the default: 22 bytes moved per bf16 parameter per step, the more accurate mode) or, for bf16/fp16
    parameters with ``fp32_optimizer_states=False``, in the parameter dtype as torch's fused AdamW keeps
    them (14 bytes per parameter; the moments are rounded to 8 mantissa bits each step). With
    ``master_weights=True``, bf16/fp16 parameters get an fp32 master copy (``state["master"]``, fp32
    state) that the kernel updates and then writes, rounded to nearest, into the parameter in the same
    pass (no separate cast kernel).

    The bucketing of parameters into launches is cached between steps (see
    :class:`~anyaccel.ops.fused_buckets.BucketPlanner`); replacing a state tensor by assignment rather than
    in place needs ``load_state_dict`` (which clears the cache).

    Args:
        params: parameters or parameter-group dicts, on one GPU device type, contiguous.
        lr: learning rate, ``>= 0``.
        bias_correction: divide the moments by ``1 - beta**t``.
        betas: ``(beta1, beta2)`` in ``[0, 1)``.
        eps: added to the denominator, ``>= 0``.
        adam_w_mode: decoupled (AdamW) weight decay; else L2 added to the gradient.
        weight_decay: ``>= 0``.
        amsgrad: must be False (not implemented, as in DeepSpeed's FusedAdam).
        set_grad_none: ``zero_grad()`` sets gradients to None (DeepSpeed's argument).
        master_weights: keep fp32 master weights for 16-bit parameters (see above).
        fp32_optimizer_states: keep the moments in fp32 for 16-bit parameters (see above; DeepSpeed's
            CPUAdam argument name).
        impl: force an implementation (``"cuda"``, ``"triton"`` or a registered one); else
            ``ANYACCEL_IMPL_FUSED_ADAM`` or the available one of highest priority.

    Raises:
        ValueError: a hyper-parameter is out of range (named with its value and range).
        NotImplementedError: ``amsgrad=True``.

    Side effects: none at construction; the first ``step()`` loads the op (the CUDA implementation may
    compile, tens of seconds on a cold cache; Triton compiles per dtype combination on first call).
    """

    _NAME: ClassVar[str] = "FusedAdam"
    _OP: ClassVar[str] = "adam"
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ("exp_avg", "exp_avg_sq")
    _COUNT_STEPS: ClassVar[bool] = True

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        adam_w_mode: bool = True,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        set_grad_none: bool = True,
        master_weights: bool = False,
        impl: str | None = None,
        fp32_optimizer_states: bool = True,
    ) -> None:
        if amsgrad:
            raise NotImplementedError("FusedAdam does not implement amsgrad; use torch.optim.AdamW(amsgrad=True)")
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay,
                        adam_w_mode=adam_w_mode)
        checks = (
            ("lr", lr, lr >= 0.0, ">= 0"),
            ("eps", eps, eps >= 0.0, ">= 0"),
            ("weight_decay", weight_decay, weight_decay >= 0.0, ">= 0"),
            ("betas[0]", betas[0], 0.0 <= betas[0] < 1.0, "in [0, 1)"),
            ("betas[1]", betas[1], 0.0 <= betas[1] < 1.0, "in [0, 1)"),
        )
        super().__init__(params, defaults, checks, set_grad_none, master_weights, fp32_optimizer_states, impl)

    def _step_bucket(self, op: Any, group: dict[str, Any], bucket: Bucket) -> None:
        """One ``adam_step`` launch (schema in docs/architecture.md) for the bucket's tensors."""
        beta1, beta2 = group["betas"]
        op.adam_step(bucket.params, bucket.grads, bucket.states["exp_avg"], bucket.states["exp_avg_sq"],
                     bucket.copies, bucket.step, float(group["lr"]), float(beta1), float(beta2),
                     float(group["eps"]), float(group["weight_decay"]), bool(group["bias_correction"]),
                     bool(group["adam_w_mode"]))
