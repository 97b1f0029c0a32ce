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

import logging
import math
import threading
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import torch

logger = logging.getLogger(__name__)

__all__ = ["CPUAdam", "FusedAdam"]

# Parameter dtypes the kernel accepts; gradients must have the parameter's dtype.
_PARAM_DTYPES: frozenset[torch.dtype] = frozenset({torch.float32, torch.bfloat16, torch.float16})
_STATE_KEYS: tuple[str, str] = ("exp_avg", "exp_avg_sq")


class CPUAdam(torch.optim.Optimizer):
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

    _op_module: ClassVar[Any | None] = None
    _op_lock: ClassVar[threading.Lock] = threading.Lock()

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
        super().__init__(params, defaults)
        self.fp32_optimizer_states = fp32_optimizer_states
        # DeepSpeedCPUAdam exposes these two as attributes; keep them for drop-in compatibility.
        self.adam_w_mode = adamw_mode

    # ------------------------------------------------------------------------------------------------
    # Kernel loading
    # ------------------------------------------------------------------------------------------------

    @classmethod
    def _kernel(cls) -> Any:
        """Returns the loaded ``cpu_adam`` op module, building it on first use.

        Returns:
            The ``OpModule`` from ``CPUAdamBuilder().load()``; ``.adam_step`` is the torch op.

        Raises:
            Whatever ``CPUAdamBuilder().load()`` raises (a typed build error naming the compiler's first
            error lines and the full log).

        Side effects:
            May run the compiler (cold cache) and loads a shared library; cached on the class.
        """
        if cls._op_module is None:
            with cls._op_lock:
                if cls._op_module is None:
                    from anyaccel.op_builder import CPUAdamBuilder

                    module = CPUAdamBuilder().load()
                    logger.debug("CPUAdam: loaded cpu_adam kernel (isa=%s)", getattr(module, "isa", "?"))
                    cls._op_module = module
        return cls._op_module

    # ------------------------------------------------------------------------------------------------
    # State
    # ------------------------------------------------------------------------------------------------

    def _state_dtype(self, param: torch.Tensor) -> torch.dtype:
        """Returns the dtype of ``exp_avg``/``exp_avg_sq`` for ``param``."""
        return torch.float32 if self.fp32_optimizer_states else param.dtype

    def _init_state(self, param: torch.Tensor) -> dict[str, Any]:
        """Creates zero moments for ``param`` (same shape, contiguous, the state dtype)."""
        state = self.state[param]
        if len(state) == 0:
            state["step"] = 0
            dtype = self._state_dtype(param)
            for key in _STATE_KEYS:
                state[key] = torch.zeros(param.shape, dtype=dtype, device=param.device)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a state saved by ``state_dict()`` so that training continues identically.

        ``torch.optim.Optimizer.load_state_dict`` casts every floating state tensor to its parameter's
        dtype; this would round fp32 moments of bf16/fp16 parameters. After the base class has restored
        groups and state, the moments are copied again from ``state_dict`` in this optimizer's state dtype,
        and ``step`` is stored as an ``int`` (a tensor ``step``, as ``torch.optim.AdamW`` saves it, is
        accepted, so an AdamW state dict can be loaded).

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
            dtype = self._state_dtype(param)
            for key in _STATE_KEYS:
                if key in saved:
                    state[key] = saved[key].to(device=param.device, dtype=dtype, copy=True).contiguous()
        for group in self.param_groups:
            group.setdefault("bias_correction", True)
            group.setdefault("adamw_mode", self.adam_w_mode)
            group.setdefault("amsgrad", False)

    # ------------------------------------------------------------------------------------------------
    # Step
    # ------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Performs one optimization step on every parameter that has a gradient.

        Args:
            closure: Optional callable that re-evaluates the model and returns the loss; it is called with
                gradients enabled before the update.

        Returns:
            The closure's loss, or None without a closure.

        Raises:
            RuntimeError: A parameter is not on the CPU, a gradient is sparse, or a parameter/gradient is
                not contiguous or has an unsupported dtype (the message names the group, the parameter
                index and the fix); also any error of the kernel (``adam_step``), which validates every
                tensor again.
            ValueError: A group's hyper-parameters are out of range.
            NotImplementedError: A group has ``amsgrad=True``.

        Side effects:
            Updates parameters and state in place; builds/loads the kernel on first use.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group_index, group in enumerate(self.param_groups):
            if group.get("amsgrad", False):
                raise NotImplementedError(
                    f"CPUAdam: param_groups[{group_index}] has amsgrad=True, which the cpu_adam kernel does "
                    "not implement; use torch.optim.AdamW(amsgrad=True) instead."
                )
            beta1, beta2 = group["betas"]
            _check_hyper_parameters(
                lr=group["lr"], betas=(beta1, beta2), eps=group["eps"], weight_decay=group["weight_decay"]
            )
            params: list[torch.Tensor] = []
            grads: list[torch.Tensor] = []
            exp_avgs: list[torch.Tensor] = []
            exp_avg_sqs: list[torch.Tensor] = []
            steps: list[int] = []
            for param_index, param in enumerate(group["params"]):
                if param.grad is None:
                    continue
                _check_param(param, group_index, param_index)
                state = self._init_state(param)
                state["step"] += 1
                params.append(param)
                grads.append(param.grad)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                steps.append(state["step"])
            if not params:
                continue
            kernel = self._kernel()
            # Parameters normally share one step count; group by it so each call gets its own count.
            for step, indices in _group_by_step(steps).items():
                kernel.adam_step(
                    [params[i] for i in indices],
                    [grads[i] for i in indices],
                    [exp_avgs[i] for i in indices],
                    [exp_avg_sqs[i] for i in indices],
                    step,
                    float(group["lr"]),
                    float(beta1),
                    float(beta2),
                    float(group["eps"]),
                    float(group["weight_decay"]),
                    bool(group["bias_correction"]),
                    bool(group["adamw_mode"]),
                )
        return loss


