"""``ListOptimizer``: the one base of anyaccel's optimizers (``CPUAdam``, ``FusedAdam``, ``CPULion``, ...).

An anyaccel optimizer updates every parameter of a group that has a gradient with one op call per bucket
(tensors of one device and one dtype combination), through the op family's implementation for that
device type (:mod:`anyaccel.ops.dispatch`). What this base owns, for every family and device:

* **Validation before mutation.** ``step()`` first checks every group (hyper-parameters against the ranges
  of the op spec, every parameter and gradient: device, dtype, layout, contiguity, inference tensors,
  memory shared between tensors of a step) and loads the ops (which may compile); only then does it create
  state, advance step counts and launch. A ``step()`` that raises has changed nothing.
* **Messages name what the user knows:** ``param_groups[0]['params'][1]``, ``param_groups[0]['betas'][0]``,
  the constructor argument ``betas[0]``; never the kernel's ``grads[0]``.
* **Autograd safety.** The kernels write through raw pointers, so the base bumps the version counter of every
  parameter it updates (a backward through weights changed by ``step()`` then raises "modified by an
  inplace operation", as with ``torch.optim``), and refuses inference tensors.
* **A per-group plan, cached.** The bucketing of a group is built once and reused while the same
  parameters have gradients and no state entry was replaced; a step then costs a few list operations per
  tensor (fewest when the gradient objects are those of the last step, as with
  ``zero_grad(set_to_none=False)``: their identities are compared, nothing is re-checked). Device
  implementations that have ``<family>_plan`` keep the validated tensor table on the device
  (``csrc/includes/cuda/multi_tensor_apply.cuh``), so a step launches with no tensor list at all; the table is
  rebuilt when a parameter's or gradient's storage moves (``p.data = ...``, a new gradient allocation).
* **Capturable steps** (``capturable=True``): the step count and the learning rate live in device memory, so
  ``step()`` can be captured in a CUDA graph and replayed (as ``torch.optim``'s ``capturable=True``).
* **Checkpoints.** ``state_dict()`` holds plain dicts and tensors (``torch.load(weights_only=True)`` reads
  it); ``load_state_dict`` validates the whole dict first (groups, keys, shapes, dtypes, torch options this
  optimizer does not implement), keeps fp32 state of 16-bit parameters in fp32, maps torch's
  ``decoupled_weight_decay``, and leaves the optimizer unchanged when it raises.

State per parameter: ``step``, a 0-dim float32 tensor (as ``torch.optim`` keeps it; parameters stepped
together share one, so a step advances it once; on the device with ``capturable``), the family's state
tensors (``exp_avg``, ...; contiguous, shaped like the parameter), and ``master`` (an fp32 copy of a 16-bit
parameter) with ``master_weights``.

Limits (documented rather than checked, as checking costs a pass over every tensor per step): a state tensor
whose storage is replaced in place (``state['exp_avg'].data = x``) is not noticed by a cached plan; assign
the entry instead (``state['exp_avg'] = x``), which is.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import operator
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import torch

from anyaccel._compat import tensor_data, torch_optim
from anyaccel._compat.torch_optim import step_entry
from anyaccel.ops import cpu_threads, dispatch, validation
from anyaccel.ops.spec import Function
from anyaccel.ops.spec import spec as family_spec

__all__ = ["LOW_PRECISION", "PARAM_DTYPES", "Hyper", "ListOptimizer", "step_entry"]

#: Parameter dtypes the optimizer kernels update (the spec's dtype combinations).
PARAM_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)
#: 16-bit parameter dtypes (state in fp32 unless ``fp32_optimizer_states=False``; masters with ``master_weights``).
LOW_PRECISION: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16)

#: torch.optim options a loaded state dict may carry, with the only value this optimizer implements.
_TORCH_OPTIONS = {"maximize": False, "amsgrad": False, "differentiable": False, "nesterov": False}
#: torch.optim options that choose an implementation, not the math: dropped at load.
_TORCH_IMPL_OPTIONS = ("foreach", "fused", "capturable")


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


class _Generation:
    """A counter bumped by every write to the optimizer's state mapping (cached plans compare it)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class _ParamState(dict[Any, Any]):
    """A parameter's state dict that bumps the owner's generation on every write through its API."""

    __slots__ = ("_gen",)

    def __init__(self, gen: _Generation, *args: Any) -> None:
        super().__init__(*args)
        self._gen = gen

    def __setitem__(self, key: Any, value: Any) -> None:
        self._gen.value += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self._gen.value += 1
        super().__delitem__(key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._gen.value += 1
        super().update(*args, **kwargs)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._gen.value += 1
        return super().setdefault(key, default)

    def pop(self, *args: Any) -> Any:
        self._gen.value += 1
        return super().pop(*args)

    def popitem(self) -> Any:
        self._gen.value += 1
        return super().popitem()

    def clear(self) -> None:
        self._gen.value += 1
        super().clear()

    def __reduce__(self) -> Any:  # pickles (and deep-copies) as a plain dict
        return (dict, (dict(self),))


class _StateMap(defaultdict[Any, Any]):
    """``optimizer.state``: parameter -> :class:`_ParamState`; inserting or removing an entry bumps the generation."""

    def __init__(self, gen: _Generation, items: Mapping[Any, Any] | None = None) -> None:
        super().__init__(None)
        self._gen = gen
        for key, value in (items or {}).items():
            dict.__setitem__(self, key, value if isinstance(value, _ParamState) else _ParamState(gen, value))

    def __missing__(self, key: Any) -> _ParamState:
        value = _ParamState(self._gen)
        dict.__setitem__(self, key, value)  # an empty entry changes no plan: no bump
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        self._gen.value += 1
        dict.__setitem__(self, key, value if isinstance(value, _ParamState) else _ParamState(self._gen, value))

    def __delitem__(self, key: Any) -> None:
        self._gen.value += 1
        dict.__delitem__(self, key)

    def __reduce__(self) -> Any:
        return (dict, ({k: dict(v) for k, v in self.items()},))


@dataclasses.dataclass
class _Bucket:
    """The tensors of one launch: one device, one dtype combination, one step counter.

    ``owners`` are the model parameters (their ``.grad`` is read each step); ``targets`` the tensors the
    kernel updates (the owners, or their fp32 masters, in which case ``copies`` are the owners).
    """

    device: torch.device
    owners: list[torch.Tensor]
    targets: list[torch.Tensor]
    copies: list[torch.Tensor]
    states: dict[str, list[torch.Tensor]]
    grads: list[torch.Tensor]
    owner_ptrs: list[int]
    step: torch.Tensor
    step_value: float
    labels: list[str]
    positions: list[int] = dataclasses.field(default_factory=list)
    grads_changed: bool = True
    plan: tuple[torch.Tensor, int, int, int] | None = None
    plan_grad_ptrs: list[int] | None = None
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)
    step_set: Callable[[float], None] | None = None
    launch: tuple[Any, ...] | None = None


