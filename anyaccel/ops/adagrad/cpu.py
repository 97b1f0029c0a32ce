"""``CPUAdagrad``: the Adagrad optimizer on CPU tensors through anyaccel's vectorised ``cpu_adagrad`` kernel.

A drop-in for DeepSpeed's ``DeepSpeedCPUAdagrad`` (``deepspeed/ops/adagrad/cpu_adagrad.py``: arguments
``lr=1e-2, eps=1e-10, weight_decay=0, amsgrad=False, fp32_optimizer_states=True``, sparse gradients
accepted) that computes what ``torch.optim.Adagrad`` computes (``lr_decay=0``, ``initial_accumulator_value=0``).
Algorithm: Duchi, Hazan & Singer, JMLR 2011.

The native kernel (``anyaccel/csrc/adagrad/cpu_adagrad.cpp``) is built or loaded on the first ``step()`` that
has gradients, through ``CPUAdagradBuilder().load()``, never at import or construction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import torch

from anyaccel.ops.host_optimizer import PARAM_DTYPES, GroupTensors, HostOptimizer, check_hyper_parameters

__all__ = ["CPUAdagrad"]


class CPUAdagrad(HostOptimizer):
    """Adagrad for parameters that live in CPU memory (ZeRO-Offload style).

    One ``step()`` makes one kernel call per parameter group for the parameters with dense gradients, and one
    per parameter with a sparse gradient; the kernel reads ``p, g, v`` and writes ``p, v`` once.

    Per element (fp32 arithmetic, torch's order)::

        g = grad (+ weight_decay * p    if weight_decay != 0)
        v = v + g * g
        p = p - lr * g / (sqrt(v) + eps)

    Sparse (COO) gradients, e.g. of ``nn.Embedding(sparse=True)``, update only the entries they hold, as
    torch's Adagrad does; ``weight_decay`` then applies to those entries only (DeepSpeed's behaviour; torch
    refuses weight decay with sparse gradients).

    Supported storage (computation is always fp32 in registers, one rounding per stored value): fp32
    parameters with an fp32 ``exp_avg_sq``; bf16 or fp16 parameters with an fp32 ``exp_avg_sq``
    (``fp32_optimizer_states=True``, the default) or one in the parameter dtype.

    State per parameter: ``step`` (a Python ``int``, counted for checkpoints and schedulers) and
    ``exp_avg_sq``, the running sum of squared gradients (DeepSpeed's name; torch calls it ``sum``).

    Args:
        params: Parameters (CPU, contiguous, fp32/bf16/fp16 tensors) or parameter-group dicts.
        lr: Learning rate, finite and ``>= 0``.
        eps: Added to the denominator, finite and ``> 0``.
        weight_decay: L2 penalty added to the gradient, finite and ``>= 0``.
        amsgrad: Accepted for DeepSpeed's signature; must be False (AMSGrad is an Adam variant).
        fp32_optimizer_states: Keep ``exp_avg_sq`` in fp32 for 16-bit parameters (the default); if False,
            in the parameter dtype.

    Raises:
        ValueError: A hyper-parameter is out of range or not a Python number, or ``amsgrad`` is True.

    Side effects:
        None at construction. The first ``step()`` with at least one gradient builds (cold cache: one
        compiler run of a few seconds) or loads (warm cache) the ``cpu_adagrad`` op, which reads
        ``ANYACCEL_CPU_ISA`` and ``ANYACCEL_CACHE_DIR``; the loaded op is cached for the process.
    """

    _NAME: ClassVar[str] = "CPUAdagrad"
    _FAMILY: ClassVar[str] = "adagrad"
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ("exp_avg_sq",)
    _ACCELERATOR_ALTERNATIVE: ClassVar[str] = "torch.optim.Adagrad"
    _SPARSE_FIX: ClassVar[str] = "Use a sparse COO gradient (torch.sparse_coo_tensor) or a dense one."
    _NOT_CONTIGUOUS: ClassVar[str] = (
        "{where} is not contiguous (shape {shape}, strides {strides}); the kernel updates parameters in place, so "
        "make the parameter contiguous before building the optimizer (p.data = p.data.contiguous())."
    )

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-2,
        eps: float = 1e-10,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        fp32_optimizer_states: bool = True,
    ) -> None:
        _check_hyper_parameters(lr=lr, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
        defaults = {"lr": lr, "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad}
        super().__init__(params, defaults, fp32_optimizer_states)

    def _check_group(self, group_index: int, group: dict[str, Any]) -> None:
        """Rejects out-of-range hyper-parameters of ``param_groups[group_index]``.

        Raises:
            ValueError: see :func:`_check_hyper_parameters`.
        """
        _check_hyper_parameters(lr=group["lr"], eps=group["eps"], weight_decay=group["weight_decay"],
                                amsgrad=group.get("amsgrad", False))

    def _check_param(self, param: torch.Tensor, group_index: int, param_index: int) -> None:
        """The base class's checks, except that a sparse COO gradient is accepted.

        Raises:
            RuntimeError: as :meth:`HostOptimizer._check_param`, and for a sparse gradient whose layout is not
                COO or whose dtype differs from the parameter's.
        """
        grad = param.grad
        assert grad is not None
        if grad.layout != torch.sparse_coo:
            super()._check_param(param, group_index, param_index)
            return
        where = f"param_groups[{group_index}]['params'][{param_index}]"
        if param.device.type != "cpu" or grad.device.type != "cpu":
            raise RuntimeError(f"CPUAdagrad: {where} is on device {param.device} (gradient on {grad.device}); "
                               "CPUAdagrad updates CPU tensors only. Use torch.optim.Adagrad for accelerator "
                               "tensors, or keep the parameters on the CPU (ZeRO-Offload).")
        if param.dtype not in PARAM_DTYPES or grad.dtype != param.dtype:
            raise RuntimeError(f"CPUAdagrad: {where} has dtype {param.dtype} and its sparse gradient {grad.dtype}; "
                               "accepted: float32, bfloat16 or float16, the gradient in the parameter's dtype.")
        if not param.is_contiguous():
            raise RuntimeError("CPUAdagrad: " + self._NOT_CONTIGUOUS.format(where=where, shape=tuple(param.shape),
                                                                            strides=param.stride()))

    def _step_group(self, kernel: Any, group: dict[str, Any], tensors: GroupTensors) -> None:
        """One ``adagrad_step`` for the group's dense gradients, one per sparse gradient's entries.

        Args:
            kernel: The ``cpu_adagrad`` op module (``kernel.adagrad_step``).
            group: ``lr``, ``eps``, ``weight_decay``.
            tensors: Parameters, gradients and ``exp_avg_sq`` tensors.
        """
        lr, eps, wd = float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
        dense = [i for i, g in enumerate(tensors.grads) if g.layout == torch.strided]
        if dense:
            kernel.adagrad_step([tensors.params[i] for i in dense], [tensors.grads[i] for i in dense],
                                [tensors.states["exp_avg_sq"][i] for i in dense], [], lr, eps, wd)
        for i, grad in enumerate(tensors.grads):
            if grad.layout == torch.strided:
                continue
            grad = grad.coalesce()
            index = tuple(grad.indices())
            param, state = tensors.params[i], tensors.states["exp_avg_sq"][i]
            rows = param[index].contiguous()
            sums = state[index].contiguous()
            kernel.adagrad_step([rows], [grad.values().contiguous()], [sums], [], lr, eps, wd)
            param[index] = rows
            state[index] = sums


def _check_hyper_parameters(lr: float, eps: float, weight_decay: float, amsgrad: bool) -> None:
    """Validates Adagrad hyper-parameters.

    Raises:
        ValueError: naming the parameter, its value and the accepted range, when ``lr < 0``, ``eps <= 0``,
            ``weight_decay < 0``, a value is not finite or is a tensor, or ``amsgrad`` is True.
    """
    if amsgrad:
        raise ValueError("CPUAdagrad: amsgrad=True is invalid; accepted: False (AMSGrad is a variant of Adam, "
                         "Adagrad has none; DeepSpeed's DeepSpeedCPUAdagrad ignores the flag)")
    check_hyper_parameters("CPUAdagrad", (
        ("lr", lr, "a finite lr >= 0", lambda v: v >= 0),
        ("eps", eps, "a finite eps > 0", lambda v: v > 0),
        ("weight_decay", weight_decay, "a finite weight_decay >= 0", lambda v: v >= 0),
    ))
