"""Optimizer plans and launch caching: per-group buckets built once and reused, validated before any mutation.

An anyaccel optimizer updates every parameter of a group that has a gradient with one op call per bucket
(tensors of one device and one dtype combination), through the op family's implementation for that device
type ([`anyaccel.ops.dispatch`][anyaccel.ops.dispatch]).

* **Validation before mutation.** ``step()`` first checks every group (parameters and gradients: device,
  dtype, layout, contiguity, memory shared between tensors of a step) and loads the ops (which may compile);
  only then does it create state, advance step counts and launch. A ``step()`` that raises has changed nothing.
* **A per-group plan, cached.** The bucketing of a group is built once and reused while the same parameters
  have gradients and no state entry was replaced; a step then costs a few list operations per tensor. Before
  any launch, each cached bucket that launches after another one is compared with the signature it was
  validated with (`unchanged`); one that no longer matches sends its group through the full validation.
  The first launch of a step is checked by its kernel, which validates every tensor before writing any; its
  step count advances only after it returns. Device implementations that have ``<family>_plan`` keep
  the validated tensor table on the device (``csrc/includes/cuda/multi_tensor_apply.cuh``), so a step launches
  with no tensor list at all; the table is rebuilt when a parameter's or gradient's storage moves
  (``p.data = ...``, a new gradient allocation).
* **Cached launches.** The argument list of an uncapturable launch is built once and reused while its inputs
  are the same objects; a step then only writes the step count into it.
* **Autograd safety.** The kernels write through raw pointers, so every updated parameter's version counter
  is bumped (a backward through weights changed by ``step()`` then raises "modified by an inplace operation",
  as with ``torch.optim``).
* **Capturable steps** (``capturable=True``): the step count and the learning rate live in device memory, so
  ``step()`` can be captured in a CUDA graph and replayed (as ``torch.optim``'s ``capturable=True``).
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from anyaccel._compat import data_ptrs, tensor_version
from anyaccel.op_builder.core.loaded_ops import LOADED_OPS
from anyaccel.ops import cpu_threads, dispatch
from anyaccel.ops.optimizer.state import Generation, ParamState, memory_format_of, memory_order, step_value
from anyaccel.spec import Function

__all__ = ["Bucket", "GroupPlan", "PlanMixin", "Prepared", "unchanged"]

#: The suffixes of the family functions a step may call (``adam_step``, ``adam_plan``...).
_STEP_FUNCTIONS = ("step", "plan", "step_planned", "step_planned_capturable")

@dataclasses.dataclass
class Bucket:
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
    #: the signature the bucket was validated with (`unchanged` compares it before every cached step):
    #: the owners' shapes (the gradients' must be these), the gradients' dtypes, and the state tensors and fp32
    #: masters (``watched``) with their data pointers and version counters
    shapes: list[torch.Size] = dataclasses.field(default_factory=list)
    grad_dtypes: list[torch.dtype] = dataclasses.field(default_factory=list)
    watched: list[torch.Tensor] = dataclasses.field(default_factory=list)
    watched_ptrs: list[int] = dataclasses.field(default_factory=list)
    watched_versions: list[int] = dataclasses.field(default_factory=list)
    grads_changed: bool = True
    plan: tuple[torch.Tensor, int, int, int] | None = None
    plan_grad_ptrs: list[int] | None = None
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)
    launch: tuple[Any, ...] | None = None


@dataclasses.dataclass
class GroupPlan:
    """A group's buckets and what they were built from (a cached plan is reused while these still hold)."""

    params: list[torch.Tensor]
    present: list[bool]
    buckets: list[Bucket]
    generation: int
    new_state: dict[torch.Tensor, ParamState]
    step_members: list[tuple[Bucket, list[dict[str, Any]]]]
    #: the group's ``p.grad`` objects (None where absent) when the plan last passed validation
    grads_seen: list[torch.Tensor | None] = dataclasses.field(default_factory=list)
    #: this step, the first bucket's launch validates its tensors itself (see `PlanMixin._prepare`)
    self_checked: bool = False


