"""``CPUAdam``: Adam / AdamW on CPU tensors through anyaccel's vectorised ``cpu_adam`` kernel.

The optimizer is a drop-in for DeepSpeed's ``DeepSpeedCPUAdam`` (same constructor arguments, see
``deepspeed/ops/adam/cpu_adam.py``) and computes exactly what ``torch.optim.AdamW`` (``adamw_mode=True``)
or ``torch.optim.Adam`` (``adamw_mode=False``) computes, see
https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html. Algorithms: Kingma & Ba, "Adam: A Method
for Stochastic Optimization", ICLR 2015; Loshchilov & Hutter, "Decoupled Weight Decay Regularization",
ICLR 2019.

The native kernel (``anyaccel/csrc/adam/cpu_adam.cpp``) is built or loaded on the first ``step()`` through
``CPUAdamBuilder().load()``, never at import or construction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import torch

from anyaccel.ops.optimizer.base import Hyper, ListOptimizer

__all__ = ["ADAM_HYPERS", "CPUAdam"]

#: Adam's group hyper-parameters and the ``adam_step`` arguments they feed (ranges from the op spec).
ADAM_HYPERS: tuple[Hyper, ...] = (
    Hyper("lr", "lr"),
    Hyper("betas", "beta1", 0),
    Hyper("betas", "beta2", 1),
    Hyper("eps", "eps"),
    Hyper("weight_decay", "weight_decay"),
    Hyper("bias_correction", "bias_correction", kind="bool"),
)


class CPUAdam(ListOptimizer):
    """Adam / AdamW for parameters that live in CPU memory (ZeRO-Offload style).

    One ``step()`` makes one kernel call per parameter group, covering every parameter of the group that
    has a gradient, whatever its dtype; the kernel reads ``p, g, m, v`` and writes ``p, m, v`` once, with
    all threads of ``torch.get_num_threads()`` balanced across the group's tensors.

    Per element, with ``t`` the step count of that parameter (starting at 1)::

        g = grad + weight_decay * p            (adamw_mode=False, as torch.optim.Adam)
        p = p * (1 - lr * weight_decay)        (adamw_mode=True, as torch.optim.AdamW)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        p = p - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

    and without the two ``1 - beta**t`` factors when ``bias_correction`` is False.

    Supported storage (computation is always fp32 in registers):

    * fp32 parameters: fp32 state.
    * bf16 or fp16 parameters: fp32 state (``fp32_optimizer_states=True``, the default) or state in the
      parameter dtype (``fp32_optimizer_states=False``). bf16 results are rounded to nearest even.

    State per parameter: ``step`` (a 0-dim float32 tensor, as ``torch.optim``), ``exp_avg`` and
    ``exp_avg_sq`` (contiguous, shaped like the parameter). ``state_dict()``/``load_state_dict()`` round-trip
    exactly, including fp32 state of 16-bit parameters, and load ``torch.optim.Adam``/``AdamW`` checkpoints
    (their ``decoupled_weight_decay`` sets ``adamw_mode``; ``maximize``/``amsgrad=True`` are refused). The
    shared behaviour (validation before mutation, aliasing checks, version counters, the cached plan) is
    [`ListOptimizer`][anyaccel.ops.optimizer.ListOptimizer]'s.

    Args:
        params: Parameters (CPU, contiguous, fp32/bf16/fp16 tensors) or parameter-group dicts, as for any
            ``torch.optim.Optimizer``.
        lr: Learning rate, ``>= 0``.
        bias_correction: Whether to divide the moments by ``1 - beta**t`` (Adam's bias correction).
        betas: ``(beta1, beta2)``, each in ``[0, 1)``.
        eps: Added to the denominator after the square root, ``> 0``.
        weight_decay: ``>= 0``; decoupled when ``adamw_mode`` else an L2 term added to the gradient.
        amsgrad: Must be False; AMSGrad is not implemented by this kernel.
        adamw_mode: True for AdamW (decoupled weight decay), False for Adam (L2 weight decay).
        fp32_optimizer_states: Keep ``exp_avg``/``exp_avg_sq`` in fp32 for 16-bit parameters (DeepSpeed's
            default); if False, keep them in the parameter dtype (halves their memory, loses precision).

    Raises:
        ValueError: A hyper-parameter is out of its range (``lr >= 0``, betas in ``[0, 1)``, ``eps > 0``,
            ``weight_decay >= 0``, all finite in float32; the message names it, its value and the range), or a
            parameter is not a contiguous CPU fp32/bf16/fp16 tensor.
        TypeError: A hyper-parameter is not a Python number (``betas`` not a pair).
        NotImplementedError: ``amsgrad=True``.

    Side effects:
        None at construction. The first ``step()`` with at least one gradient builds (cold cache: one
        compiler run of a few seconds) or loads (warm cache) the ``cpu_adam`` op through
        ``anyaccel.op_builder.CPUAdamBuilder().load()``, which reads ``ANYACCEL_CPU_ISA`` and
        ``ANYACCEL_CACHE_DIR``; the loaded op is cached on the class for the process.
    """

    _NAME: ClassVar[str] = "CPUAdam"
    _FAMILY: ClassVar[str] = "adam"
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ("exp_avg", "exp_avg_sq")
    _HYPERS: ClassVar[tuple[Hyper, ...]] = ADAM_HYPERS + (Hyper("adamw_mode", "adamw_mode", kind="bool"),)
    _HOST: ClassVar[bool] = True
    _ALTERNATIVE: ClassVar[str] = "anyaccel's FusedAdam (or torch.optim.AdamW(fused=True))"
    _KEY_ALIASES: ClassVar[dict[str, str]] = {"decoupled_weight_decay": "adamw_mode", "adam_w_mode": "adamw_mode"}
    _FIXED: ClassVar[dict[str, Any]] = {"amsgrad": False}

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        adamw_mode: bool = True,
        fp32_optimizer_states: bool = True,
    ) -> None:
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "bias_correction": bias_correction, "amsgrad": amsgrad, "adamw_mode": adamw_mode}
        super().__init__(params, defaults, fp32_optimizer_states=fp32_optimizer_states)
        # DeepSpeedCPUAdam exposes this attribute; kept for drop-in compatibility.
        self.adam_w_mode = adamw_mode
