"""``FusedAdam``: Adam / AdamW on accelerator (or CPU) parameters, one multi-tensor launch per bucket.

Drop-in for DeepSpeed's ``deepspeed.ops.adam.FusedAdam`` (same argument names: ``adam_w_mode``,
``bias_correction``, ``set_grad_none``) computing what ``torch.optim.AdamW`` (``adam_w_mode=True``) or
``torch.optim.Adam`` (False) computes (https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html;
Kingma & Ba 2015; Loshchilov & Hutter 2019). The kernel is the ``adam`` family's implementation for the
parameters' device type (CUDA C++, Triton, SYCL, NPU, or the CPU SIMD kernel), chosen by
[`anyaccel.ops.dispatch`][anyaccel.ops.dispatch].
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from anyaccel.ops.adam.cpu import ADAM_HYPERS
from anyaccel.ops.optimizer.base import Hyper, ListOptimizer

__all__ = ["FusedAdam"]


class FusedAdam(ListOptimizer):
    """Adam / AdamW for parameters on an accelerator (CUDA, XPU, NPU) or the CPU.

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

    Many small tensors: the CUDA implementation keeps each bucket's validated tensor table on the device
    (``adam_plan``), so a step costs a few list operations per tensor on the host and one launch per bucket
    (see [`ListOptimizer`][anyaccel.ops.optimizer.ListOptimizer]). ``capturable=True`` keeps the step count and the
    learning rate on the device so a training step can be captured in a CUDA graph and replayed; pass the
    learning rate as a float32 device tensor and update it in place to schedule it under a graph.

    Args:
        params: parameters or parameter-group dicts, contiguous, fp32/bf16/fp16.
        lr: learning rate, finite ``>= 0`` (or a 0-dim tensor; on the device with ``capturable``).
        bias_correction: divide the moments by ``1 - beta**t``.
        betas: ``(beta1, beta2)`` in ``[0, 1)``.
        eps: added to the denominator, finite ``> 0``.
        adam_w_mode: decoupled (AdamW) weight decay; else L2 added to the gradient.
        weight_decay: finite ``>= 0``.
        amsgrad: must be False (not implemented, as in DeepSpeed's FusedAdam).
        set_grad_none: ``zero_grad()`` sets gradients to None (DeepSpeed's argument).
        master_weights: keep fp32 master weights for 16-bit parameters (see above).
        impl: force an implementation (``"cuda"``, ``"triton"`` or a registered one); else
            ``ANYACCEL_IMPL_ADAM`` or the available one of highest priority.
        fp32_optimizer_states: keep the moments in fp32 for 16-bit parameters (see above; DeepSpeed's
            CPUAdam argument name).
        capturable: step count and learning rate in device memory (CUDA graphs); needs the CUDA
            implementation.

    Raises:
        ValueError: a hyper-parameter is out of range (named with its value and range), or a parameter does
            not fit (dtype, contiguity, inference tensor).
        TypeError: a hyper-parameter has the wrong type.
        NotImplementedError: ``amsgrad=True``.

    Side effects: none at construction; the first ``step()`` loads the op (the CUDA implementation may
    compile, tens of seconds on a cold cache; Triton compiles per dtype combination on first call).
    """

    _NAME: ClassVar[str] = "FusedAdam"
    _FAMILY: ClassVar[str] = "adam"
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ("exp_avg", "exp_avg_sq")
    _HYPERS: ClassVar[tuple[Hyper, ...]] = ADAM_HYPERS + (Hyper("adam_w_mode", "adamw_mode", kind="bool"),)
    _KEY_ALIASES: ClassVar[dict[str, str]] = {"decoupled_weight_decay": "adam_w_mode", "adamw_mode": "adam_w_mode"}
    _FIXED: ClassVar[dict[str, Any]] = {"amsgrad": False}

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
        capturable: bool = False,
    ) -> None:
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay,
                        adam_w_mode=adam_w_mode, amsgrad=amsgrad)
        self.set_grad_none = set_grad_none
        super().__init__(params, defaults, master_weights=master_weights,
                         fp32_optimizer_states=fp32_optimizer_states, capturable=capturable, impl=impl)
        self.adam_w_mode = adam_w_mode  # DeepSpeed's attribute
