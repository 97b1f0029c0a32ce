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

from anyaccel.ops.host_optimizer import GroupTensors, HostOptimizer, check_beta_pair, check_hyper_parameters

__all__ = ["CPUAdam"]


class CPUAdam(HostOptimizer):
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

    State per parameter: ``step`` (a Python ``int``), ``exp_avg`` and ``exp_avg_sq`` (contiguous, shaped
    like the parameter). ``state_dict()``/``load_state_dict()`` round-trip exactly, including fp32 state
    of 16-bit parameters (which ``torch.optim.Optimizer`` alone would cast to the parameter dtype).

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
        ValueError: A hyper-parameter is out of range (the message names it, its value and the range).
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
    _ACCELERATOR_ALTERNATIVE: ClassVar[str] = "anyaccel's FusedAdam (or torch.optim.AdamW(fused=True))"
    _SPARSE_FIX: ClassVar[str] = "Use torch.optim.SparseAdam for sparse gradients, or densify them."
    _NOT_CONTIGUOUS: ClassVar[str] = (
        "{where} is not contiguous (shape {shape}, strides {strides}); the kernel updates parameters in place, "
        "so make the parameter contiguous before building the optimizer (e.g. p.data = p.data.contiguous())."
    )
    # A non-contiguous gradient reaches the kernel, whose message names it (grads[i]).
    _CHECK_GRAD_CONTIGUOUS: ClassVar[bool] = False

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
        if amsgrad:
            raise NotImplementedError(
                "CPUAdam(amsgrad=True) is not supported: the cpu_adam kernel implements Adam/AdamW without "
                "AMSGrad. Use torch.optim.AdamW(params, amsgrad=True) instead, or pass amsgrad=False."
            )
        _check_hyper_parameters(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "weight_decay": weight_decay,
            "bias_correction": bias_correction,
            "amsgrad": amsgrad,
            "adamw_mode": adamw_mode,
        }
        super().__init__(params, defaults, fp32_optimizer_states)
        # DeepSpeedCPUAdam exposes this attribute; keep it for drop-in compatibility.
        self.adam_w_mode = adamw_mode

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a state saved by ``state_dict()`` so that training continues identically.

        As :meth:`HostOptimizer.load_state_dict` (``exp_avg``/``exp_avg_sq`` kept in this optimizer's state
        dtype, a tensor ``step`` accepted, so an ``torch.optim.AdamW`` state dict can be loaded), then
        groups saved without ``bias_correction``, ``adamw_mode`` or ``amsgrad`` (e.g. by AdamW) get
        ``True``, this optimizer's ``adamw_mode`` and ``False``.

        Args:
            state_dict: A dict with ``"state"`` (parameter index -> state) and ``"param_groups"``.

        Raises:
            ValueError: The saved groups do not match this optimizer's groups (from the base class).
        """
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            group.setdefault("bias_correction", True)
            group.setdefault("adamw_mode", self.adam_w_mode)
            group.setdefault("amsgrad", False)

    def _check_group(self, group_index: int, group: dict[str, Any]) -> None:
        """Rejects ``amsgrad`` and out-of-range hyper-parameters of ``param_groups[group_index]``.

        Raises:
            NotImplementedError: The group has ``amsgrad=True``.
            ValueError: A hyper-parameter is out of range (see :func:`_check_hyper_parameters`).
        """
        if group.get("amsgrad", False):
            raise NotImplementedError(
                f"CPUAdam: param_groups[{group_index}] has amsgrad=True, which the cpu_adam kernel does "
                "not implement; use torch.optim.AdamW(amsgrad=True) instead."
            )
        _check_hyper_parameters(lr=group["lr"], betas=group["betas"], eps=group["eps"],
                                weight_decay=group["weight_decay"])

    def _step_group(self, kernel: Any, group: dict[str, Any], tensors: GroupTensors) -> None:
        """One ``adam_step`` call per distinct step count in the group (normally exactly one call).

        Args:
            kernel: The ``cpu_adam`` op module (``kernel.adam_step``: schema in ``docs/architecture.md``).
            group: ``lr``, ``betas``, ``eps``, ``weight_decay``, ``bias_correction``, ``adamw_mode``.
            tensors: Parameters, gradients, ``exp_avg``/``exp_avg_sq`` and step counts (bias correction).
        """
        exp_avgs, exp_avg_sqs = tensors.states["exp_avg"], tensors.states["exp_avg_sq"]
        beta1, beta2 = group["betas"]
        for step, indices in _group_by_step(tensors.steps).items():
            kernel.adam_step(
                [tensors.params[i] for i in indices],
                [tensors.grads[i] for i in indices],
                [exp_avgs[i] for i in indices],
                [exp_avg_sqs[i] for i in indices],
                [],
                step,
                float(group["lr"]),
                float(beta1),
                float(beta2),
                float(group["eps"]),
                float(group["weight_decay"]),
                bool(group["bias_correction"]),
                bool(group["adamw_mode"]),
            )


def _group_by_step(steps: list[int]) -> dict[int, list[int]]:
    """Maps each distinct step count to the indices having it (insertion order kept)."""
    groups: dict[int, list[int]] = {}
    for index, step in enumerate(steps):
        groups.setdefault(step, []).append(index)
    return groups


def _check_hyper_parameters(lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> None:
    """Validates Adam hyper-parameters.

    Raises:
        ValueError: naming the parameter, its value and the accepted range, when ``betas`` is not a pair,
            ``lr < 0``, a beta is not in ``[0, 1)``, ``eps <= 0``, ``weight_decay < 0``, a value is not
            finite, or a value is a tensor.
    """
    check_beta_pair("CPUAdam", betas)
    check_hyper_parameters("CPUAdam", (
        ("lr", lr, "a finite lr >= 0", lambda v: v >= 0),
        ("betas[0]", betas[0], "0 <= beta1 < 1", lambda v: 0 <= v < 1),
        ("betas[1]", betas[1], "0 <= beta2 < 1", lambda v: 0 <= v < 1),
        ("eps", eps, "a finite eps > 0", lambda v: v > 0),
        ("weight_decay", weight_decay, "a finite weight_decay >= 0", lambda v: v >= 0),
    ))
