"""Optimizer state and checkpoints: the state mapping that tells cached plans when an entry changes, new state,
and ``state_dict``/``load_state_dict`` with the whole dict validated before anything changes.

State per parameter: ``step``, a 0-dim float32 tensor (as ``torch.optim`` keeps it; parameters stepped
together share one, so a step advances it once; on the device with ``capturable``; ``state_dict()`` gives
each parameter a copy of its own, as ``torch.optim`` lays it out), the family's state
tensors (``exp_avg``, ...; contiguous, shaped like the parameter), and ``master`` (an fp32 copy of a 16-bit
parameter) with ``master_weights``.

Checkpoints: ``state_dict()`` holds plain dicts and tensors (``torch.load(weights_only=True)`` reads it);
``load_state_dict`` validates the whole dict first (groups, keys, shapes, dtypes, torch options this optimizer
does not implement), keeps fp32 state of 16-bit parameters in fp32, maps torch's ``decoupled_weight_decay``,
and leaves the optimizer unchanged when it raises.

A state tensor changed in place (``resize_``, ``.data = x``) is noticed by a cached plan through its data
pointer and version counter (`anyaccel.ops.optimizer.plans.unchanged`), except for another view of its
own storage at the same address; assigning the entry (``state['exp_avg'] = x``) is always noticed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from typing_extensions import override

from anyaccel._compat import torch_optim
from anyaccel._compat.fake_tensor import is_fake
from anyaccel.ops.optimizer.hooks import step_lock

__all__ = ["LOW_PRECISION", "TORCH_IMPL_OPTIONS", "TORCH_OPTIONS", "CheckpointMixin", "Generation", "ParamState",
           "StateMap", "step_value"]

#: 16-bit parameter dtypes (state in fp32 unless ``fp32_optimizer_states=False``; masters with ``master_weights``).
LOW_PRECISION: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16)

#: torch.optim options a loaded state dict may carry, with the only value this optimizer implements.
TORCH_OPTIONS = {"maximize": False, "amsgrad": False, "differentiable": False, "nesterov": False}
#: torch.optim options that choose an implementation, not the math: dropped at load.
TORCH_IMPL_OPTIONS = ("foreach", "fused", "capturable")


class Generation:
    """A counter bumped by every write to the optimizer's state mapping (cached plans compare it)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class ParamState(dict[Any, Any]):
    """A parameter's state dict that bumps the owner's generation on every write through its API."""

    __slots__ = ("_gen",)

    def __init__(self, gen: Generation, *args: Any) -> None:
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


class StateMap(defaultdict[Any, Any]):
    """``optimizer.state``: parameter -> `ParamState`; inserting or removing an entry bumps the generation."""

    def __init__(self, gen: Generation, items: Mapping[Any, Any] | None = None) -> None:
        super().__init__(None)
        self._gen = gen
        for key, value in (items or {}).items():
            dict.__setitem__(self, key, value if isinstance(value, ParamState) else ParamState(gen, value))

    def __missing__(self, key: Any) -> ParamState:
        value = ParamState(self._gen)
        dict.__setitem__(self, key, value)  # an empty entry changes no plan: no bump
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        self._gen.value += 1
        dict.__setitem__(self, key, value if isinstance(value, ParamState) else ParamState(self._gen, value))

    def __delitem__(self, key: Any) -> None:
        self._gen.value += 1
        dict.__delitem__(self, key)

    def __reduce__(self) -> Any:
        return (dict, ({k: dict(v) for k, v in self.items()},))


def step_value(step: Any, what: str = "state['step']") -> float:
    """A step count as a float (from an int, float or one-element tensor)."""
    if isinstance(step, torch.Tensor):
        step = step.item()
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not (math.isfinite(step) and step >= 0):
        raise ValueError(f"{what}={step!r} is invalid; accepted: a whole number >= 0 (or a 0-dim tensor holding one)")
    return float(step)


#: The dense memory orders the optimizers update in place besides the contiguous one, by tensor rank, with the
#: permutation that makes such a tensor a contiguous view in memory order (torch's channels-last formats).
_ORDERS: dict[int, tuple[torch.memory_format, tuple[int, ...]]] = {
    4: (torch.channels_last, (0, 2, 3, 1)),
    5: (torch.channels_last_3d, (0, 2, 3, 4, 1)),
}


def memory_format_of(t: torch.Tensor) -> torch.memory_format | None:
    """``torch.contiguous_format`` for a contiguous tensor, the channels-last format it is dense in, else None."""
    if t.is_contiguous():
        return torch.contiguous_format
    order = _ORDERS.get(t.dim())
    if order is not None and t.is_contiguous(memory_format=order[0]):
        return order[0]
    return None


