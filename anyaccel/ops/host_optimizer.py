"""``HostOptimizer``: what anyaccel's CPU (host) optimizers ``CPUAdam`` and ``CPULion`` share.

A host optimizer updates parameters held in CPU memory (ZeRO-Offload style) with one native kernel call per
parameter group. The shared part is everything around that call: loading the op once per process (through
its op builder, on the first ``step()`` that has gradients), validating parameters and gradients (CPU,
dense, contiguous, a supported dtype) with messages that name the tensor and the fix, creating state
tensors (fp32, or the parameter dtype with ``fp32_optimizer_states=False``), gathering one group's tensors
into lists, and a ``load_state_dict`` that keeps fp32 state of 16-bit parameters in fp32 (the base
``torch.optim.Optimizer.load_state_dict`` casts floating state to the parameter dtype, see
https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.load_state_dict.html).

A subclass supplies data (builder, state keys, message fragments) and two hooks: ``_check_group`` (its
hyper-parameter checks) and ``_step_group`` (its kernel call).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import torch

__all__ = ["PARAM_DTYPES", "GroupTensors", "HostOptimizer", "check_beta_pair", "check_hyper_parameters"]

#: Parameter dtypes the host kernels accept; gradients must have the parameter's dtype (the kernels check).
PARAM_DTYPES: frozenset[torch.dtype] = frozenset({torch.float32, torch.bfloat16, torch.float16})

#: One hyper-parameter check: (name in messages, value, accepted range in words, predicate on the value).
HyperParameterCheck = tuple[str, Any, str, Callable[[Any], bool]]


@dataclasses.dataclass(frozen=True)
class GroupTensors:
    """The tensors of one parameter group that one step updates: the parameters that have gradients.

    Attributes:
        params: The parameters (CPU, contiguous, fp32/bf16/fp16), in group order.
        grads: Their gradients, same order.
        states: State key (``HostOptimizer._STATE_KEYS``) -> that state tensor of each parameter, same order.
        steps: Each parameter's step count after this step's increment (1 at the first step).
    """

    params: list[torch.Tensor]
    grads: list[torch.Tensor]
    states: dict[str, list[torch.Tensor]]
    steps: list[int]


class HostOptimizer(torch.optim.Optimizer):
    """Base class of optimizers whose step is one native CPU kernel call per parameter group.

    Subclasses set these class attributes:

    * ``_NAME``: the name that starts every error message (``"CPUAdam"``).
    * ``_FAMILY``: the op family (``"adam"``); the kernel is its ``cpu`` implementation, loaded through
      :mod:`anyaccel.ops.dispatch` on the first kernel use, so importing ``anyaccel.ops`` builds nothing.
    * ``_STATE_KEYS``: the per-parameter state tensors, each shaped like the parameter
      (``("exp_avg", "exp_avg_sq")``).
    * ``_ACCELERATOR_ALTERNATIVE``: what to use for accelerator tensors, for the wrong-device message.
    * ``_SPARSE_FIX``: the last sentence of the sparse-gradient message.
    * ``_NOT_CONTIGUOUS``: the non-contiguous message after ``"<_NAME>: "``, a ``str.format`` template
      with fields ``where``, ``shape``, ``strides``, ``grad_strides``.
    * ``_CHECK_GRAD_CONTIGUOUS``: whether a non-contiguous gradient is rejected here (else the kernel
      rejects it, naming its list index).

    and implement :meth:`_check_group` and :meth:`_step_group`.

    State per parameter: ``step`` (a Python ``int``, incremented before the kernel call) and the tensors of
    ``_STATE_KEYS`` (contiguous; fp32 when ``fp32_optimizer_states`` else the parameter dtype).

    Args:
        params: Parameters (CPU, contiguous, fp32/bf16/fp16 tensors) or parameter-group dicts, as for any
            ``torch.optim.Optimizer``.
        defaults: The subclass's per-group defaults (hyper-parameters), already validated.
        fp32_optimizer_states: Keep state tensors in fp32 for 16-bit parameters; if False, in the
            parameter dtype.

    Raises:
        ValueError, TypeError: From ``torch.optim.Optimizer`` for malformed ``params``.

    Side effects:
        None at construction; the first ``step()`` with a gradient builds or loads the op (see
        :meth:`_kernel`).
    """

    _NAME: ClassVar[str] = "HostOptimizer"
    _FAMILY: ClassVar[str] = ""
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ()
    _ACCELERATOR_ALTERNATIVE: ClassVar[str] = ""
    _SPARSE_FIX: ClassVar[str] = ""
    _NOT_CONTIGUOUS: ClassVar[str] = ""
    _CHECK_GRAD_CONTIGUOUS: ClassVar[bool] = False

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        defaults: dict[str, Any],
        fp32_optimizer_states: bool,
    ) -> None:
        super().__init__(params, defaults)
        self.fp32_optimizer_states = fp32_optimizer_states

    # ------------------------------------------------------------------------------------------------
    # Hooks
    # ------------------------------------------------------------------------------------------------

    def _check_group(self, group_index: int, group: dict[str, Any]) -> None:
        """Validates one group's hyper-parameters before its step.

        Args:
            group_index: The group's index in ``param_groups`` (for messages).
            group: The group dict.

        Raises:
            ValueError, NotImplementedError: As the subclass documents.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement _check_group")

    def _step_group(self, kernel: Any, group: dict[str, Any], tensors: GroupTensors) -> None:
        """Calls the kernel for one group's parameters that have gradients.

        Args:
            kernel: The loaded op module (:meth:`_kernel`).
            group: The group dict (hyper-parameters).
            tensors: The group's validated tensors, at least one parameter.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement _step_group")

    # ------------------------------------------------------------------------------------------------
    # Kernel loading
    # ------------------------------------------------------------------------------------------------

    @classmethod
    def _kernel(cls) -> Any:
        """Returns the loaded op (the family's ``cpu`` implementation), building it on first use.

        Returns:
            The op module; its attributes are the family's torch ops (``adam_step``, ``isa``).

        Raises:
            Whatever the builder's ``load()`` raises (a typed build error naming the compiler's first error
            lines and the full log).

        Side effects:
            May run the compiler (cold cache, a few seconds) and loads a shared library; reads
            ``ANYACCEL_CPU_ISA`` and ``ANYACCEL_CACHE_DIR``. Cached by :mod:`anyaccel.ops.dispatch` for the
            process.
        """
        from anyaccel.ops import dispatch

        return dispatch.load(cls._FAMILY, "cpu")

    # ------------------------------------------------------------------------------------------------
    # State
    # ------------------------------------------------------------------------------------------------

    def _state_dtype(self, param: torch.Tensor) -> torch.dtype:
        """Returns the dtype of the state tensors for ``param``."""
        return torch.float32 if self.fp32_optimizer_states else param.dtype

    def _init_state(self, param: torch.Tensor) -> dict[str, Any]:
        """Creates ``step=0`` and zero state tensors for ``param`` (same shape, contiguous) if absent."""
        state = self.state[param]
        if len(state) == 0:
            state["step"] = 0
            dtype = self._state_dtype(param)
            for key in self._STATE_KEYS:
                state[key] = torch.zeros(param.shape, dtype=dtype, device=param.device)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a state saved by ``state_dict()`` so that training continues identically.

        After ``torch.optim.Optimizer.load_state_dict`` has restored groups and state (casting floating
        state to each parameter's dtype), the tensors of ``_STATE_KEYS`` are copied again from
        ``state_dict`` in this optimizer's state dtype, so fp32 state of bf16/fp16 parameters is not
        rounded, and ``step`` is stored as an ``int`` (a tensor ``step``, as ``torch.optim`` saves it, is
        accepted).

        Args:
            state_dict: A dict with ``"state"`` (parameter index -> state) and ``"param_groups"``.

        Raises:
            ValueError: The saved groups do not match this optimizer's groups (from the base class).
        """
        super().load_state_dict(state_dict)
        saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        saved_state = state_dict["state"]
        for saved_id, param in zip(saved_ids, params, strict=False):
            if saved_id not in saved_state:
                continue
            saved = saved_state[saved_id]
            state = self.state[param]
            if "step" in saved:
                step = saved["step"]
                state["step"] = int(step.item()) if isinstance(step, torch.Tensor) else int(step)
            dtype = self._state_dtype(param)
            for key in self._STATE_KEYS:
                if key in saved:
                    state[key] = saved[key].to(device=param.device, dtype=dtype, copy=True).contiguous()

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
            RuntimeError: A parameter or gradient is not on the CPU, a gradient is sparse, or a parameter
                (or, where the subclass checks it, a gradient) is not contiguous or has an unsupported dtype
                (the message names the group, the parameter index and the fix); also any error of the
                kernel, which validates every tensor again.
            ValueError: A group's hyper-parameters are out of range (from :meth:`_check_group`).
            NotImplementedError: A group asks for an unimplemented feature (``CPUAdam``: ``amsgrad``).

        Side effects:
            Updates parameters and state in place; builds/loads the kernel on the first step that has a
            gradient.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group_index, group in enumerate(self.param_groups):
            self._check_group(group_index, group)
            tensors = GroupTensors([], [], {key: [] for key in self._STATE_KEYS}, [])
            for param_index, param in enumerate(group["params"]):
                if param.grad is None:
                    continue
                self._check_param(param, group_index, param_index)
                state = self._init_state(param)
                state["step"] += 1
                tensors.params.append(param)
                tensors.grads.append(param.grad)
                for key, column in tensors.states.items():
                    column.append(state[key])
                tensors.steps.append(state["step"])
            if tensors.params:
                self._step_group(self._kernel(), group, tensors)
        return loss

    def _check_param(self, param: torch.Tensor, group_index: int, param_index: int) -> None:
        """Raises a clear error for a parameter/gradient the CPU kernel cannot update.

        Args:
            param: A parameter whose ``grad`` is not None.
            group_index: Its group's index (for the message).
            param_index: Its index in the group (for the message).

        Raises:
            RuntimeError: non-CPU parameter or gradient, sparse gradient, dtype outside
                :data:`PARAM_DTYPES`, or non-contiguous parameter (or gradient, with
                ``_CHECK_GRAD_CONTIGUOUS``).
        """
        name = self._NAME
        where = f"param_groups[{group_index}]['params'][{param_index}]"
        grad = param.grad
        assert grad is not None  # checked by the caller
        if param.device.type != "cpu" or grad.device.type != "cpu":
            raise RuntimeError(
                f"{name}: {where} is on device {param.device} (gradient on {grad.device}); {name} updates CPU "
                f"tensors only. Use {self._ACCELERATOR_ALTERNATIVE} for accelerator tensors, or keep the "
                "parameters on the CPU (ZeRO-Offload)."
            )
        if grad.is_sparse or grad.layout != torch.strided:
            raise RuntimeError(
                f"{name}: {where} has a sparse gradient (layout {grad.layout}); {name} supports dense gradients "
                f"only. {self._SPARSE_FIX}"
            )
        if param.dtype not in PARAM_DTYPES:
            raise RuntimeError(
                f"{name}: {where} has dtype {param.dtype}; accepted parameter dtypes are float32, bfloat16 and "
                "float16."
            )
        if not param.is_contiguous() or (self._CHECK_GRAD_CONTIGUOUS and not grad.is_contiguous()):
            detail = self._NOT_CONTIGUOUS.format(
                where=where, shape=tuple(param.shape), strides=param.stride(), grad_strides=grad.stride()
            )
            raise RuntimeError(f"{name}: {detail}")


