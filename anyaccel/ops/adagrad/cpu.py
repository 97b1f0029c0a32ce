"""``CPUAdagrad``: the Adagrad optimizer on CPU tensors through anyaccel's vectorised ``cpu_adagrad`` kernel.

A drop-in for DeepSpeed's ``DeepSpeedCPUAdagrad`` (``deepspeed/ops/adagrad/cpu_adagrad.py``: arguments
``lr=1e-2, eps=1e-10, weight_decay=0, amsgrad=False, fp32_optimizer_states=True``, sparse gradients
accepted) that computes what ``torch.optim.Adagrad`` computes (``lr_decay=0``, ``initial_accumulator_value=0``).
Algorithm: Duchi, Hazan & Singer, JMLR 2011.

The native kernel (``anyaccel/csrc/adagrad/cpu_adagrad.cpp``) is built or loaded on the first ``step()`` that
has gradients, through ``CPUAdagradBuilder().load()``, never at import or construction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import torch

from anyaccel.ops.optimizer.base import PARAM_DTYPES, Hyper, ListOptimizer
from anyaccel.ops.optimizer.hooks import step_entry

__all__ = ["ADAGRAD_HYPERS", "CPUAdagrad"]

#: Adagrad's group hyper-parameters and the ``adagrad_step`` arguments they feed (ranges from the op spec).
ADAGRAD_HYPERS: tuple[Hyper, ...] = (
    Hyper("lr", "lr"),
    Hyper("eps", "eps"),
    Hyper("weight_decay", "weight_decay"),
)


class CPUAdagrad(ListOptimizer):
    """Adagrad for parameters that live in CPU memory (ZeRO-Offload style).

    One ``step()`` makes one kernel call per parameter group for the parameters with dense gradients
    ([`ListOptimizer`][anyaccel.ops.optimizer.ListOptimizer]'s validation, buckets and checkpoints), and one per
    parameter with a sparse gradient; the kernel reads ``p, g, v`` and writes ``p, v`` once.

    Per element (fp32 arithmetic, torch's order)::

        g = grad (+ weight_decay * p    if weight_decay != 0)
        v = v + g * g
        p = p - lr * g / (sqrt(v) + eps)

    Sparse (COO) gradients, e.g. of ``nn.Embedding(sparse=True)``, update only the entries they hold (repeated
    indices summed), as torch's Adagrad does; ``weight_decay`` then applies to those entries only (DeepSpeed's
    behaviour; torch refuses weight decay with sparse gradients).

    Supported storage (computation is always fp32 in registers, one rounding per stored value): fp32
    parameters with an fp32 ``exp_avg_sq``; bf16 or fp16 parameters with an fp32 ``exp_avg_sq``
    (``fp32_optimizer_states=True``, the default) or one in the parameter dtype.

    State per parameter: ``step`` (a 0-dim float32 tensor, as ``torch.optim`` keeps it) and ``exp_avg_sq``, the
    running sum of squared gradients (DeepSpeed's name; torch calls it ``sum``).

    Args:
        params: Parameters (CPU, contiguous, fp32/bf16/fp16 tensors) or parameter-group dicts.
        lr: Learning rate, finite and ``>= 0``.
        eps: Added to the denominator, finite and ``> 0``.
        weight_decay: L2 penalty added to the gradient, finite and ``>= 0``.
        amsgrad: Accepted for DeepSpeed's signature; only False (AMSGrad is a variant of Adam; DeepSpeed's
            ``DeepSpeedCPUAdagrad`` ignores the flag).
        fp32_optimizer_states: Keep ``exp_avg_sq`` in fp32 for 16-bit parameters (the default); if False, in
            the parameter dtype.

    Raises:
        ValueError: A hyper-parameter is out of range, or a parameter is not a contiguous CPU fp32/bf16/fp16
            tensor.
        TypeError: A hyper-parameter is not a Python number.
        NotImplementedError: ``amsgrad=True``.

    Side effects:
        None at construction. The first ``step()`` with at least one gradient builds (cold cache: one
        compiler run of a few seconds) or loads (warm cache) the ``cpu_adagrad`` op, which reads
        ``ANYACCEL_CPU_ISA`` and ``ANYACCEL_CACHE_DIR``; the loaded op is cached for the process.
    """

    _NAME: ClassVar[str] = "CPUAdagrad"
    _FAMILY: ClassVar[str] = "adagrad"
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ("exp_avg_sq",)
    _HYPERS: ClassVar[tuple[Hyper, ...]] = ADAGRAD_HYPERS
    _HOST: ClassVar[bool] = True
    _ALTERNATIVE: ClassVar[str] = "torch.optim.Adagrad"
    _FIXED: ClassVar[dict[str, Any]] = {"amsgrad": False}

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-2,
        eps: float = 1e-10,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        fp32_optimizer_states: bool = True,
    ) -> None:
        defaults = {"lr": lr, "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad}
        super().__init__(params, defaults, fp32_optimizer_states=fp32_optimizer_states)

    @step_entry
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One optimization step: dense gradients through
        [`ListOptimizer.step`][anyaccel.ops.optimizer.ListOptimizer.step], then sparse ones.

        Everything is validated before anything changes (sparse gradients included): a step that raises has
        updated nothing.

        Args:
            closure: re-evaluates the model and returns the loss (called with gradients enabled first).

        Returns:
            The closure's loss, or None.

        Raises:
            ValueError, TypeError: as [`ListOptimizer.step`][anyaccel.ops.optimizer.ListOptimizer.step]; for a sparse
                gradient, a layout other than
                COO or a dtype or shape other than the parameter's.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        sparse = []
        for gi, group in enumerate(self.param_groups):
            for pi, p in enumerate(group["params"]):
                if p.grad is not None and p.grad.layout != torch.strided:
                    self._check_sparse(p, f"param_groups[{gi}]['params'][{pi}]")
                    sparse.append((group, p, p.grad))
        if not sparse:
            super().step()
            return loss
        for gi, group in enumerate(self.param_groups):
            self._group_scalars(gi, group)  # the sparse groups' hyper-parameters, before anything changes
        for _, p, _ in sparse:
            p.grad = None  # the dense step skips them
        try:
            super().step()
        finally:
            for _, p, grad in sparse:
                p.grad = grad
        for group, p, grad in sparse:
            self._sparse_step(group, p, grad)
        return loss

    def _check_sparse(self, p: torch.Tensor, where: str) -> None:
        """Raises ``ValueError`` for a sparse gradient the kernel cannot apply (layout, dtype, shape, device), or
        a parameter whose existing state no longer fits it (checked here, before the dense update)."""
        self._check_param(p, where)
        st = self.state.get(p)
        if st:
            self._check_state(where, p, st)
        g = p.grad
        assert g is not None
        if g.layout != torch.sparse_coo or g.dtype != p.dtype or g.shape != p.shape or g.device != p.device or \
                p.dtype not in PARAM_DTYPES:
            raise ValueError(f"CPUAdagrad: the gradient of {where} is a {g.layout} {g.dtype} tensor of shape "
                             f"{list(g.shape)} on {g.device}; accepted: a dense or sparse COO gradient matching the "
                             f"parameter ({p.dtype}, {list(p.shape)}, {p.device})")

    def _sparse_step(self, group: dict[str, Any], p: torch.Tensor, grad: torch.Tensor) -> None:
        """Adagrad on the entries a sparse gradient holds: gather, one kernel call, scatter back."""
        st = self.state.get(p)
        if not st:
            self.state[p] = self._new_state(p)
            st = self.state[p]
        grad = grad.coalesce()
        index = tuple(grad.indices())
        rows = p[index].contiguous()
        sums = st["exp_avg_sq"][index].contiguous()
        step = self._op(p.device)["step"]
        step([rows], [grad.values().contiguous()], [sums], [], float(group["lr"]), float(group["eps"]),
             float(group["weight_decay"]))
        p[index] = rows
        st["exp_avg_sq"][index] = sums
        st["step"] = st["step"] + 1  # a tensor of its own: a dense step may have shared it with other parameters
