"""Host side of the Triton multi-tensor optimizer kernels: validation and the work table.

One Triton launch updates every tensor of a step. Triton kernels take one pointer per argument, so each
list (params, grads, states, model copies) is passed as its first tensor (the *base*) and every other
tensor of the list as its distance from the base in elements; a tensor's element ``j`` of list ``L`` is
``base_L + delta_L[t] + j``. Each tensor is cut into chunks of ``BLOCK`` elements, one Triton program per
chunk; a per-chunk table ``(tensor index, chunk index within the tensor)`` maps programs to work.

The tables depend only on the tensors' addresses, dtypes and sizes, so they are cached under that key
(an optimizer passes the same tensors every step); the cache holds device tensors only, never the
user's tensors. Building that key, and validating the lists, costs time in the tensor count on every
call; a *plan* (`make_plan`, `planned`) does both once, like the CUDA kernels' plans
(``csrc/includes/cuda/multi_tensor_apply.cuh``), and a planned step then costs the same for any number
of tensors.

This module imports neither Triton nor CUDA at import time.
"""

from __future__ import annotations

import collections
import itertools
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

#: Alignment, in elements, that every tensor's distance from its list's base must have for the kernel
#: to be told its accesses are vector aligned (8 elements: 32 bytes of fp32, 16 bytes of bf16/fp16).
ALIGN_ELEMENTS = 8

_CACHE_SIZE = 32


@dataclass(frozen=True)
class WorkTable:
    """The device tables of one launch.

    Attributes:
        rows: int64 tensor ``[T, 6]`` on the params' device: element deltas for params, grads, state 0,
            state 1, model copy (0 where absent) and the element count.
        chunks: int64 tensor ``[C, 2]``: (tensor index, chunk index within that tensor) per program.
        num_chunks: C, the number of Triton programs to launch.
        aligned: whether every delta is a multiple of ``ALIGN_ELEMENTS`` (enables vector-width hints).
        tensor_chunks: int64 tensor ``[T]`` on the params' device: the number of chunks of each tensor.
        positions: int64 tensor ``[T]`` on the params' device: each tensor's index in the caller's lists
            (``positions`` of `work_table`; ``0 .. T-1`` when not given).
    """

    rows: torch.Tensor
    chunks: torch.Tensor
    num_chunks: int
    aligned: bool
    tensor_chunks: torch.Tensor
    positions: torch.Tensor


_cache: collections.OrderedDict[tuple, WorkTable] = collections.OrderedDict()
_cache_lock = threading.Lock()


def prepare(fn: Any, spec: Any, scalars: dict[str, Any], params: Sequence[torch.Tensor],
            grads: Sequence[torch.Tensor], states: dict[str, Sequence[torch.Tensor]],
            model_copies: Sequence[torch.Tensor]) -> list[list[list[torch.Tensor]]]:
    """Validate one step like the compiled kernels and split it into launches.

    The rules are the op spec's ([`anyaccel.ops.validation.check_scalars`][anyaccel.ops.validation.check_scalars] and
    [`check_optimizer_lists`][anyaccel.ops.validation.check_optimizer_lists], the same as the CUDA kernel's); a step may
    mix
    dtype combinations, and each combination is one launch. Tensors without elements are dropped.

    Args:
        fn: the spec function (``SPEC.function("adam_step")``).
        spec: the op spec (its accepted dtypes).
        scalars: the ranged scalar arguments by name.
        params, grads, states, model_copies: the step's lists (states in schema order).

    Returns:
        Per launch, the lists in kernel order: params, grads, each state list, then the model copies when
        the combination has them.

    Raises:
        RuntimeError: as the kernels, naming the argument or tensor and what is accepted.
    """
    return [launch for _, launch in prepare_indexed(fn, spec, scalars, params, grads, states, model_copies)]