def check_beta_pair(owner: str, betas: Sequence[float]) -> None:
    """Checks that ``betas`` is a pair, before its entries are read.

    Args:
        owner: The optimizer's name, which starts the message (``"CPUAdam"``).
        betas: The ``betas`` argument (any sequence).

    Raises:
        ValueError: ``len(betas) != 2`` (the message shows ``betas`` and the accepted form).
    """
    if len(betas) != 2:
        raise ValueError(f"{owner}: betas={betas!r} is invalid; accepted: a pair (beta1, beta2)")


def check_hyper_parameters(owner: str, checks: Sequence[HyperParameterCheck]) -> None:
    """Checks that each hyper-parameter is a finite Python number within its range.

    Args:
        owner: The optimizer's name, which starts every message (``"CPUAdam"``).
        checks: ``(name, value, accepted range in words, predicate)`` per hyper-parameter, in the order
            they are checked; the predicate is called only on a finite, non-tensor value.

    Raises:
        ValueError: For the first failing value: it is a tensor (the fix: pass a float), or it is not
            finite or fails its predicate (the message names it, its value and the accepted range).
    """
    for name, value, accepted, ok in checks:
        if isinstance(value, torch.Tensor):
            raise ValueError(f"{owner}: {name} must be a Python number, got a tensor; pass float({name})")
        if not (math.isfinite(value) and ok(value)):
            raise ValueError(f"{owner}: {name}={value!r} is invalid; accepted: {accepted}")