def memory_order(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself when contiguous; for a channels-last tensor, the contiguous view of its elements in memory
    order (a permutation: the kernels, which update elements by position, then see each parameter, gradient
    and state tensor of the same layout element for element)."""
    if t.is_contiguous():
        return t
    order = _ORDERS.get(t.dim())
    if order is not None and t.is_contiguous(memory_format=order[0]):
        return t.permute(order[1])
    return t


class CheckpointMixin(torch.optim.Optimizer):
    """The state and checkpoint half of [`ListOptimizer`][anyaccel.ops.optimizer.ListOptimizer] (see the module
    docstring)."""

    _NAME: ClassVar[str]
    _STATE_KEYS: ClassVar[tuple[str, ...]]
    _KEY_ALIASES: ClassVar[Mapping[str, str]]
    master_weights: bool
    fp32_optimizer_states: bool
    _gen: Generation
    _plans: dict[int, Any]
    _lr_tensors: dict[tuple[int, torch.device], torch.Tensor]
    _scalar_cache: dict[int, tuple[tuple[Any, ...], dict[str, Any]]]

    if TYPE_CHECKING:
        def _scalars_of(self, group: Mapping[str, Any], group_index: int | None) -> dict[str, Any]: ...

    def _new_state(self, p: torch.Tensor) -> dict[str, Any]:
        st: dict[str, Any] = {"step": torch.zeros((), dtype=torch.float32)}
        if self.master_weights and p.dtype in LOW_PRECISION:
            st["master"] = p.detach().to(torch.float32, copy=True)  # in p's memory format
        target_dtype = torch.float32 if "master" in st else p.dtype
        for k in self._STATE_KEYS:  # in p's memory format, as torch.optim's zeros_like(p)
            st[k] = torch.zeros_like(p, dtype=self._state_dtype(target_dtype), memory_format=torch.preserve_format)
        return st

    def _check_state(self, where: str, p: torch.Tensor, st: Mapping[str, Any]) -> None:
        """A parameter's existing state (possibly edited by the user) fits the kernels."""
        for k in ("step", *self._STATE_KEYS):
            if k not in st:
                raise ValueError(f"{self._NAME}: the state of {where} lacks {k!r} (it has {sorted(st)}); restore it "
                                 f"or delete the entry (optimizer.state.pop(p)) to start that parameter afresh")
        step_value(st["step"], f"{self._NAME}: {where} state['step']")
        for k in self._STATE_KEYS + (("master",) if "master" in st else ()):
            t = st[k]
            if not isinstance(t, torch.Tensor) or t.shape != p.shape or t.device != p.device or \
                    t.layout != torch.strided or memory_format_of(t) != memory_format_of(p):
                desc = (f"a {t.dtype} tensor of shape {list(t.shape)} on {t.device}" if isinstance(t, torch.Tensor)
                        else f"a {type(t).__name__}")
                raise ValueError(f"{self._NAME}: state[{k!r}] of {where} is {desc}; it must be a tensor in the "
                                 "parameter's memory format (contiguous or channels-last) shaped like the parameter "
                                 f"({list(p.shape)}, on {p.device})")
        dtypes = {k: st[k].dtype for k in self._STATE_KEYS}
        if len(set(dtypes.values())) > 1:
            raise ValueError(f"{self._NAME}: the state tensors of {where} have different dtypes ({dtypes}); they must "
                             "share one (fp32, or the parameter's 16-bit dtype with fp32_optimizer_states=False)")
        master = st.get("master")
        if master is not None and master.dtype != torch.float32:
            raise ValueError(f"{self._NAME}: state['master'] of {where} is {master.dtype}; it must be float32")

    @override
    def __getstate__(self) -> dict[str, Any]:
        """What pickling keeps: the public attributes (groups, state as plain dicts, options), no caches."""
        kept = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        kept["state"] = {k: dict(v) for k, v in self.state.items()}
        return kept

    @override
    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if not hasattr(self, "_gen"):
            self._gen = Generation()
        self._gen.value += 1
        self.state = StateMap(self._gen, self.state)
        self._plans = {}
        self._lr_tensors = {}
        self._scalar_cache = {}

    @override
    def state_dict(self) -> dict[str, Any]:
        """torch's ``state_dict`` with plain dicts (no anyaccel class), readable with ``weights_only=True``.

        Each parameter's ``step`` is a tensor of its own, a copy of the optimizer's counter (a 0-dim float32
        tensor on the CPU, or on the parameter's device with ``capturable``, as ``torch.optim`` keeps it):
        the optimizer shares one counter among parameters stepped together, and ``torch.optim``, which
        advances every parameter's ``step`` in place, would count a shared one once per parameter. The other
        state tensors are the optimizer's own (as in ``torch.optim``); ``torch.save`` copies them. It holds
        the optimizer's step lock while it reads the state, so a step of another thread is seen whole.
        """
        with step_lock(self):
            sd = super().state_dict()
            # the counters are copied under the lock too: torch's state_dict holds the live (shared) counter
            # tensors, which another thread's step advances in place
            sd["state"] = {k: {key: (value.clone() if key == "step" and isinstance(value, torch.Tensor) else value)
                               for key, value in v.items()} for k, v in sd["state"].items()}
        return sd

    @override
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

        Nothing is changed when it raises. Load-state-dict pre/post hooks run as in ``torch.optim``. It holds
        the optimizer's step lock, so it never interleaves with a ``step()`` of another thread.
        """
        with step_lock(self):
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
                if key == "params" or key in TORCH_IMPL_OPTIONS:
                    continue
                if key in TORCH_OPTIONS:
                    if value != TORCH_OPTIONS[key]:
                        raise ValueError(f"{name}: param_groups[{g}] has {key}={value!r}, which {self._NAME} does "
                                         f"not implement; accepted: {key}={TORCH_OPTIONS[key]!r}. Continue with "
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
            if t.is_meta or is_fake(t):
                raise ValueError(f"{name}: {where} {key!r} is a {'meta' if t.is_meta else 'fake'} tensor, which holds "
                                 "no values to load; load a state dict saved from real tensors (a checkpoint made "
                                 "under init_empty_weights() or a FakeTensorMode has none), or drop the entry to "
                                 "start that parameter afresh")
            dtype = torch.float32 if key == "master" else self._state_dtype(target_dtype)
            out[key] = t.detach().to(device=p.device, dtype=dtype, copy=True).contiguous(
                memory_format=memory_format_of(p) or torch.contiguous_format)
        return out

    def _state_dtype(self, target_dtype: torch.dtype) -> torch.dtype:
        """The state dtype of a parameter whose kernel-updated tensor has ``target_dtype``."""
        if self.fp32_optimizer_states or target_dtype not in LOW_PRECISION:
            return torch.float32
        return target_dtype