def prepare_indexed(fn: Any, spec: Any, scalars: dict[str, Any], params: Sequence[torch.Tensor],
                    grads: Sequence[torch.Tensor], states: dict[str, Sequence[torch.Tensor]],
                    model_copies: Sequence[torch.Tensor]) -> list[tuple[list[int], list[list[torch.Tensor]]]]:
    """`prepare`, with each launch's tensors' indices in the caller's lists.

    Returns:
        Per launch, ``(indices, lists)``: ``indices[k]`` is the position in ``params`` of the launch's
        tensor ``k``; ``lists`` as `prepare` returns them.

    Raises:
        RuntimeError: as `prepare`.
    """
    from anyaccel.ops import validation

    validation.check_scalars(fn, scalars)
    check_lists(fn.name, spec, params, grads, states, model_copies)
    lists = [list(params), list(grads), *(list(v) for v in states.values())]
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(params):
        if p.numel() == 0:
            continue
        key = tuple(lst[i].dtype for lst in lists) + ((model_copies[i].dtype,) if model_copies else ())
        groups.setdefault(key, []).append(i)
    launches = []
    for indices in groups.values():
        launch = [[lst[i] for i in indices] for lst in lists]
        if model_copies:
            launch.append([model_copies[i] for i in indices])
        launches.append((indices, launch))
    return launches


def check_lists(op: str, spec: Any, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
                states: dict[str, Sequence[torch.Tensor]], model_copies: Sequence[torch.Tensor]) -> None:
    """The list rules of `prepare` (a non-empty ``params``, then
    [`anyaccel.ops.validation.check_optimizer_lists`][anyaccel.ops.validation.check_optimizer_lists] on the params'
    device type).

    Raises:
        RuntimeError: naming ``op`` and the offending list entry, as the kernels.
    """
    from anyaccel.ops import validation

    if not params:
        raise RuntimeError(f"{op}: params is empty; pass at least one tensor")
    validation.check_optimizer_lists(op, params, grads, states, model_copies,
                                     [c.as_tuple() for c in spec.dtypes], params[0].device.type)


def work_table(lists: Sequence[Sequence[torch.Tensor]], block: int,
               positions: Sequence[int] | None = None) -> WorkTable:
    """Returns the (cached) work table of one launch.

    Args:
        lists: the tensor lists in kernel order (params, grads, state 0, [state 1], [model copies]); all
            of one length T >= 1, tensors validated by `prepare`, none empty.
        block: elements per Triton program.
        positions: the tensors' indices in the caller's lists (`prepare_indexed`), kept on the
            device as ``WorkTable.positions``; ``None``: ``0 .. T-1``.

    Returns:
        The tables, on the device of ``lists[0][0]``.

    Side effects: on a cache miss, host-to-device copies and a few small device ops; the cache keeps at
    most 32 tables.
    """
    key = (block, None if positions is None else tuple(positions)) + tuple(
        (t.data_ptr(), t.numel(), t.dtype) for lst in lists for t in lst)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    table = _build_table(lists, block, positions)
    with _cache_lock:
        _cache[key] = table
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return table


def _host_rows(lists: Sequence[Sequence[torch.Tensor]]) -> tuple[list[list[int]], bool]:
    """The rows of `WorkTable` on the host, and whether every delta is aligned."""
    num = len(lists[0])
    rows = []
    aligned = True
    for i in range(num):
        row = []
        for lst in lists:
            t, base = lst[i], lst[0]
            delta_bytes = t.data_ptr() - base.data_ptr()
            delta = delta_bytes // t.element_size()
            aligned = aligned and delta % ALIGN_ELEMENTS == 0
            row.append(delta)
        row += [0] * (5 - len(row))
        row.append(lists[0][i].numel())
        rows.append(row)
    return rows, aligned