@dataclasses.dataclass
class _GroupPlan:
    """A group's buckets and what they were built from (a cached plan is reused while these still hold)."""

    params: list[torch.Tensor]
    present: list[bool]
    buckets: list[_Bucket]
    generation: int
    new_state: dict[torch.Tensor, _ParamState]
    step_members: list[tuple[_Bucket, list[dict[str, Any]]]]
    #: the group's ``p.grad`` objects (None where absent) when the plan last passed validation
    grads_seen: list[torch.Tensor | None] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Prepared:
    """One group's validated step: its plan, its op and its kernel scalars."""

    index: int
    plan: _GroupPlan
    op: dict[str, Any]
    scalars: dict[str, Any]
    capturing: bool


class ListOptimizer(torch.optim.Optimizer):
    """Base of optimizers whose step is one op call per bucket of a parameter group.

    Subclasses set:

    * ``_NAME``: the first word of every message (``"CPUAdam"``).
    * ``_FAMILY``: the op family (``"adam"``); its spec gives the step function, its argument ranges and the
      accepted dtype combinations.
    * ``_STATE_KEYS``: the state tensors per parameter (``("exp_avg", "exp_avg_sq")``); the op's list
      argument of each is the key plus ``"s"`` (``exp_avgs``).
    * ``_HYPERS``: the group's hyper-parameters (:class:`Hyper`), in the order they are checked.
    * ``_HOST``: True for host optimizers (CPU parameters only, DeepSpeed's ``DeepSpeedCPUAdam`` contract);
      False for optimizers that take any device with an implementation.
    * ``_ALTERNATIVE``: what to use for tensors on the wrong kind of device, for the message.
    * ``_KEY_ALIASES``: torch.optim group keys mapped onto this optimizer's (``decoupled_weight_decay``).
    * ``_FIXED``: group keys with the only value implemented (``{"amsgrad": False}``); another value raises
      ``NotImplementedError``.

    and may override :meth:`_check_group_extra` (constraints between hyper-parameters) and
    :meth:`_launch_scalars` (op arguments that are not group keys).

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
            unsupported dtype, is on the wrong kind of device, is an inference tensor or not contiguous.
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
        self._gen = _Generation()
        self._plans: dict[int, _GroupPlan] = {}
        self._lr_tensors: dict[tuple[int, torch.device], torch.Tensor] = {}
        self._functions: dict[str, tuple[Any, dict[str, Any]]] = {}
        self._scalar_cache: dict[int, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        self._scalars_of(defaults, None)
        super().__init__(params, defaults)
        self.state = _StateMap(self._gen, self.state)

    # ------------------------------------------------------------------------------------------------
    # Family data
    # ------------------------------------------------------------------------------------------------

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

    # ------------------------------------------------------------------------------------------------
    # Hyper-parameters
    # ------------------------------------------------------------------------------------------------

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

    def _launch_scalars(self, prepared: _Prepared, bucket: _Bucket) -> dict[str, Any]:
        """The op arguments of one launch that are neither tensor lists nor group hyper-parameters."""
        return {}

    # ------------------------------------------------------------------------------------------------
    # Groups and parameters
    # ------------------------------------------------------------------------------------------------

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Adds a group (torch's ``add_param_group``), validating its hyper-parameters and parameters first.

        Raises:
            ValueError, TypeError, KeyError: as :meth:`_scalars_of` and :meth:`_check_param`; a group that
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
        if p.layout != torch.strided or not p.is_contiguous():
            raise ValueError(f"{name}: {where} is not contiguous (shape {list(p.shape)}, strides {list(p.stride())});"
                             " the kernel updates it in place, so make it contiguous before building the optimizer "
                             "(p.data = p.data.contiguous())")

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """torch's ``zero_grad``; ``set_to_none=None`` means the ``set_grad_none`` attribute (DeepSpeed's
        argument, True unless a subclass sets it). A cached plan stays valid: gradients are matched by
        storage at the next step."""
        super().zero_grad(set_to_none=getattr(self, "set_grad_none", True) if set_to_none is None else set_to_none)

    # ------------------------------------------------------------------------------------------------
    # Pickling, state_dict
    # ------------------------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """What pickling keeps: the public attributes (groups, state as plain dicts, options), no caches."""
        kept = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        kept["state"] = {k: dict(v) for k, v in self.state.items()}
        return kept

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if not hasattr(self, "_gen"):
            self._gen = _Generation()
        self._gen.value += 1
        self.state = _StateMap(self._gen, self.state)
        self._plans = {}
        self._lr_tensors = {}
        self._functions = {}
        self._scalar_cache = {}

    def state_dict(self) -> dict[str, Any]:
        """torch's ``state_dict`` with plain dicts (no anyaccel class), readable with ``weights_only=True``."""
        sd = super().state_dict()
        sd["state"] = {k: dict(v) for k, v in sd["state"].items()}
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a ``state_dict()`` of this optimizer, or of ``torch.optim`` / DeepSpeed's equivalent.

        The whole dict is validated before anything changes: the group and parameter counts; each group's
        hyper-parameters (spec ranges); torch options this optimizer does not implement (``maximize``,
        ``amsgrad``, ``differentiable``, ``nesterov`` set to True are refused); each parameter's state keys
        (``step`` and the family's tensors, ``master`` only with ``master_weights``), their types, shapes and
        dtypes (real floating point). torch's ``decoupled_weight_decay`` becomes this optimizer's mode
        (``_KEY_ALIASES``); ``foreach``/``fused``/``capturable`` are dropped (they pick an implementation).
        State tensors are copied in this optimizer's state dtype (fp32 for 16-bit parameters by default:
        no rounding), on the parameter's device.

        Args:
            state_dict: ``{"state": {index: {...}}, "param_groups": [{..., "params": [index, ...]}]}``.

        Raises:
            TypeError: the dict, a group or a state entry has the wrong type.
            ValueError: anything else does not fit; the message names the group, the parameter and the key.

        Nothing is changed when it raises. Load-state-dict pre/post hooks run as in ``torch.optim``.
        """
        pre_hooks, post_hooks = torch_optim.load_state_dict_hooks(self)
        for hook in pre_hooks:
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        groups, state = self._validated_state_dict(state_dict)
        self.__setstate__({"state": state, "param_groups": groups})
        for post_hook in post_hooks:
            post_hook(self)

    def _validated_state_dict(self, sd: Any) -> tuple[list[dict[str, Any]], dict[torch.Tensor, dict[str, Any]]]:
        name = f"{self._NAME}.load_state_dict"
        if not isinstance(sd, Mapping) or "state" not in sd or "param_groups" not in sd:
            keys = f" with keys {sorted(sd)}" if isinstance(sd, Mapping) else ""
            raise TypeError(f"{name}: expected a dict with 'state' and 'param_groups' (from optimizer.state_dict()), "
                            f"got {type(sd).__name__}{keys}")
        saved_groups, saved_state = sd["param_groups"], sd["state"]
        if not isinstance(saved_groups, Sequence) or not isinstance(saved_state, Mapping):
            raise TypeError(f"{name}: 'param_groups' must be a list and 'state' a dict")
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"{name}: the state dict has {len(saved_groups)} parameter groups, this optimizer "
                             f"{len(self.param_groups)}; load a state dict of an optimizer built the same way")
        groups: list[dict[str, Any]] = []
        id_to_param: dict[Any, tuple[torch.Tensor, str]] = {}
        for g, (saved, ours) in enumerate(zip(saved_groups, self.param_groups, strict=True)):
            if not isinstance(saved, Mapping) or not isinstance(saved.get("params"), Sequence):
                raise TypeError(f"{name}: param_groups[{g}] must be a dict with a 'params' list")
            if len(saved["params"]) != len(ours["params"]):
                raise ValueError(f"{name}: param_groups[{g}] has {len(saved['params'])} parameters in the state dict "
                                 f"and {len(ours['params'])} here; load a state dict of the same model")
            group = {k: v for k, v in ours.items() if k != "params"}
            for key, value in saved.items():
                if key == "params" or key in _TORCH_IMPL_OPTIONS:
                    continue
                if key in _TORCH_OPTIONS:
                    if value != _TORCH_OPTIONS[key]:
                        raise ValueError(f"{name}: param_groups[{g}] has {key}={value!r}, which {self._NAME} does "
                                         f"not implement; accepted: {key}={_TORCH_OPTIONS[key]!r}. Continue with "
                                         "the torch.optim optimizer that saved it instead.")
                    continue
                group[self._KEY_ALIASES.get(key, key)] = value
            self._scalars_of(group, g)
            group["params"] = ours["params"]
            groups.append(group)
            for i, (saved_id, p) in enumerate(zip(saved["params"], ours["params"], strict=True)):
                id_to_param[saved_id] = (p, f"param_groups[{g}]['params'][{i}]")
        state: dict[torch.Tensor, dict[str, Any]] = {}
        for saved_id, entry in saved_state.items():
            if saved_id not in id_to_param:
                raise ValueError(f"{name}: 'state' has an entry for parameter id {saved_id!r}, which no group lists")
            p, where = id_to_param[saved_id]
            state[p] = self._validated_param_state(name, where, p, entry)
        return groups, state

    def _validated_param_state(self, name: str, where: str, p: torch.Tensor, entry: Any) -> dict[str, Any]:
        if not isinstance(entry, Mapping):
            raise TypeError(f"{name}: the state of {where} must be a dict, got {type(entry).__name__}")
        if not entry:
            return {}
        allowed = {"step", *self._STATE_KEYS} | ({"master"} if self.master_weights else set())
        unknown = sorted(set(map(str, entry)) - allowed)
        if unknown:
            hint = (" ('master' needs master_weights=True)" if "master" in unknown else "")
            raise ValueError(f"{name}: the state of {where} has keys {unknown} that {self._NAME} does not use"
                             f"{hint}; accepted keys: {sorted(allowed)}")
        missing = [k for k in ("step", *self._STATE_KEYS) if k not in entry]
        if missing:
            raise ValueError(f"{name}: the state of {where} lacks {missing}; a saved state has 'step' and "
                             f"{list(self._STATE_KEYS)}")
        step = entry["step"]
        if isinstance(step, torch.Tensor):
            if step.numel() != 1 or step.is_complex():
                raise TypeError(f"{name}: {where} 'step' is a tensor of shape {list(step.shape)}; accepted: a "
                                "number or a one-element real tensor")
            step = step.item()
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not (
                math.isfinite(step) and step >= 0 and step == int(step) and step < 2**24):
            raise ValueError(f"{name}: {where} 'step'={step!r} is invalid; accepted: a whole number in [0, 2**24)")
        out: dict[str, Any] = {"step": torch.tensor(float(step), dtype=torch.float32)}
        master = entry.get("master")
        target_dtype = torch.float32 if master is not None or (self.master_weights and p.dtype in LOW_PRECISION) \
            else p.dtype
        for key in (*self._STATE_KEYS, *(["master"] if master is not None else [])):
            t = entry[key]
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name}: {where} {key!r} is a {type(t).__name__}; accepted: a tensor shaped like "
                                f"the parameter {list(p.shape)}")
            if t.is_complex() or not t.is_floating_point() or t.layout != torch.strided:
                raise ValueError(f"{name}: {where} {key!r} has dtype {t.dtype} and layout {t.layout}; accepted: a "
                                 "dense real floating-point tensor")
            if t.shape != p.shape:
                raise ValueError(f"{name}: {where} {key!r} has shape {list(t.shape)}, the parameter "
                                 f"{list(p.shape)}; load a state dict of the same model")
            dtype = torch.float32 if key == "master" else self._state_dtype(target_dtype)
            out[key] = t.detach().to(device=p.device, dtype=dtype, copy=True).contiguous()
        return out

    def _state_dtype(self, target_dtype: torch.dtype) -> torch.dtype:
        """The state dtype of a parameter whose kernel-updated tensor has ``target_dtype``."""
        if self.fp32_optimizer_states or target_dtype not in LOW_PRECISION:
            return torch.float32
        return target_dtype

    # ------------------------------------------------------------------------------------------------
    # Step
    # ------------------------------------------------------------------------------------------------

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

        Side effects: creates state on a parameter's first step; loads (maybe compiles) ops on first use;
        updates parameters and state in place and bumps the parameters' version counters; runs torch.optim's
        step pre- and post-hooks and, while a torch profiler runs, records ``Optimizer.step#<Class>.step``
        (:func:`step_entry`).
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        prepared = [p for p in (self._prepare(i, g) for i, g in enumerate(self.param_groups)) if p is not None]
        for prep in prepared:
            self._apply(prep)
        return loss

    def _prepare(self, index: int, group: dict[str, Any]) -> _Prepared | None:
        """Validates group ``index`` and returns its step; changes nothing."""
        scalars = self._group_scalars(index, group)
        params = group["params"]
        # a comprehension, not map(attrgetter("grad")): the interpreter caches the attribute lookup (half the cost)
        grads = [p.grad for p in params]
        plan = self._plans.get(index)
        # the cached plan was built for these parameter objects, and no state entry was replaced since
        fits = plan is not None and plan.generation == self._gen.value and len(plan.params) == len(params) and \
            all(map(operator.is_, params, plan.params))
        if fits and plan is not None and len(plan.grads_seen) == len(params) and \
                all(map(operator.is_, grads, plan.grads_seen)) and \
                all(tensor_data.same_data_ptrs(b.owners, b.owner_ptrs) for b in plan.buckets):
            # the same parameters, storage and gradient objects as the last step: nothing to re-validate
            return self._prepare_steady(index, plan, scalars)
        present = list(map(operator.is_not, grads, itertools.repeat(None)))
        if not any(present):
            return None
        device = next(g for g in grads if g is not None).device
        capturing = self._check_capture(device)
        if plan is None or not fits or plan.present != present or not self._refresh(plan, grads):
            if capturing:
                raise RuntimeError(f"{self._NAME}: the parameters with gradients (or their storage, or the state) "
                                   "changed during a graph capture; run one step outside the capture first (warm-up) "
                                   "and keep the parameter set fixed while capturing")
            plan = self._build(index, group, [p for p, keep in zip(params, present, strict=True) if keep])
        plan.grads_seen = grads
        return self._prepared(index, plan, scalars, capturing)

    def _prepare_steady(self, index: int, plan: _GroupPlan, scalars: dict[str, Any]) -> _Prepared | None:
        """:meth:`_prepare` when the group's parameters, their storage and their gradient objects are those the
        cached plan last validated (gradients kept across steps, ``zero_grad(set_to_none=False)``): the
        gradients' values may have changed, and a gradient's storage may have been swapped in place
        (``g.data = x``), which a bucket's device table notices by its data pointers."""
        buckets = plan.buckets
        if not buckets:
            return None
        capturing = self._check_capture(buckets[0].device)
        for b in buckets:
            b.grads_changed = b.plan_grad_ptrs is not None and not tensor_data.same_data_ptrs(b.grads, b.plan_grad_ptrs)
        return self._prepared(index, plan, scalars, capturing)

    def _check_capture(self, device: torch.device) -> bool:
        """Whether ``device``'s current stream is capturing a graph; raises when this optimizer cannot be captured."""
        capturing = self._capturing(device)
        if capturing and not self.capturable:
            raise RuntimeError(f"{self._NAME}.step() is being captured in a graph, but the step count and learning "
                               f"rate are host values baked into the capture; construct {self._NAME} with "
                               "capturable=True to capture steps")
        return capturing

    def _prepared(self, index: int, plan: _GroupPlan, scalars: dict[str, Any], capturing: bool) -> _Prepared:
        """Loads the ops of a plan's buckets and brings their device tables up to date; changes nothing else."""
        ops = {}
        for bucket in plan.buckets:
            if bucket.device.type not in ops:
                ops[bucket.device.type] = self._op(bucket.device)
        prepared = _Prepared(index, plan, ops, scalars, capturing)
        for bucket in plan.buckets:
            self._prepare_launch(prepared, bucket)
        return prepared

    def _group_scalars(self, index: int, group: dict[str, Any]) -> dict[str, Any]:
        """:meth:`_scalars_of`, cached while the group's hyper-parameter values are unchanged (tensors: never)."""
        snapshot = tuple([_frozen(group.get(key)) for key in _hyper_keys_of(type(self))])
        cached = self._scalar_cache.get(index)
        if cached is not None and cached[0] == snapshot:
            return cached[1]
        scalars = self._scalars_of(group, index)
        if not any(isinstance(v, torch.Tensor) for v in snapshot):
            self._scalar_cache[index] = (snapshot, scalars)
        return scalars

    def _capturing(self, device: torch.device) -> bool:
        if device.type == "cpu":
            return False
        module = torch.get_device_module(device.type)
        check = getattr(module, "is_current_stream_capturing", None)
        return bool(check()) if check is not None else False

    def _op(self, device: torch.device) -> dict[str, Any]:
        """The family's functions on ``device``'s implementation: ``{"step": f, "plan": f or None, ...}``."""
        loaded = dispatch.load(self._FAMILY, device.type, self.impl)
        cached = self._functions.get(device.type)
        if cached is not None and cached[0] is loaded:
            return cached[1]
        if device.type == "cpu":
            cpu_threads.apply_thread_policy()
        fam = self._FAMILY
        functions = {suffix: getattr(loaded, f"{fam}_{suffix}", None) for suffix in
                     ("step", "plan", "step_planned", "step_planned_capturable")}
        if self.capturable and functions["step_planned_capturable"] is None:
            raise RuntimeError(f"{self._NAME}(capturable=True) needs an implementation with "
                               f"{fam}_step_planned_capturable for {device.type}; the chosen one "
                               f"({dispatch.choose(fam, device.type, self.impl).name!r}) has none. Pass impl='cuda' "
                               "or capturable=False.")
        self._functions[device.type] = (loaded, functions)
        return functions

    def _refresh(self, plan: _GroupPlan, grads: list[torch.Tensor]) -> bool:
        """Collects this step's gradients (``grads``: one per group parameter) into a cached plan; False when the
        plan no longer fits (a parameter's storage moved, a gradient is sparse or not contiguous)."""
        for b in plan.buckets:
            if not tensor_data.same_data_ptrs(b.owners, b.owner_ptrs):
                return False
            picked = [grads[i] for i in b.positions] if len(b.positions) != len(grads) else grads
            b.grads_changed = not all(map(operator.is_, picked, b.grads))
            if b.grads_changed:
                try:
                    if not all(map(torch.Tensor.is_contiguous, picked)):
                        return False
                except RuntimeError:  # a sparse gradient has no is_contiguous
                    return False
                b.grads = picked
        return True

    def _build(self, index: int, group: dict[str, Any], live: list[torch.Tensor]) -> _GroupPlan:
        """Validates a group's parameters with gradients and buckets them; state for new parameters is made
        but not yet inserted (that happens in :meth:`_apply`)."""
        name = self._NAME
        accepted = self._accepted_combos()
        new_state: dict[torch.Tensor, _ParamState] = {}
        by_key: dict[tuple[Any, ...], tuple[_Bucket, list[dict[str, Any]]]] = {}
        positions = {id(p): i for i, p in enumerate(group["params"])}
        spans: list[tuple[torch.device, int, int, bool, str]] = []
        for p in live:
            where = f"param_groups[{index}]['params'][{positions[id(p)]}]"
            self._check_param(p, where)
            g = p.grad
            assert g is not None
            if g.layout != torch.strided:
                raise ValueError(f"{name}: the gradient of {where} has layout {g.layout}; {name} takes dense "
                                 "gradients (densify with grad.to_dense(), or use torch.optim.SparseAdam)")
            if g.device != p.device or g.dtype != p.dtype or g.shape != p.shape:
                raise ValueError(f"{name}: the gradient of {where} is a {g.dtype} tensor of shape {list(g.shape)} on "
                                 f"{g.device}; it must match the parameter ({p.dtype}, {list(p.shape)}, {p.device})")
            if not g.is_contiguous():
                g = g.contiguous()
            st = self.state.get(p)
            if not st:
                st = _ParamState(self._gen, self._new_state(p))
                new_state[p] = st
            else:
                self._check_state(where, p, st)
            master = st.get("master")
            target = master if master is not None else p
            state_dtype = st[self._STATE_KEYS[0]].dtype if self._STATE_KEYS else torch.float32
            combo = (_dtype(target.dtype), _dtype(g.dtype), _dtype(state_dtype),
                     _dtype(p.dtype) if master is not None else "none")
            if combo not in accepted:
                raise ValueError(f"{name}: {where} has the storage (param, grad, state, model copy) = "
                                 f"({', '.join(combo)}),"
                                 f" which the {self._FAMILY} kernels do not take; accepted: "
                                 + ", ".join("(" + ", ".join(c) + ")" for c in sorted(accepted)))
            step_value = _step_value(st["step"])
            key = (p.device, combo, step_value)
            if key not in by_key:
                by_key[key] = (_Bucket(p.device, [], [], [], {k: [] for k in self._STATE_KEYS}, [], [],
                                       torch.empty(()), step_value, []), [])
            bucket, members = by_key[key]
            bucket.owners.append(p)
            bucket.targets.append(target)
            if master is not None:
                bucket.copies.append(p)
            for k in self._STATE_KEYS:
                bucket.states[k].append(st[k])
            bucket.grads.append(g)
            bucket.owner_ptrs.append(p.data_ptr())
            bucket.labels.append(where)
            bucket.positions.append(positions[id(p)])
            members.append(st)
            spans.append(_span(p, where, True))
            spans.append(_span(g, f"the gradient of {where}", False))
            if master is not None:
                spans.append(_span(master, f"the master copy of {where}", True))
            for k in self._STATE_KEYS:
                spans.append(_span(st[k], f"state[{k!r}] of {where}", True))
        _check_overlaps(name, spans)
        buckets = []
        for bucket, _members in by_key.values():
            device = bucket.device if self.capturable else torch.device("cpu")
            bucket.step = torch.full((), bucket.step_value, dtype=torch.float32, device=device)
            if device.type == "cpu":  # advanced by a host write instead of an op (the bucket keeps it alive)
                bucket.step_set = tensor_data.float_setter(bucket.step)
            buckets.append(bucket)
        params = list(group["params"])
        live_ids = {id(p) for p in live}
        return _GroupPlan(params, [id(p) in live_ids for p in params], buckets, -1, new_state, list(by_key.values()))

    def _new_state(self, p: torch.Tensor) -> dict[str, Any]:
        st: dict[str, Any] = {"step": torch.zeros((), dtype=torch.float32)}
        if self.master_weights and p.dtype in LOW_PRECISION:
            st["master"] = p.detach().to(torch.float32, copy=True).contiguous()
        target_dtype = torch.float32 if "master" in st else p.dtype
        for k in self._STATE_KEYS:
            st[k] = torch.zeros(p.shape, dtype=self._state_dtype(target_dtype), device=p.device)
        return st

    def _check_state(self, where: str, p: torch.Tensor, st: Mapping[str, Any]) -> None:
        """A parameter's existing state (possibly edited by the user) fits the kernels."""
        for k in ("step", *self._STATE_KEYS):
            if k not in st:
                raise ValueError(f"{self._NAME}: the state of {where} lacks {k!r} (it has {sorted(st)}); restore it "
                                 f"or delete the entry (optimizer.state.pop(p)) to start that parameter afresh")
        _step_value(st["step"], f"{self._NAME}: {where} state['step']")
        for k in self._STATE_KEYS + (("master",) if "master" in st else ()):
            t = st[k]
            if not isinstance(t, torch.Tensor) or t.shape != p.shape or t.device != p.device or \
                    t.layout != torch.strided or not t.is_contiguous():
                desc = (f"a {t.dtype} tensor of shape {list(t.shape)} on {t.device}" if isinstance(t, torch.Tensor)
                        else f"a {type(t).__name__}")
                raise ValueError(f"{self._NAME}: state[{k!r}] of {where} is {desc}; it must be a contiguous tensor "
                                 f"shaped like the parameter ({list(p.shape)}, on {p.device})")

    def _prepare_launch(self, prepared: _Prepared, bucket: _Bucket) -> None:
        """Builds the device plan of a bucket when its implementation has one and the cached one is stale."""
        functions = prepared.op[bucket.device.type]
        make = functions["plan"]
        if make is None:
            return
        if bucket.plan is not None and bucket.plan_grad_ptrs is not None:
            if not bucket.grads_changed or tensor_data.same_data_ptrs(bucket.grads, bucket.plan_grad_ptrs):
                return
        if prepared.capturing:
            raise RuntimeError(f"{self._NAME}: a gradient's storage moved during a graph capture; keep gradients "
                               "allocated across captured steps (zero_grad(set_to_none=False))")
        lists = [bucket.targets, bucket.grads, *(bucket.states[k] for k in self._STATE_KEYS), bucket.copies]
        table = make(*lists)
        header = table[:4].tolist()
        bucket.plan = (table, int(header[1]), int(header[2]), int(header[3]))
        bucket.plan_grad_ptrs = list(map(torch.Tensor.data_ptr, bucket.grads))

    def _apply(self, prepared: _Prepared) -> None:
        """Mutates: inserts new state, advances step counts, launches, bumps version counters."""
        plan = prepared.plan
        if plan.new_state:
            for p, st in plan.new_state.items():
                dict.__setitem__(self.state, p, st)
            plan.new_state = {}
        if plan.step_members:
            for bucket, members in plan.step_members:
                for member in members:
                    dict.__setitem__(member, "step", bucket.step)
            plan.step_members = []
        plan.generation = self._gen.value
        self._plans[prepared.index] = plan
        for bucket in plan.buckets:
            bucket.step_value += 1
            if bucket.step_set is not None:
                bucket.step_set(bucket.step_value)
            else:
                bucket.step.add_(1)
            self._launch(prepared, bucket)
            torch.autograd.graph.increment_version(bucket.owners)

    def _launch(self, prepared: _Prepared, bucket: _Bucket) -> None:
        """Calls the bucket's op. The argument list of an uncapturable launch is built once and reused while
        the group's scalars (the same cached dict), the bucket's gradient list, its device plan and the op
        are the same objects; a step then only writes the step count into it."""
        functions = prepared.op[bucket.device.type]
        if not self.capturable and type(self)._launch_scalars is ListOptimizer._launch_scalars:
            fn = functions["step" if bucket.plan is None else "step_planned"]
            cached = bucket.launch
            if cached is None or cached[0] is not prepared.scalars or cached[1] is not bucket.grads or \
                    cached[2] is not bucket.plan or cached[3] is not fn:
                _, args, step_at = self._launch_arguments(prepared, bucket, functions)
                cached = bucket.launch = (prepared.scalars, bucket.grads, bucket.plan, fn, args, step_at)
            args, step_at = cached[4], cached[5]
            if step_at is not None:
                args[step_at] = int(bucket.step_value)
            fn(*args)
            return
        fn, args, _ = self._launch_arguments(prepared, bucket, functions)
        fn(*args)

    def _launch_arguments(self, prepared: _Prepared, bucket: _Bucket,
                          functions: dict[str, Any]) -> tuple[Callable[..., Any], list[Any], int | None]:
        """The op of one launch, its positional arguments, and the position of ``step`` among them (None for
        an op without a step count, such as Lion)."""
        values = dict(prepared.scalars)
        values.update(self._launch_scalars(prepared, bucket))
        values["step"] = int(bucket.step_value)
        if bucket.plan is not None:
            table, combo, count, chunks = bucket.plan
            if self.capturable:
                values["step"] = bucket.step
                values["lr"] = self._lr_tensor(prepared, bucket)
                fn, spec_fn = functions["step_planned_capturable"], self._function("step_planned_capturable")
            else:
                fn, spec_fn = functions["step_planned"], self._function("step_planned")
            names = [a.name for a in spec_fn.arguments]
            args = [table, combo, count, chunks] + [values[name] for name in names[4:]]
            return fn, args, _position(names, "step")
        lists = {"params": bucket.targets, "grads": bucket.grads, "model_copies": bucket.copies}
        lists.update({f"{k}s": v for k, v in bucket.states.items()})
        names = [a.name for a in self._function().arguments]
        return functions["step"], [lists[name] if name in lists else values[name] for name in names], \
            _position(names, "step")

    def _lr_tensor(self, prepared: _Prepared, bucket: _Bucket) -> torch.Tensor:
        lr = prepared.scalars["lr"]
        if isinstance(lr, torch.Tensor):
            if lr.device != bucket.device or lr.dtype != torch.float32:
                raise ValueError(f"{self._NAME}: param_groups[{prepared.index}]['lr'] is a {lr.dtype} tensor on "
                                 f"{lr.device}; with capturable=True it must be a float32 tensor on {bucket.device}")
            return lr
        key = (prepared.index, bucket.device)
        t = self._lr_tensors.get(key)
        if t is None:
            t = self._lr_tensors[key] = torch.empty((), dtype=torch.float32, device=bucket.device)
        t.fill_(lr)
        return t


