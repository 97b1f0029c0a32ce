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
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

#: dtypes accepted as (params, grads, optimizer state, model copies): the same set as the CUDA kernels'
#: (anyaccel/csrc/includes/cuda/multi_tensor_apply.cuh, ANYACCEL_MTA_VARIANTS). State is float32, or the
#: parameters' 16-bit dtype (as torch's fused AdamW keeps it) when there are no model copies.
SUPPORTED_DTYPES: frozenset[tuple[torch.dtype, torch.dtype, torch.dtype, Optional[torch.dtype]]] = frozenset(
    {
        (torch.float32, torch.float32, torch.float32, None),
        (torch.bfloat16, torch.bfloat16, torch.float32, None),
        (torch.float16, torch.float16, torch.float32, None),
        (torch.bfloat16, torch.bfloat16, torch.bfloat16, None),
        (torch.float16, torch.float16, torch.float16, None),
        (torch.float32, torch.float32, torch.float32, torch.bfloat16),
        (torch.float32, torch.float32, torch.float32, torch.float16),
        (torch.float32, torch.bfloat16, torch.float32, torch.bfloat16),
        (torch.float32, torch.float16, torch.float32, torch.float16),
    }
)

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


_cache: "collections.OrderedDict[tuple, WorkTable]" = collections.OrderedDict()
_cache_lock = threading.Lock()


def validate(
    op: str,
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    states: Sequence[tuple[str, Sequence[torch.Tensor]]],
    model_copies: Sequence[torch.Tensor],
) -> None:
    """Checks one step's tensor lists; the same rules as the CUDA op (P17 in the user pains).

    Args:
        op: the op name for messages (``"adam_step"``).
        params: parameters, any shapes, contiguous, one dtype and one device.
        grads: one gradient per parameter, same element count, one dtype.
        states: ``(name, list)`` pairs, each list one tensor per parameter, all of one dtype: float32, or
            the parameters' 16-bit dtype (see :data:`SUPPORTED_DTYPES`).
        model_copies: empty, or one bf16/fp16 tensor per float32 parameter.

    Raises:
        ValueError: list lengths differ, a tensor is not on the params' device or not contiguous,
            element counts differ, or params is empty.
        TypeError: a dtype is not the list's dtype or the combination is unsupported.
    """
    n = len(params)
    if n == 0:
        raise ValueError(f"{op}: params is empty; pass at least one tensor")
    named = [("grads", grads)] + list(states) + ([("model_copies", model_copies)] if model_copies else [])
    for name, lst in named:
        if len(lst) != n:
            raise ValueError(f"{op}: got {n} params but {len(lst)} {name}; pass one per parameter")
    p0 = params[0]
    for name, lst in [("params", params)] + named:
        dtype = lst[0].dtype if name in ("params", "grads", "model_copies") else states[0][1][0].dtype
        for i, t in enumerate(lst):
            if t.device != p0.device:
                raise ValueError(
                    f"{op}: {name}[{i}] is on {t.device} but params[0] is on {p0.device}; "
                    "move every tensor of a step to one device"
                )
            if t.dtype != dtype:
                raise TypeError(
                    f"{op}: {name}[{i}] has dtype {t.dtype}, expected {dtype}; every tensor of one list must "
                    "share a dtype"
                )
            if t.numel() != params[i].numel():
                raise ValueError(
                    f"{op}: {name}[{i}] has {t.numel()} elements but params[{i}] has {params[i].numel()}; "
                    "shapes must match"
                )
            if not t.is_contiguous():
                raise ValueError(f"{op}: {name}[{i}] is not contiguous; call .contiguous() on it")
    combo = (p0.dtype, grads[0].dtype, states[0][1][0].dtype, model_copies[0].dtype if model_copies else None)
    if combo not in SUPPORTED_DTYPES:
        accepted = ", ".join(sorted(str(c) for c in SUPPORTED_DTYPES))
        raise TypeError(f"{op}: unsupported dtypes (params, grads, state, model_copies) = {combo}; accepted: "
                        f"{accepted}")


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


def drop_empty(*lists: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Removes, from every list alike, the positions whose parameter has no elements.

    Args:
        lists: parallel lists; the first is the params.

    Returns:
        The lists without those positions (possibly all empty).
    """
    keep = [i for i, p in enumerate(lists[0]) if p.numel() > 0]
    return [[lst[i] for i in keep] if len(lst) else [] for lst in lists]