def _build_table(lists: Sequence[Sequence[torch.Tensor]], block: int,
                 positions: Sequence[int] | None) -> WorkTable:
    """Builds (uncached) the work table of `work_table`."""
    device = lists[0][0].device
    num = len(lists[0])
    rows, aligned = _host_rows(lists)
    counts = torch.tensor([(r[5] + block - 1) // block for r in rows], dtype=torch.int64)
    first = torch.cumsum(counts, 0) - counts
    total = int(counts.sum())
    tensor_idx = torch.repeat_interleave(torch.arange(num, dtype=torch.int64), counts)
    chunk_idx = torch.arange(total, dtype=torch.int64) - torch.repeat_interleave(first, counts)
    chunks = torch.stack([tensor_idx, chunk_idx], dim=1).contiguous()
    index = torch.arange(num, dtype=torch.int64) if positions is None else torch.tensor(list(positions),
                                                                                          dtype=torch.int64)
    return WorkTable(
        rows=torch.tensor(rows, dtype=torch.int64).to(device, non_blocking=False),
        chunks=chunks.to(device, non_blocking=False),
        num_chunks=total,
        aligned=aligned,
        tensor_chunks=counts.to(device, non_blocking=False),
        positions=index.to(device, non_blocking=False),
    )


# ---- plans: one dtype combination's validated lists and work table, kept between steps ----------------

#: Word 0 of a Triton plan ("tritonp"); the CUDA plans' is ``kPlanMagic`` ("anyacce"). Words 1-3 are, as
#: in the CUDA plan, the dtype combination's index in the op spec, the tensor count and the chunk count.
PLAN_MAGIC = 0x747269746F6E70


@dataclass(frozen=True, eq=False)
class PlanRecord:
    """The host side of one Triton plan, found from its plan tensor by `planned`.

    Attributes:
        family: the op family (``"adam"``); a plan launches only that family's planned steps.
        combo: index of the tensors' dtype combination in the op spec's ``dtypes``.
        count: T, the number of tensors with elements (the launch's tensors).
        list_len: the length of the lists the plan was built from (empty tensors included).
        bases: the first tensor with elements of each list, in kernel order (params, grads, state 0,
            [state 1], [model copy]): the kernel's base pointers.
        base_ptrs: their data pointers when the plan was built.
        storages: the storage of every tensor of the plan, held so that no memory the kernel addresses is
            freed while the plan lives (a tensor deleted, or given a new storage by ``p.data = ...``, leaves
            its old storage here). Only an explicit ``untyped_storage().resize_()`` can still free it.
        table: the launch's work table (``positions``: the tensors' indices in the lists).
    """

    family: str
    combo: int
    count: int
    list_len: int
    bases: tuple[torch.Tensor, ...]
    base_ptrs: tuple[int, ...]
    storages: tuple[torch.UntypedStorage, ...]
    table: WorkTable


_plans: dict[tuple[str, int, int], tuple[int, PlanRecord]] = {}
_plan_ids = itertools.count(1)


def _plan_key(plan: torch.Tensor) -> tuple[str, int, int]:
    device = plan.device
    return (device.type, -1 if device.index is None else device.index, plan.data_ptr())


def _forget(key: tuple[str, int, int], ident: int) -> None:
    """Drops the record of a plan tensor that died (unless a newer plan took its key)."""
    hit = _plans.get(key)
    if hit is not None and hit[0] == ident:
        del _plans[key]


def make_plan(fn: Any, spec: Any, block: int, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
              states: dict[str, Sequence[torch.Tensor]], model_copies: Sequence[torch.Tensor]) -> torch.Tensor:
    """Validates one dtype combination's lists once and returns their plan (``<family>_plan``).

    The lists are checked as by the step (`check_lists`, naming ``fn``); they must hold one dtype
    combination among their tensors with elements, as the CUDA plans require.

    Args:
        fn: the spec function of the plan (``SPEC.function("adam_plan")``); its name prefixes errors.
        spec: the op spec (accepted dtype combinations; ``family``).
        block: elements per Triton program of the family's kernel.
        params, grads, states, model_copies: the lists of ``<family>_step`` (states in schema order).

    Returns:
        An int64 tensor of ``4 + 9 * T`` words on the params' device (T: the tensors with elements):
        ``[PLAN_MAGIC, combo, T, chunks]``, then the work table's rows (``T x 6``), the tensors' indices
        in the lists (T), their chunk counts (T) and first chunks (T), for inspection; the kernels read
        private copies. Its header has the CUDA plan's meaning.

    Raises:
        RuntimeError: a bad list entry (the step's words, with ``fn``'s name), or not exactly one dtype
            combination among the tensors with elements.

    Side effects: host-to-device copies of the tables; registers the plan's record until the returned
    tensor is freed. The record holds the storage of every tensor of the plan (`PlanRecord`), so a
    planned step never writes freed memory; their memory is released with the plan tensor. A planned step
    checks only each list's first tensor for a moved storage: a tensor given a new storage after planning
    (``p.data = ...``) is updated in its old storage, so callers build a new plan when a data pointer moves
    (anyaccel's optimizers check the parameters' and gradients' pointers every step and do).
    """
    check_lists(fn.name, spec, params, grads, states, model_copies)
    lists = [list(params), list(grads), *(list(v) for v in states.values())]
    if model_copies:
        lists.append(list(model_copies))
    indices = [i for i, p in enumerate(params) if p.numel() > 0]
    combos = {tuple(lst[i].dtype for lst in lists[:3]) + ((lists[-1][i].dtype,) if model_copies else (None,))
              for i in indices}
    if len(combos) != 1:
        raise RuntimeError(f"{fn.name}: a plan covers tensors of one dtype combination with at least one element; "
                           f"got {len(combos)} combinations (group the tensors by dtype, as anyaccel's fused "
                           "optimizers do)")
    (dtypes,) = combos
    names = tuple("none" if d is None else str(d).removeprefix("torch.") for d in dtypes)
    combo = [c.as_tuple() for c in spec.dtypes].index(names)
    launch = [[lst[i] for i in indices] for lst in lists]
    table = _build_table(launch, block, indices)
    rows, _ = _host_rows(launch)
    counts = [(r[5] + block - 1) // block for r in rows]
    firsts = list(itertools.accumulate([0] + counts[:-1]))
    words = [PLAN_MAGIC, combo, len(indices), table.num_chunks] + [w for r in rows for w in r] + indices + counts + \
        firsts
    plan = torch.tensor(words, dtype=torch.int64).to(params[0].device)
    bases = tuple(lst[0] for lst in launch)
    storages = tuple(t.untyped_storage() for lst in launch for t in lst)
    record = PlanRecord(spec.family, combo, len(indices), len(params), bases, tuple(t.data_ptr() for t in bases),
                        storages, table)
    key, ident = _plan_key(plan), next(_plan_ids)
    _plans[key] = (ident, record)
    weakref.finalize(plan, _forget, key, ident)
    return plan


def planned(op: str, family: str, plan: torch.Tensor, combo: int, count: int, chunks: int) -> PlanRecord:
    """The record of a live plan of ``family``, checked against a planned step's arguments.

    Costs the same for any number of tensors: no list is validated and no table is built.

    Args:
        op: the planned step's name (``"adam_step_planned"``), for errors.
        family: the op family whose `make_plan` must have built ``plan``.
        plan: the tensor `make_plan` returned (or a view of all of it).
        combo, count, chunks: header words 1-3 of the plan, as the step was given them.

    Returns:
        The plan's record: its held base tensors and device work table.

    Raises:
        RuntimeError: ``plan`` is not a live Triton plan of ``family`` (built by another implementation or
            family, a copy, or a plan whose tensor was freed); ``combo``, ``count`` or ``chunks`` are not the
            plan's; or a list's first tensor no longer has the data pointer it had when the plan was built
            (its storage was replaced: ``p.data = ...``, ``set_``, ``resize_``).
    """
    from anyaccel.ops.plan_fakes import plan_size

    hit = _plans.get(_plan_key(plan)) if isinstance(plan, torch.Tensor) else None
    if hit is None or hit[1].family != family or plan.dtype != torch.int64 or \
            plan.numel() != plan_size(hit[1].count):
        raise RuntimeError(f"{op}: plan is not a live plan of the Triton {family} implementation (one built by "
                           f"its {family}_plan whose tensor is still alive; a copy, a plan of another "
                           "implementation or op, or a freed plan is not); build one with "
                           f"{family}_plan")
    record = hit[1]
    if (combo, count, chunks) != (record.combo, record.count, record.table.num_chunks):
        raise RuntimeError(f"{op}: plan, combo, count and chunks must be those of one plan built by the op's _plan "
                           f"function (its header words 1-3: {record.combo}, {record.count}, "
                           f"{record.table.num_chunks}); got combo {combo}, count {count}, chunks {chunks}")
    if tuple(map(torch.Tensor.data_ptr, record.bases)) != record.base_ptrs:
        raise RuntimeError(f"{op}: a tensor of the plan moved since {family}_plan built it (its storage was "
                           "replaced: p.data = ..., set_ or resize_); build a new plan")
    return record