def _position(names: list[str], name: str) -> int | None:
    """The index of ``name`` in ``names``, or None."""
    return names.index(name) if name in names else None


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


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _step_value(step: Any, what: str = "state['step']") -> float:
    """A step count as a float (from an int, float or one-element tensor)."""
    if isinstance(step, torch.Tensor):
        step = step.item()
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not (math.isfinite(step) and step >= 0):
        raise ValueError(f"{what}={step!r} is invalid; accepted: a whole number >= 0 (or a 0-dim tensor holding one)")
    return float(step)


def _span(t: torch.Tensor, label: str, written: bool) -> tuple[torch.device, int, int, bool, str]:
    """The byte range ``t`` covers in its storage's address space."""
    if t.numel() == 0:
        return (t.device, 0, 0, written, label)
    extent = 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True))
    start = t.data_ptr()
    return (t.device, start, start + extent * t.element_size(), written, label)


def _check_overlaps(name: str, spans: list[tuple[torch.device, int, int, bool, str]]) -> None:
    """Raises if a written tensor shares memory with any other tensor of the step.

    Raises:
        ValueError: naming both tensors (the same parameter listed twice, a gradient that is its parameter,
            overlapping views of one storage).
    """
    spans = sorted((s for s in spans if s[2] > s[1]), key=lambda s: (str(s[0]), s[1]))
    written_end: tuple[int, str] | None = None
    any_end: tuple[int, str] | None = None
    device = None
    for dev, start, end, written, label in spans:
        if dev != device:
            device, written_end, any_end = dev, None, None
        other = any_end if written else written_end
        if other is not None and start < other[0]:
            raise ValueError(f"{name}: {label} and {other[1]} share memory (the same tensor twice, or overlapping "
                             "views of one storage); updating them in one step is a data race. Give each parameter "
                             "its own storage (p.data = p.data.clone()) and pass it once.")
        if any_end is None or end > any_end[0]:
            any_end = (end, label)
        if written and (written_end is None or end > written_end[0]):
            written_end = (end, label)