@dataclasses.dataclass
class Prepared:
    """One group's validated step: its plan, its op and its kernel scalars."""

    index: int
    plan: GroupPlan
    op: dict[str, Any]
    scalars: dict[str, Any]
    capturing: bool


class PlanMixin(torch.optim.Optimizer):
    """The plan and launch half of [`ListOptimizer`][anyaccel.ops.optimizer.ListOptimizer] (see the module
    docstring)."""

    _NAME: ClassVar[str]
    _FAMILY: ClassVar[str]
    _STATE_KEYS: ClassVar[tuple[str, ...]]
    capturable: bool
    impl: str | None
    _gen: Generation
    _plans: dict[int, GroupPlan]
    _lr_tensors: dict[tuple[int, torch.device], torch.Tensor]

    if TYPE_CHECKING:
        @classmethod
        def _function(cls, suffix: str = "step") -> Function: ...
        @classmethod
        def _accepted_combos(cls) -> frozenset[tuple[str, str, str, str]]: ...
        def _check_param(self, p: torch.Tensor, where: str) -> None: ...
        def _new_state(self, p: torch.Tensor) -> dict[str, Any]: ...
        def _check_state(self, where: str, p: torch.Tensor, st: Mapping[str, Any]) -> None: ...
        def _group_scalars(self, index: int, group: dict[str, Any]) -> dict[str, Any]: ...

    def _launch_scalars(self, prepared: Prepared, bucket: Bucket) -> dict[str, Any]:
        """The op arguments of one launch that are neither tensor lists nor group hyper-parameters."""
        return {}

    def _prepare(self, index: int, group: dict[str, Any], first: bool = False) -> Prepared | None:
        """Validates group ``index`` and returns its step; changes nothing.

        ``first``: no group before this one launches in this step. The first bucket of such a group, when it
        launches through ``<family>_step`` (no device table), is not compared with its signature
        (`unchanged`): every implementation's ``<family>_step`` validates all its tensors before writing
        any (the op spec's list rules), and `_apply` advances its step count only after the launch
        returns, so a fault there also changes nothing; `_apply` then names it with the user's words.
        Every other bucket launches after another one has written, so it is compared first.
        """
        scalars = self._group_scalars(index, group)
        params = group["params"]
        # a comprehension, not map(attrgetter("grad")): the interpreter caches the attribute lookup (half the cost)
        grads = [p.grad for p in params]
        plan = self._plans.get(index)
        # the cached plan was built for these parameter objects, and no state entry was replaced since
        fits = plan is not None and plan.generation == self._gen.value and len(plan.params) == len(params) and \
            all(map(operator.is_, params, plan.params))
        if fits and plan is not None:
            plan.self_checked = first and bool(plan.buckets) and self._self_checking(plan.buckets[0])
            if len(plan.grads_seen) == len(params) and all(map(operator.is_, grads, plan.grads_seen)) and \
                    all(unchanged(b, _picked(b, grads), not (i == 0 and plan.self_checked))
                        for i, b in enumerate(plan.buckets)):
                # the same parameters and gradient objects as the last step, and every tensor still has the
                # signature it was validated with: nothing to re-validate
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

    def _prepare_steady(self, index: int, plan: GroupPlan, scalars: dict[str, Any]) -> Prepared | None:
        """`_prepare` when the group's parameters, their storage and their gradient objects are those the
        cached plan last validated (gradients kept across steps, ``zero_grad(set_to_none=False)``): the
        gradients' values may have changed, and a gradient's storage may have been swapped in place
        (``g.data = x``), which a bucket's device table notices by its data pointers."""
        buckets = plan.buckets
        if not buckets:
            return None
        capturing = self._check_capture(buckets[0].device)
        for b in buckets:
            b.grads_changed = b.plan_grad_ptrs is not None and not data_ptrs.same_data_ptrs(b.grads, b.plan_grad_ptrs)
        return self._prepared(index, plan, scalars, capturing)

    def _self_checking(self, bucket: Bucket) -> bool:
        """Whether ``bucket`` launches through its implementation's ``<family>_step`` (which validates every
        tensor before writing any) rather than a device table built from pointers validated earlier."""
        return not self.capturable and bucket.plan is None and self._op(bucket.device)["plan"] is None

    def _check_capture(self, device: torch.device) -> bool:
        """Whether ``device``'s current stream is capturing a graph; raises when this optimizer cannot be captured."""
        capturing = self._capturing(device)
        if capturing and not self.capturable:
            raise RuntimeError(f"{self._NAME}.step() is being captured in a graph, but the step count and learning "
                               f"rate are host values baked into the capture; construct {self._NAME} with "
                               "capturable=True to capture steps")
        return capturing

    def _prepared(self, index: int, plan: GroupPlan, scalars: dict[str, Any], capturing: bool) -> Prepared:
        """Loads the ops of a plan's buckets and brings their device tables up to date; changes nothing else."""
        ops = {}
        for bucket in plan.buckets:
            if bucket.device.type not in ops:
                ops[bucket.device.type] = self._op(bucket.device)
        prepared = Prepared(index, plan, ops, scalars, capturing)
        for bucket in plan.buckets:
            self._prepare_launch(prepared, bucket)
        return prepared

    def _capturing(self, device: torch.device) -> bool:
        if device.type == "cpu":
            return False
        module = torch.get_device_module(device.type)
        check = getattr(module, "is_current_stream_capturing", None)
        return bool(check()) if check is not None else False

    def _op(self, device: torch.device) -> dict[str, Any]:
        """The family's functions on ``device``'s implementation: ``{"step": f, "plan": f or None, ...}``.

        Read through the process's table of loaded ops on every call (dict reads after the first), so the
        optimizer keeps no copy of a loaded op. The dict is shared: read it, never change it.
        """
        fam = self._FAMILY
        loaded = dispatch.load(fam, device.type, self.impl)
        if device.type == "cpu":
            cpu_threads.apply_thread_policy()  # once per process; later calls return at once
        # looked up once per loaded module (asking a native module for a name it lacks is a torch op look-up,
        # microseconds, four names every step): a value derived from the module, dropped by the table's reset
        functions: dict[str, Any] = LOADED_OPS.derived(loaded, ("optimizer step", fam), lambda: {
            suffix: getattr(loaded, f"{fam}_{suffix}", None) for suffix in _STEP_FUNCTIONS})
        if self.capturable and functions["step_planned_capturable"] is None:
            raise RuntimeError(f"{self._NAME}(capturable=True) needs an implementation with "
                               f"{fam}_step_planned_capturable for {device.type}; the chosen one "
                               f"({dispatch.choose(fam, device.type, self.impl).name!r}) has none. Pass impl='cuda' "
                               "or capturable=False.")
        return functions

    def _refresh(self, plan: GroupPlan, grads: list[torch.Tensor]) -> bool:
        """Collects this step's gradients (``grads``: one per group parameter) into a cached plan; False when the
        plan no longer fits (`unchanged`: a parameter's or state tensor's storage moved, a state tensor was
        changed in place, a gradient has another shape or dtype, is sparse or not contiguous). Changes nothing
        when it returns False."""
        picks = [_picked(b, grads) for b in plan.buckets]
        if not all(unchanged(b, picked, not (i == 0 and plan.self_checked))
                   for i, (b, picked) in enumerate(zip(plan.buckets, picks, strict=True))):
            return False
        for b, picked in zip(plan.buckets, picks, strict=True):
            b.grads_changed = not all(map(operator.is_, picked, b.grads))
            if b.grads_changed:
                b.grads = picked
        return True

    def _build(self, index: int, group: dict[str, Any], live: list[torch.Tensor]) -> GroupPlan:
        """Validates a group's parameters with gradients and buckets them; state for new parameters is made
        but not yet inserted (that happens in `_apply`)."""
        name = self._NAME
        accepted = self._accepted_combos()
        new_state: dict[torch.Tensor, ParamState] = {}
        by_key: dict[tuple[Any, ...], tuple[Bucket, list[dict[str, Any]]]] = {}
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
            layout = memory_format_of(p) or torch.contiguous_format
            if not g.is_contiguous(memory_format=layout):  # the kernels pair elements in memory order
                g = g.contiguous(memory_format=layout)
            st = self.state.get(p)
            if not st:
                st = ParamState(self._gen, self._new_state(p))
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
            count = step_value(st["step"])
            key = (p.device, combo, count)
            if key not in by_key:
                by_key[key] = (Bucket(p.device, [], [], [], {k: [] for k in self._STATE_KEYS}, [], [],
                                      torch.empty(()), count, []), [])
            bucket, members = by_key[key]
            bucket.owners.append(p)
            if layout is not torch.contiguous_format:  # see `unchanged`: such a bucket is rebuilt at every step
                bucket.extras["reordered"] = True
            bucket.targets.append(memory_order(target))  # channels-last: contiguous views, same memory
            if master is not None:
                bucket.copies.append(memory_order(p))
            for k in self._STATE_KEYS:
                bucket.states[k].append(memory_order(st[k]))
            bucket.grads.append(memory_order(g))
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
            bucket.shapes = list(map(_SHAPE, bucket.owners))
            bucket.grad_dtypes = list(map(_DTYPE, bucket.owners))
            bucket.watched = [t for t, p in zip(bucket.targets, bucket.owners, strict=True) if t is not p]
            for k in self._STATE_KEYS:
                bucket.watched.extend(bucket.states[k])
            bucket.watched_ptrs = list(map(torch.Tensor.data_ptr, bucket.watched))
            bucket.watched_versions = tensor_version.versions(bucket.watched)
            buckets.append(bucket)
        params = list(group["params"])
        live_ids = {id(p) for p in live}
        return GroupPlan(params, [id(p) in live_ids for p in params], buckets, -1, new_state, list(by_key.values()))

    def _prepare_launch(self, prepared: Prepared, bucket: Bucket) -> None:
        """Builds the device plan of a bucket when its implementation has one and the cached one is stale."""
        functions = prepared.op[bucket.device.type]
        make = functions["plan"]
        if make is None:
            return
        if bucket.plan is not None and bucket.plan_grad_ptrs is not None:
            if not bucket.grads_changed or data_ptrs.same_data_ptrs(bucket.grads, bucket.plan_grad_ptrs):
                return
        if prepared.capturing:
            raise RuntimeError(f"{self._NAME}: a gradient's storage moved during a graph capture; keep gradients "
                               "allocated across captured steps (zero_grad(set_to_none=False))")
        lists = [bucket.targets, bucket.grads, *(bucket.states[k] for k in self._STATE_KEYS), bucket.copies]
        table = make(*lists)
        header = table[:4].tolist()
        bucket.plan = (table, int(header[1]), int(header[2]), int(header[3]))
        bucket.plan_grad_ptrs = list(map(torch.Tensor.data_ptr, bucket.grads))

    def _apply(self, prepared: Prepared) -> None:
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
        for i, bucket in enumerate(plan.buckets):
            bucket.step_value += 1
            if self.capturable:  # the kernel reads the count on the device
                bucket.step.add_(1)
            try:
                self._launch(prepared, bucket)
            except BaseException as exc:
                bucket.step_value -= 1
                if self.capturable:
                    bucket.step.sub_(1)
                if i == 0 and plan.self_checked and isinstance(exc, Exception):
                    self._explain_failed_launch(prepared)
                raise
            if not self.capturable:
                bucket.step.add_(1)
            torch.autograd.graph.increment_version(bucket.owners)

    def _explain_failed_launch(self, prepared: Prepared) -> None:
        """After the first launch of a step refused its tensors (nothing written, see `_prepare`): raises
        the full validation's ``ValueError``, which names them as ``param_groups[g][...]``, and forgets the
        group's plan; returns (the caller re-raises the kernel's error) when the validation finds nothing."""
        self._plans.pop(prepared.index, None)
        group = self.param_groups[prepared.index]
        self._build(prepared.index, group, [p for p in group["params"] if p.grad is not None])

    def _launch(self, prepared: Prepared, bucket: Bucket) -> None:
        """Calls the bucket's op. The argument list of an uncapturable launch is built once and reused while
        the group's scalars (the same cached dict), the bucket's gradient list, its device plan and the op
        are the same objects; a step then only writes the step count into it."""
        functions = prepared.op[bucket.device.type]
        if not self.capturable and type(self)._launch_scalars is PlanMixin._launch_scalars:
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

    def _launch_arguments(self, prepared: Prepared, bucket: Bucket,
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

    def _lr_tensor(self, prepared: Prepared, bucket: Bucket) -> torch.Tensor:
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


_SHAPE = operator.attrgetter("shape")
_DTYPE = operator.attrgetter("dtype")


def _picked(bucket: Bucket, grads: list[Any]) -> list[Any]:
    """The bucket's gradients among a group's (``grads``: one per group parameter, None where absent)."""
    return [grads[i] for i in bucket.positions] if len(bucket.positions) != len(grads) else grads


def unchanged(bucket: Bucket, grads: list[Any], full: bool = True) -> bool:
    """Whether a cached bucket may launch with ``grads`` (its owners' gradients, in order) without re-validation.

    It compares the signature recorded when the bucket was validated, one C-level pass per property: the
    owners' data pointers (``p.data = x`` moves them); the gradients' shapes, dtypes and
    contiguity (a new gradient object, or one changed in place by ``resize_``, ``unsqueeze_``, ``t_`` or
    ``.data = x``); the state tensors' and fp32 masters' data pointers and version counters (an in-place
    ``resize_``, ``unsqueeze_``, ``t_``, ``as_strided_`` or ``set_`` bumps the version; ``.data = x`` moves the
    pointer). Not noticed: ``.data = v`` where ``v`` is another view of the same storage at the same address
    (a parameter's or state tensor's shape changed without an in-place op). The kernels never bump a state
    tensor's version, so in steady training the versions stay put; a legitimate in-place write to a state
    tensor costs one full re-validation. False sends the group through the full validation of
    `PlanMixin._build`, which raises with the user's names.

    Args:
        bucket: a bucket built by `PlanMixin._build`.
        grads: this step's gradient of each of ``bucket.owners`` (None where a gradient is missing).
        full: False for a bucket whose launch validates its own tensors before writing (the first of a step,
            see `PlanMixin._prepare`): only the owners' data pointers and the gradients' contiguity are
            compared (a non-contiguous gradient is copied by a rebuilt plan).

    Returns:
        True when every recorded property still holds.
    """
    if bucket.extras.get("reordered"):  # channels-last tensors: this step's gradients get their memory-order
        return False                      # views in a rebuild (a gradient may come in another memory format)
    try:
        if not all(map(torch.Tensor.is_contiguous, grads)):
            return False
    except (RuntimeError, TypeError):  # a sparse gradient has no is_contiguous; a missing one is None
        return False
    if not data_ptrs.same_data_ptrs(bucket.owners, bucket.owner_ptrs):
        return False
    return not full or (list(map(_SHAPE, grads)) == bucket.shapes and list(map(_DTYPE, grads)) == bucket.grad_dtypes
                        and data_ptrs.same_data_ptrs(bucket.watched, bucket.watched_ptrs)
                        and tensor_version.versions(bucket.watched) == bucket.watched_versions)


def _position(names: list[str], name: str) -> int | None:
    """The index of ``name`` in ``names``, or None."""
    return names.index(name) if name in names else None


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


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
