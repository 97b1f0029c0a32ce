"""``ListOptimizer``: the one base of anyaccel's optimizers (``CPUAdam``, ``FusedAdam``, ``CPULion``, ...), with
its hyper-parameter and parameter validation; state and checkpoints are `anyaccel.ops.optimizer.state`,
plans and launches `anyaccel.ops.optimizer.plans`, the step protocol `anyaccel.ops.optimizer.hooks`.

* **Messages name what the user knows:** ``param_groups[0]['params'][1]``, ``param_groups[0]['betas'][0]``,
  the constructor argument ``betas[0]``; never the kernel's ``grads[0]``.
* Inference tensors are refused (the kernels update parameters in place).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import torch
from typing_extensions import override

from anyaccel.ops import validation
from anyaccel.ops.optimizer.hooks import step_entry
from anyaccel.ops.optimizer.plans import GroupPlan, PlanMixin, Prepared
from anyaccel.ops.optimizer.state import CheckpointMixin, Generation, StateMap, memory_format_of
from anyaccel.spec import Function
from anyaccel.spec import op_spec as family_spec

__all__ = ["PARAM_DTYPES", "Hyper", "ListOptimizer"]

#: Parameter dtypes the optimizer kernels update (the spec's dtype combinations).
PARAM_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)


@dataclasses.dataclass(frozen=True)
class Hyper:
    """One hyper-parameter of a group and the op argument it feeds.

    Attributes:
        key: the group key (``"lr"``, ``"betas"``).
        kernel: the op spec argument it becomes (``"beta1"``); its range in the spec applies.
        index: the element of a sequence-valued key (``betas[0]``), or None.
        kind: ``"float"`` (a Python number, finite in float32, within the spec range) or ``"bool"``.
    """

    key: str
    kernel: str
    index: int | None = None
    kind: str = "float"

    def label(self) -> str:
        """The name in constructor messages: ``"lr"``, ``"betas[0]"``."""
        return self.key if self.index is None else f"{self.key}[{self.index}]"

    def where(self, group_index: int) -> str:
        """The name in step messages: ``"param_groups[0]['betas'][0]"``."""
        base = f"param_groups[{group_index}][{self.key!r}]"
        return base if self.index is None else f"{base}[{self.index}]"


class ListOptimizer(CheckpointMixin, PlanMixin):
    """Base of optimizers whose step is one op call per bucket of a parameter group.

    Subclasses set:

    * ``_NAME``: the first word of every message (``"CPUAdam"``).
    * ``_FAMILY``: the op family (``"adam"``); its spec gives the step function, its argument ranges and the
      accepted dtype combinations.
    * ``_STATE_KEYS``: the state tensors per parameter (``("exp_avg", "exp_avg_sq")``); the op's list
      argument of each is the key plus ``"s"`` (``exp_avgs``).
    * ``_HYPERS``: the group's hyper-parameters ([`Hyper`][anyaccel.ops.optimizer.base.Hyper]), in the order they are
      checked.
    * ``_HOST``: True for host optimizers (CPU parameters only, DeepSpeed's ``DeepSpeedCPUAdam`` contract);
      False for optimizers that take any device with an implementation.
    * ``_ALTERNATIVE``: what to use for tensors on the wrong kind of device, for the message.
    * ``_KEY_ALIASES``: torch.optim group keys mapped onto this optimizer's (``decoupled_weight_decay``).
    * ``_FIXED``: group keys with the only value implemented (``{"amsgrad": False}``); another value raises
      ``NotImplementedError``.

    and may override `_check_group_extra` (constraints between hyper-parameters) and
    `_launch_scalars` (op arguments that are not group keys).

    Args:
        params: parameters or parameter-group dicts, as for any ``torch.optim.Optimizer``.
        defaults: the group defaults; the hyper-parameters among them are validated here, and a
            ``ValueError``/``TypeError`` names the constructor argument.
        master_weights: keep an fp32 ``master`` copy of each 16-bit parameter; the kernel updates it and
            writes the rounded result into the parameter in the same pass.
        fp32_optimizer_states: keep state tensors in fp32 for 16-bit parameters (else in their dtype).
        capturable: keep the step count and learning rate on the device (CUDA graphs); needs an
            implementation with ``<family>_step_planned_capturable``.
        impl: force an implementation by name; else ``ANYACCEL_IMPL_<FAMILY>`` or the highest priority one
            available for the parameters' device type.

    Raises:
        ValueError: a hyper-parameter is out of range; a group lists a parameter twice; a parameter has an
            unsupported dtype, is on the wrong kind of device, is an inference tensor, or is neither contiguous nor
            channels-last (channels-last parameters are updated in their layout, as torch.optim does).
        TypeError: a hyper-parameter is not a number (or a bool where a bool belongs).

    Side effects:
        None at construction; the first ``step()`` loads (possibly compiles) the ops.
    """

    _NAME: ClassVar[str] = "ListOptimizer"
    _FAMILY: ClassVar[str] = ""
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ()
    _HYPERS: ClassVar[tuple[Hyper, ...]] = ()
    _HOST: ClassVar[bool] = False
    _ALTERNATIVE: ClassVar[str] = ""
    _KEY_ALIASES: ClassVar[Mapping[str, str]] = {}
    _FIXED: ClassVar[Mapping[str, Any]] = {}
    def __init__(self, params: Iterable[Any], defaults: dict[str, Any], *, master_weights: bool = False,
                 fp32_optimizer_states: bool = True, capturable: bool = False, impl: str | None = None) -> None:
        for name, value in (("master_weights", master_weights), ("fp32_optimizer_states", fp32_optimizer_states),
                            ("capturable", capturable)):
            if not isinstance(value, bool):
                raise TypeError(f"{self._NAME}: {name}={value!r} is invalid; accepted: True or False")
        if impl is not None and not isinstance(impl, str):
            raise TypeError(f"{self._NAME}: impl={impl!r} is invalid; accepted: an implementation name or None")
        self.master_weights = master_weights
        self.fp32_optimizer_states = fp32_optimizer_states
        self.capturable = capturable
        self.impl = impl
        self._gen = Generation()
        self._plans: dict[int, GroupPlan] = {}
        self._lr_tensors: dict[tuple[int, torch.device], torch.Tensor] = {}
        self._scalar_cache: dict[int, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        self._scalars_of(defaults, None)
        super().__init__(params, defaults)
        self.state = StateMap(self._gen, self.state)

    @classmethod
    def _function(cls, suffix: str = "step") -> Function:
        """The spec function ``<family>_<suffix>``."""
        return _spec_function(cls._FAMILY, suffix)

    @classmethod
    def _ranges(cls) -> dict[str, validation.Interval]:
        """The spec ranges of the step function's scalars, by argument name."""
        return _spec_ranges(cls._FAMILY)

    @classmethod
    def _accepted_combos(cls) -> frozenset[tuple[str, str, str, str]]:
        """The spec's accepted (param, grad, state, model copy) dtype names."""
        return _spec_combos(cls._FAMILY)

    def _scalars_of(self, group: Mapping[str, Any], group_index: int | None) -> dict[str, Any]:
        """Validates a group's hyper-parameters; returns the op arguments they give (``{"beta1": 0.9, ...}``).

        Args:
            group: the group dict (or the constructor defaults).
            group_index: its index, or None for the constructor (messages then name the argument).

        Raises:
            TypeError: a value has the wrong type (a tensor where a Python float belongs, a pair that is not
                a tuple or list).
            ValueError: a value is out of its spec range, not finite, or not representable in float32.
            KeyError: a hyper-parameter key is missing from the group.
        """
        ranges = self._ranges()
        scalars: dict[str, Any] = {}
        for key, only in self._FIXED.items():
            if key in group and group[key] != only:
                where = key if group_index is None else f"param_groups[{group_index}][{key!r}]"
                raise NotImplementedError(f"{self._NAME}: {where}={group[key]!r} is not implemented by the "
                                          f"{self._FAMILY} kernels; accepted: {only!r}")
        for h in self._HYPERS:
            where = h.label() if group_index is None else h.where(group_index)
            if h.key not in group:
                raise KeyError(f"{self._NAME}: param_groups[{group_index}] has no {h.key!r}; every group needs it "
                               "(add_param_group fills it from the constructor's defaults)")
            value = group[h.key]
            if h.index is not None:
                if not isinstance(value, (tuple, list)) or len(value) <= h.index:
                    raise TypeError(f"{self._NAME}: {where.rsplit('[', 1)[0]}={value!r} is invalid; accepted: a "
                                    "pair of Python floats such as (0.9, 0.999)")
                value = value[h.index]
            if h.kind == "bool":
                if not isinstance(value, bool) and value not in (0, 1):
                    raise TypeError(f"{self._NAME}: {where}={value!r} is invalid; accepted: True or False")
                scalars[h.kernel] = bool(value)
                continue
            if isinstance(value, torch.Tensor) and h.kernel == "lr":
                scalars[h.kernel] = self._tensor_lr(value, where)
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{self._NAME}: {where}={value!r} is invalid; accepted: a Python float"
                                + (" (pass float(x) for a tensor)" if isinstance(value, torch.Tensor) else ""))
            interval = ranges.get(h.kernel)
            if interval is not None:
                problem = validation.scalar_problem(h.label(), value, interval, "float")
                if problem is not None:
                    raise ValueError(f"{self._NAME}: {where}={value!r} is invalid; {problem}")
            elif not math.isfinite(value) or abs(value) > validation.FLOAT32_MAX:
                raise ValueError(f"{self._NAME}: {where}={value!r} is invalid; accepted: a finite number "
                                 "representable in float32")
            scalars[h.kernel] = float(value)
        self._check_group_extra(scalars, group_index)
        return scalars

    def _tensor_lr(self, value: torch.Tensor, where: str) -> Any:
        """A learning rate given as a tensor: a 0-dim real tensor; its value is read (one sync) unless capturable."""
        if value.dim() != 0 or value.is_complex() or not value.is_floating_point():
            raise TypeError(f"{self._NAME}: {where} is a {value.dtype} tensor of shape {list(value.shape)}; "
                            "accepted: a Python float or a 0-dim floating-point tensor")
        if getattr(self, "capturable", False):
            return value
        lr = float(value.item())
        validation.check_scalar(self._NAME, where, lr, self._ranges().get("lr", "[0, inf)"), "float", ValueError)
        return lr

    def _check_group_extra(self, scalars: dict[str, Any], group_index: int | None) -> None:
        """Constraints between hyper-parameters (none by default).

        Args:
            scalars: the validated op arguments of the group.
            group_index: the group's index, or None for the constructor.

        Raises:
            ValueError: as the subclass documents.
        """

    @override
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Adds a group (torch's ``add_param_group``), validating its hyper-parameters and parameters first.

        Raises:
            ValueError, TypeError, KeyError: as `_scalars_of` and `_check_param`; a group that
                lists a tensor twice (its update would be a data race).
        """
        params = param_group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        index = len(self.param_groups)
        if len({id(p) for p in params}) != len(params):
            raise ValueError(f"{self._NAME}: param_groups[{index}] lists a parameter more than once; updating "
                             "the same tensor twice in one step is a data race. Pass each parameter once.")
        for i, p in enumerate(params):
            if isinstance(p, torch.Tensor):
                self._check_param(p, f"param_groups[{index}]['params'][{i}]")
        self._scalars_of({**self.defaults, **param_group}, index)
        super().add_param_group({**param_group, "params": params})

    def _check_param(self, p: torch.Tensor, where: str) -> None:
        """Raises for a parameter this optimizer cannot update (device kind, dtype, inference, contiguity)."""
        name = self._NAME
        if self._HOST and p.device.type != "cpu":
            raise ValueError(f"{name}: {where} is on {p.device}; {name} updates CPU tensors only (ZeRO-Offload). "
                             f"Use {self._ALTERNATIVE} for accelerator tensors, or keep the parameters on the CPU.")
        if p.dtype not in PARAM_DTYPES:
            raise ValueError(f"{name}: {where} has dtype {p.dtype}; accepted parameter dtypes: float32, bfloat16, "
                             "float16")
        if p.is_inference():
            raise ValueError(f"{name}: {where} is an inference tensor (created under torch.inference_mode()), which "
                             "torch forbids updating in place outside inference mode; create the parameter outside "
                             "inference mode or clone it (p = p.clone())")
        if p.layout != torch.strided or memory_format_of(p) is None:
            raise ValueError(f"{name}: {where} is not contiguous nor channels-last (shape {list(p.shape)}, strides "
                             f"{list(p.stride())});"
                             " the kernel updates it in place, so make it contiguous before building the optimizer "
                             "(p.data = p.data.contiguous())")

    @override
    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """torch's ``zero_grad``; ``set_to_none=None`` means the ``set_grad_none`` attribute (DeepSpeed's
        argument, True unless a subclass sets it). A cached plan stays valid: gradients are matched by
        storage at the next step."""
        super().zero_grad(set_to_none=getattr(self, "set_grad_none", True) if set_to_none is None else set_to_none)

    @override
    @step_entry
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One optimization step of every parameter that has a gradient: one op call per bucket.

        Args:
            closure: re-evaluates the model and returns the loss (called with gradients enabled first).

        Returns:
            The closure's loss, or None.

        Raises:
            ValueError, TypeError, KeyError: a hyper-parameter, parameter or gradient does not fit (the message
                names it as ``param_groups[g][...]``): wrong device kind, unsupported dtype, sparse gradient,
                non-contiguous parameter, inference tensor, memory shared between tensors of the step.
            RuntimeError: ``capturable=False`` while a CUDA graph is being captured, or the parameter set
                changed during a capture; errors of loading an op (a typed build error).

        Nothing has changed when it raises: validation and op loading come before any state is created,
        any step count advanced or any tensor written.

        Threads: steps of one optimizer are serialised by its re-entrant step lock
        ([`step_lock`][anyaccel.ops.optimizer.hooks.step_lock], also held by ``state_dict`` and ``load_state_dict``):
        two threads calling ``step()`` run one whole step after the other, each counted once. Gradients
        written by another thread during a step are not covered (as in ``torch.optim``).

        Side effects: creates state on a parameter's first step; loads (maybe compiles) ops on first use;
        updates parameters and state in place and bumps the parameters' version counters; runs torch.optim's
        step pre- and post-hooks and, while a torch profiler runs, records ``Optimizer.step#<Class>.step``
        ([`step_entry`][anyaccel.ops.optimizer.base.step_entry]).
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        prepared: list[Prepared] = []
        for i, g in enumerate(self.param_groups):
            prep = self._prepare(i, g, not prepared)
            if prep is not None:
                prepared.append(prep)
        for prep in prepared:
            self._apply(prep)
        return loss

    def _group_scalars(self, index: int, group: dict[str, Any]) -> dict[str, Any]:
        """`_scalars_of`, cached while the group's hyper-parameter values are unchanged (tensors: never)."""
        snapshot = tuple([_frozen(group.get(key)) for key in _hyper_keys_of(type(self))])
        cached = self._scalar_cache.get(index)
        if cached is not None and cached[0] == snapshot:
            return cached[1]
        scalars = self._scalars_of(group, index)
        if not any(isinstance(v, torch.Tensor) for v in snapshot):
            self._scalar_cache[index] = (snapshot, scalars)
        return scalars


_HYPER_KEYS: dict[type, tuple[str, ...]] = {}


def _hyper_keys_of(cls: type[ListOptimizer]) -> tuple[str, ...]:
    """The group keys an optimizer class reads (its hyper-parameters and fixed options), made once per class."""
    keys = _HYPER_KEYS.get(cls)
    if keys is None:
        keys = _HYPER_KEYS[cls] = tuple(dict.fromkeys([h.key for h in cls._HYPERS] + list(cls._FIXED)))
    return keys


@functools.cache
def _spec_function(family: str, suffix: str) -> Function:
    return family_spec(family).function(f"{family}_{suffix}")


@functools.cache
def _spec_ranges(family: str) -> dict[str, validation.Interval]:
    return {name: validation.Interval.parse(text) for name, text in _spec_function(family, "step").ranges}


@functools.cache
def _spec_combos(family: str) -> frozenset[tuple[str, str, str, str]]:
    return frozenset(c.as_tuple() for c in family_spec(family).dtypes)


def _frozen(value: Any) -> Any:
    """A list hyper-parameter as a tuple, so that a cached snapshot does not change with it."""
    return tuple(value) if isinstance(value, list) else value
