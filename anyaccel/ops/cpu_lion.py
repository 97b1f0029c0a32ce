"""``CPULion``: the Lion optimizer on CPU tensors through anyaccel's vectorised ``cpu_lion`` kernel.

The CPU counterpart of :class:`anyaccel.ops.lion.FusedLion` and a drop-in for DeepSpeed's
``DeepSpeedCPULion`` (``deepspeed/ops/lion/cpu_lion.py``: arguments ``lr, betas, weight_decay,
fp32_optimizer_states``). Algorithm: Chen et al., "Symbolic Discovery of Optimization Algorithms", 2023,
Algorithm 2 (https://arxiv.org/abs/2302.06675).

The native kernel (``anyaccel/csrc/lion/cpu_lion.cpp``) is built or loaded on the first ``step()`` that has
gradients, through ``CPULionBuilder().load()``, never at import or construction.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import torch

logger = logging.getLogger(__name__)

__all__ = ["CPULion"]

# Parameter dtypes the kernel accepts; gradients must have the parameter's dtype.
_PARAM_DTYPES: frozenset[torch.dtype] = frozenset({torch.float32, torch.bfloat16, torch.float16})
_STATE_KEY = "exp_avg"


class CPULion(torch.optim.Optimizer):
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

    State per parameter: ``step`` (a Python ``int``, counted for checkpoints and schedulers; Lion itself
    does not use it) and ``exp_avg`` (contiguous, shaped like the parameter). ``state_dict()`` /
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
        ValueError: A hyper-parameter is out of range or not a Python number (the message names it, its
            value and the accepted range).

    Side effects:
        None at construction. The first ``step()`` with at least one gradient builds (cold cache: one
        compiler run of a few seconds) or loads (warm cache) the ``cpu_lion`` op through
        ``anyaccel.op_builder.cpu_lion.CPULionBuilder().load()``, which reads ``ANYACCEL_CPU_ISA`` and
        ``ANYACCEL_CACHE_DIR``; the loaded op is cached on the class for the process.
    """

    _op_module: ClassVar[Any | None] = None
    _op_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
        fp32_optimizer_states: bool = True,
    ) -> None:
        _check_hyper_parameters(lr=lr, betas=betas, weight_decay=weight_decay)
        defaults = {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay}
        super().__init__(params, defaults)
        self.fp32_optimizer_states = fp32_optimizer_states

    # ------------------------------------------------------------------------------------------------
    # Kernel loading
    # ------------------------------------------------------------------------------------------------

    @classmethod
    def _kernel(cls) -> Any:
        """Returns the loaded ``cpu_lion`` op module, building it on first use.

        Returns:
            The ``OpModule`` from ``CPULionBuilder().load()``; ``.lion_step`` is the torch op.

        Raises:
            Whatever ``CPULionBuilder().load()`` raises (a typed build error naming the compiler's first
            error lines and the full log).

        Side effects:
            May run the compiler (cold cache) and loads a shared library; cached on the class.
        """
        if cls._op_module is None:
            with cls._op_lock:
                if cls._op_module is None:
                    from anyaccel.op_builder.cpu_lion import CPULionBuilder

                    module = CPULionBuilder().load()
                    logger.debug("CPULion: loaded cpu_lion kernel (isa=%s)", getattr(module, "isa", "?"))
                    cls._op_module = module
        return cls._op_module

    # ------------------------------------------------------------------------------------------------
    # State
    # ------------------------------------------------------------------------------------------------

    def _state_dtype(self, param: torch.Tensor) -> torch.dtype:
        """Returns the dtype of ``exp_avg`` for ``param``."""
        return torch.float32 if self.fp32_optimizer_states else param.dtype

    def _init_state(self, param: torch.Tensor) -> dict[str, Any]:
        """Creates a zero ``exp_avg`` for ``param`` (same shape, contiguous, the state dtype) and ``step=0``."""
        state = self.state[param]
        if len(state) == 0:
            state["step"] = 0
            state[_STATE_KEY] = torch.zeros(param.shape, dtype=self._state_dtype(param), device=param.device)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a state saved by ``state_dict()`` so that training continues identically.

        ``torch.optim.Optimizer.load_state_dict`` casts every floating state tensor to its parameter's
        dtype, which would round an fp32 ``exp_avg`` of a bf16/fp16 parameter. After the base class has
        restored groups and state, ``exp_avg`` is copied again from ``state_dict`` in this optimizer's state
        dtype, and ``step`` is stored as an ``int`` (a tensor ``step`` is accepted).

        Args:
            state_dict: A dict with ``"state"`` (parameter index -> state) and ``"param_groups"``.

        Raises:
            ValueError: The saved groups do not match this optimizer's groups (from the base class).
        """
        super().load_state_dict(state_dict)
        saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        saved_state = state_dict["state"]
        for saved_id, param in zip(saved_ids, params):
            if saved_id not in saved_state:
                continue
            saved = saved_state[saved_id]
            state = self.state[param]
            if "step" in saved:
                step = saved["step"]
                state["step"] = int(step.item()) if isinstance(step, torch.Tensor) else int(step)
            if _STATE_KEY in saved:
                state[_STATE_KEY] = saved[_STATE_KEY].to(
                    device=param.device, dtype=self._state_dtype(param), copy=True
                ).contiguous()

    # ------------------------------------------------------------------------------------------------
    # Step
    # ------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Performs one Lion step on every parameter that has a gradient.

        Args:
            closure: Optional callable that re-evaluates the model and returns the loss; it is called with
                gradients enabled before the update.

        Returns:
            The closure's loss, or None without a closure.

        Raises:
            RuntimeError: A parameter or gradient is not on the CPU, a gradient is sparse, or a parameter /
                gradient is not contiguous or has an unsupported dtype (the message names the group, the
                parameter index and the fix); also any error of the kernel (``lion_step``), which validates
                every tensor again.
            ValueError: A group's hyper-parameters are out of range.

        Side effects:
            Updates parameters and state in place; builds/loads the kernel on first use.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group_index, group in enumerate(self.param_groups):
            betas = group["betas"]
            _check_hyper_parameters(lr=group["lr"], betas=betas, weight_decay=group["weight_decay"])
            params: list[torch.Tensor] = []
            grads: list[torch.Tensor] = []
            exp_avgs: list[torch.Tensor] = []
            for param_index, param in enumerate(group["params"]):
                if param.grad is None:
                    continue
                _check_param(param, group_index, param_index)
                state = self._init_state(param)
                state["step"] += 1
                params.append(param)
                grads.append(param.grad)
                exp_avgs.append(state[_STATE_KEY])
            if not params:
                continue
            self._kernel().lion_step(params, grads, exp_avgs, float(group["lr"]), float(betas[0]),
                                     float(betas[1]), float(group["weight_decay"]))
        return loss


def _check_param(param: torch.Tensor, group_index: int, param_index: int) -> None:
    """Raises a clear error for a parameter/gradient the CPU kernel cannot update.

    Raises:
        RuntimeError: non-CPU parameter or gradient, sparse gradient, unsupported dtype, or non-contiguous
            parameter or gradient.
    """
    where = f"param_groups[{group_index}]['params'][{param_index}]"
    grad = param.grad
    assert grad is not None  # checked by the caller
    if param.device.type != "cpu" or grad.device.type != "cpu":
        raise RuntimeError(
            f"CPULion: {where} is on device {param.device} (gradient on {grad.device}); CPULion updates CPU "
            "tensors only. Use anyaccel's FusedLion for accelerator tensors, or keep the parameters on the "
            "CPU (ZeRO-Offload)."
        )
    if grad.is_sparse or grad.layout != torch.strided:
        raise RuntimeError(
            f"CPULion: {where} has a sparse gradient (layout {grad.layout}); CPULion supports dense "
            "gradients only. Densify the gradient (grad.to_dense()) or use torch.optim.SparseAdam."
        )
    if param.dtype not in _PARAM_DTYPES:
        raise RuntimeError(
            f"CPULion: {where} has dtype {param.dtype}; accepted parameter dtypes are float32, bfloat16 "
            "and float16."
        )
    if not param.is_contiguous() or not grad.is_contiguous():
        raise RuntimeError(
            f"CPULion: {where} or its gradient is not contiguous (shape {tuple(param.shape)}, strides "
            f"{param.stride()}, gradient strides {grad.stride()}); the kernel updates parameters in place, so "
            "make the parameter contiguous before building the optimizer (p.data = p.data.contiguous()) and "
            "pass contiguous gradients."
        )


def _check_hyper_parameters(lr: float, betas: tuple[float, float], weight_decay: float) -> None:
    """Validates Lion hyper-parameters.

    Raises:
        ValueError: naming the parameter, its value and the accepted range, when ``betas`` is not a pair,
            ``lr < 0``, a beta is not in ``[0, 1]``, ``weight_decay < 0``, a value is not finite, or a value
            is a tensor.
    """
    if len(betas) != 2:
        raise ValueError(f"CPULion: betas={betas!r} is invalid; accepted: a pair (beta1, beta2)")
    checks = (
        ("lr", lr, "a finite lr >= 0", lambda v: v >= 0),
        ("betas[0]", betas[0], "0 <= beta1 <= 1", lambda v: 0 <= v <= 1),
        ("betas[1]", betas[1], "0 <= beta2 <= 1", lambda v: 0 <= v <= 1),
        ("weight_decay", weight_decay, "a finite weight_decay >= 0", lambda v: v >= 0),
    )
    for name, value, accepted, ok in checks:
        if isinstance(value, torch.Tensor):
            raise ValueError(f"CPULion: {name} must be a Python number, got a tensor; pass float({name})")
        if not (math.isfinite(value) and ok(value)):
            raise ValueError(f"CPULion: {name}={value!r} is invalid; accepted: {accepted}")
