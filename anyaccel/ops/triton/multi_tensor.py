"""Host side of the Triton multi-tensor optimizer kernels: validation and the work table.

One Triton launch updates every tensor of a step. Triton kernels take one pointer per argument, so each
list (params, grads, states, model copies) is passed as its first tensor (the *base*) and every other
tensor of the list as its distance from the base in elements; a tensor's element ``j`` of list ``L`` is
``base_L + delta_L[t] + j``. Each tensor is cut into chunks of ``BLOCK`` elements, one Triton program per
chunk; a per-chunk table ``(tensor index, chunk index within the tensor)`` maps programs to work.

The tables depend only on the tensors' addresses, dtypes and sizes, so they are cached under that key
(an optimizer passes the same tensors every step); the cache holds device tensors only, never the
user's tensors.

This module imports neither Triton nor CUDA at import time.
"""

from __future__ import annotations

import collections
import threading
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
    """

    rows: torch.Tensor
    chunks: torch.Tensor
    num_chunks: int
    aligned: bool


_cache: collections.OrderedDict[tuple, WorkTable] = collections.OrderedDict()
_cache_lock = threading.Lock()


def prepare(fn: Any, spec: Any, scalars: dict[str, Any], params: Sequence[torch.Tensor],
            grads: Sequence[torch.Tensor], states: dict[str, Sequence[torch.Tensor]],
            model_copies: Sequence[torch.Tensor]) -> list[list[list[torch.Tensor]]]:
    """Validate one step like the compiled kernels and split it into launches.

    The rules are the op spec's (:func:`anyaccel.ops.validation.check_scalars` and
    :func:`~anyaccel.ops.validation.check_optimizer_lists`, the same as the CUDA kernel's); a step may mix
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
    from anyaccel.ops import validation

    validation.check_scalars(fn, scalars)
    if not params:
        raise RuntimeError(f"{fn.name}: params is empty; pass at least one tensor")
    validation.check_optimizer_lists(fn.name, params, grads, states, model_copies,
                                     [c.as_tuple() for c in spec.dtypes], params[0].device.type)
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
        launches.append(launch)
    return launches


def work_table(lists: Sequence[Sequence[torch.Tensor]], block: int) -> WorkTable:
    """Returns the (cached) work table of one launch.

    Args:
        lists: the tensor lists in kernel order (params, grads, state 0, [state 1], [model copies]); all
            of one length T >= 1, tensors validated by :func:`validate`, none empty.
        block: elements per Triton program.

    Returns:
        The tables, on the device of ``lists[0][0]``.

    Side effects: on a cache miss, one host-to-device copy and a few small device ops; the cache keeps at
    most 32 tables.
    """
    key = (block,) + tuple((t.data_ptr(), t.numel(), t.dtype) for lst in lists for t in lst)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    device = lists[0][0].device
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
    counts = torch.tensor([(r[5] + block - 1) // block for r in rows], dtype=torch.int64)
    first = torch.cumsum(counts, 0) - counts
    total = int(counts.sum())
    tensor_idx = torch.repeat_interleave(torch.arange(num, dtype=torch.int64), counts)
    chunk_idx = torch.arange(total, dtype=torch.int64) - torch.repeat_interleave(first, counts)
    chunks = torch.stack([tensor_idx, chunk_idx], dim=1).contiguous()
    table = WorkTable(
        rows=torch.tensor(rows, dtype=torch.int64).to(device, non_blocking=False),
        chunks=chunks.to(device, non_blocking=False),
        num_chunks=total,
        aligned=aligned,
    )
    with _cache_lock:
        _cache[key] = table
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return table