def _group_by_step(steps: list[int]) -> dict[int, list[int]]:
    """Maps each distinct step count to the indices having it (insertion order kept)."""
    groups: dict[int, list[int]] = {}
    for index, step in enumerate(steps):
        groups.setdefault(step, []).append(index)
    return groups


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
            f"CPUAdam: {where} is on device {param.device} (gradient on {grad.device}); CPUAdam updates CPU "
            "tensors only. Use anyaccel's FusedAdam (or torch.optim.AdamW(fused=True)) for accelerator "
            "tensors, or keep the parameters on the CPU (ZeRO-Offload)."
        )
    if grad.is_sparse or grad.layout != torch.strided:
        raise RuntimeError(
            f"CPUAdam: {where} has a sparse gradient (layout {grad.layout}); CPUAdam supports dense "
            "gradients only. Use torch.optim.SparseAdam for sparse gradients, or densify them."
        )
    if param.dtype not in _PARAM_DTYPES:
        raise RuntimeError(
            f"CPUAdam: {where} has dtype {param.dtype}; accepted parameter dtypes are float32, bfloat16 "
            "and float16."
        )
    if not param.is_contiguous():
        raise RuntimeError(
            f"CPUAdam: {where} is not contiguous (shape {tuple(param.shape)}, strides {param.stride()}); "
            "the kernel updates parameters in place, so make the parameter contiguous before building the "
            "optimizer (e.g. p.data = p.data.contiguous())."
        )


def _check_hyper_parameters(lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> None:
    """Validates Adam hyper-parameters.

    Raises:
        ValueError: naming the parameter, its value and the accepted range, when ``lr < 0``, a beta is not
            in ``[0, 1)``, ``eps <= 0``, ``weight_decay < 0``, or any of them is not finite.
    """
    if len(betas) != 2:
        raise ValueError(f"CPUAdam: betas={betas!r} is invalid; accepted: a pair (beta1, beta2)")
    checks = (
        ("lr", lr, lr >= 0, "a finite lr >= 0"),
        ("betas[0]", betas[0], 0 <= betas[0] < 1, "0 <= beta1 < 1"),
        ("betas[1]", betas[1], 0 <= betas[1] < 1, "0 <= beta2 < 1"),
        ("eps", eps, eps > 0, "a finite eps > 0"),
        ("weight_decay", weight_decay, weight_decay >= 0, "a finite weight_decay >= 0"),
    )
    for name, value, ok, accepted in checks:
        if isinstance(value, torch.Tensor):
            raise ValueError(f"CPUAdam: {name} must be a Python number, got a tensor; pass float({name})")
        if not (math.isfinite(value) and ok):
            raise ValueError(f"CPUAdam: {name}={value!r} is invalid; accepted: {accepted}")


# The accelerator-side Adam lives in its own module (CUDA C++ / Triton implementations); re-exported here so
# ``from anyaccel.ops.adam import FusedAdam`` works as DeepSpeed's ``deepspeed.ops.adam`` does.
from anyaccel.ops.fused_adam import FusedAdam  # noqa: E402
