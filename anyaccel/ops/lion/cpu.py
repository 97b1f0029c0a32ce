"""``CPULion``: the Lion optimizer on CPU tensors through anyaccel's vectorised ``cpu_lion`` kernel.

The CPU counterpart of [`anyaccel.ops.lion.FusedLion`][anyaccel.ops.lion.fused.FusedLion] and a drop-in for DeepSpeed's
``DeepSpeedCPULion`` (``deepspeed/ops/lion/cpu_lion.py``: arguments ``lr, betas, weight_decay,
fp32_optimizer_states``). Algorithm: Chen et al., "Symbolic Discovery of Optimization Algorithms", 2023,
Algorithm 2 (https://arxiv.org/abs/2302.06675).

The native kernel (``anyaccel/csrc/lion/cpu_lion.cpp``) is built or loaded on the first ``step()`` that has
gradients, through ``CPULionBuilder().load()``, never at import or construction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import torch

from anyaccel.ops.optimizer.base import Hyper, ListOptimizer

__all__ = ["LION_HYPERS", "CPULion"]

#: Lion's group hyper-parameters and the ``lion_step`` arguments they feed (ranges from the op spec).
LION_HYPERS: tuple[Hyper, ...] = (
    Hyper("lr", "lr"),
    Hyper("betas", "beta1", 0),
    Hyper("betas", "beta2", 1),
    Hyper("weight_decay", "weight_decay"),
)


class CPULion(ListOptimizer):
    """Lion for parameters that live in CPU memory (ZeRO-Offload style).

    One ``step()`` makes one kernel call per parameter group, covering every parameter of the group that
    has a gradient, whatever its dtype; the kernel reads ``p, g, m`` and writes ``p, m`` once, with all
    threads of ``torch.get_num_threads()`` balanced across the group's tensors.

    Per element (fp32 arithmetic, the order of anyaccel's CUDA ``FusedLion``)::

        c = beta1 * m + (1 - beta1) * g
        p = p * (1 - lr * weight_decay) - lr * sign(c)        sign as torch.sign: sign(0) = 0
        m = beta2 * m + (1 - beta2) * g

    Supported storage (computation is always fp32 in registers, one rounding per stored value):

    * fp32 parameters: fp32 ``exp_avg``.
    * bf16 or fp16 parameters: fp32 ``exp_avg`` (``fp32_optimizer_states=True``, the default) or
      ``exp_avg`` in the parameter dtype (``fp32_optimizer_states=False``). Stores round to nearest even.

    State per parameter: ``step`` (a 0-dim float32 tensor as in ``torch.optim``, counted for checkpoints and
    schedulers; Lion itself does not use it) and ``exp_avg`` (contiguous, shaped like the parameter). ``state_dict()`` /
    ``load_state_dict()`` round-trip exactly, including an fp32 ``exp_avg`` of a 16-bit parameter (which
    ``torch.optim.Optimizer`` alone would cast to the parameter dtype).

    Args:
        params: Parameters (CPU, contiguous, fp32/bf16/fp16 tensors) or parameter-group dicts, as for any
            ``torch.optim.Optimizer``.
        lr: Learning rate, finite and ``>= 0`` (Lion's is typically 3-10x smaller than AdamW's).
        betas: ``(beta1, beta2)``, each in ``[0, 1]``: ``beta1`` interpolates the update direction,
            ``beta2`` the momentum.
        weight_decay: Decoupled weight decay, finite and ``>= 0`` (multiplies ``p`` by ``1 - lr * wd``).
        fp32_optimizer_states: Keep ``exp_avg`` in fp32 for 16-bit parameters (DeepSpeed's default); if
            False, keep it in the parameter dtype (halves its memory, loses precision).

    Raises:
        ValueError: A hyper-parameter is out of range (the message names it, its value and the accepted
            range), or a parameter is not a contiguous CPU fp32/bf16/fp16 tensor.
        TypeError: A hyper-parameter is not a Python number.

    Side effects:
        None at construction. The first ``step()`` with at least one gradient builds (cold cache: one
        compiler run of a few seconds) or loads (warm cache) the ``cpu_lion`` op through
        ``anyaccel.op_builder.cpu_lion.CPULionBuilder().load()``, which reads ``ANYACCEL_CPU_ISA`` and
        ``ANYACCEL_CACHE_DIR``; the loaded op is cached on the class for the process.
    """

    _NAME: ClassVar[str] = "CPULion"
    _FAMILY: ClassVar[str] = "lion"
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ("exp_avg",)
    _HYPERS: ClassVar[tuple[Hyper, ...]] = LION_HYPERS
    _HOST: ClassVar[bool] = True
    _ALTERNATIVE: ClassVar[str] = "anyaccel's FusedLion"

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
        fp32_optimizer_states: bool = True,
    ) -> None:
        defaults = {"lr": lr, "betas": betas, "weight_decay": weight_decay}
        super().__init__(params, defaults, fp32_optimizer_states=fp32_optimizer_states)
