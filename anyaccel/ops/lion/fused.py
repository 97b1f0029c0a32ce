"""``FusedLion``: the Lion optimizer on GPU parameters, one multi-tensor kernel launch per dtype bucket.

Lion: Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms" (Algorithm 2). Argument names
follow DeepSpeed's ``deepspeed.ops.lion.FusedLion``. The kernel is the ``fused_lion`` op, chosen among its
implementations (CUDA C++, Triton) by [`anyaccel.ops.dispatch`][anyaccel.ops.dispatch].
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from anyaccel.ops.lion.cpu import LION_HYPERS
from anyaccel.ops.optimizer.base import Hyper, ListOptimizer

__all__ = ["FusedLion"]


class FusedLion(ListOptimizer):
    """Lion for parameters on an accelerator (CUDA, XPU, NPU) or the CPU.

    Per element, in fp32::

        p = p * (1 - lr * weight_decay)
        p = p - lr * sign(beta1 * m + (1 - beta1) * g)
        m = beta2 * m + (1 - beta2) * g

    Storage: params fp32/bf16/fp16 with an fp32 ``exp_avg`` (or, with ``fp32_optimizer_states=False``,
    one in the 16-bit parameters' dtype); ``master_weights=True`` keeps fp32 masters for 16-bit
    parameters and writes the parameters from them in the same pass. The step's plan is cached and, on
    CUDA, kept on the device ([`ListOptimizer`][anyaccel.ops.optimizer.ListOptimizer]); ``capturable=True`` reads the
    learning rate from device memory (CUDA graphs).

    Args:
        params: parameters or parameter-group dicts, contiguous, fp32/bf16/fp16.
        lr: learning rate, finite ``>= 0`` (Lion's is typically 3-10x smaller than AdamW's).
        betas: ``(beta1, beta2)`` in ``[0, 1]``.
        weight_decay: decoupled weight decay, finite ``>= 0``.
        set_grad_none: ``zero_grad()`` sets gradients to None.
        master_weights: fp32 master weights for 16-bit parameters.
        impl: force an implementation (``"cuda"``, ``"triton"``); else ``ANYACCEL_IMPL_LION`` or the available
            one of highest priority.
        fp32_optimizer_states: keep ``exp_avg`` in fp32 for 16-bit parameters (default True).
        capturable: learning rate (and step count) in device memory; needs the CUDA implementation.

    Raises:
        ValueError: a hyper-parameter is out of range, or a parameter does not fit.
        TypeError: a hyper-parameter has the wrong type.

    Side effects: the first ``step()`` loads the op (may compile).
    """

    _NAME: ClassVar[str] = "FusedLion"
    _FAMILY: ClassVar[str] = "lion"
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ("exp_avg",)
    _HYPERS: ClassVar[tuple[Hyper, ...]] = LION_HYPERS

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
        capturable: bool = False,
    ) -> None:
        self.set_grad_none = set_grad_none
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay), master_weights=master_weights,
                         fp32_optimizer_states=fp32_optimizer_states, capturable=capturable, impl=impl)
