"""Launch parameters shared by the row-wise Triton kernels of the model ops (norms, softmax, cross-entropy).

Imports neither Triton nor a device runtime at import time.

A row-wise kernel sees its input as ``M`` rows of ``N`` elements. When a row fits in one tile
(``next_power_of_2(N) <= max_tile``) a program holds ``BLOCK_M`` whole rows in registers and reads each
element once; otherwise a program walks its row in tiles of ``BLOCK_N`` (two or three passes, the later
ones mostly served from L2). The heuristics follow Liger-Kernel's ``calculate_settings`` (warps by tile
size) and FlagGems's row-blocking of small rows.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

import torch

from anyaccel._compat import library
from anyaccel._compat.triton_launch import fast

#: Elements a program keeps in registers per tile (rows x columns) before switching to a looped walk.
MAX_TILE = 16384
#: Elements per program for small rows (several rows per program).
ROWS_TILE = 4096


@dataclass(frozen=True)
class RowBlocks:
    """Tiling of an ``M x N`` row-wise launch.

    Attributes:
        block_m: rows per program (a power of two).
        block_n: columns per tile (a power of two).
        one_tile: whether a whole row fits in one tile (``block_n >= N``).
        num_warps: warps per program.
        grid: programs to launch (``ceil(M / block_m)``).
    """

    block_m: int
    block_n: int
    one_tile: bool
    num_warps: int
    grid: int


def next_power_of_2(n: int) -> int:
    """The smallest power of two ``>= n`` (1 for ``n <= 1``)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def row_blocks(m: int, n: int, max_tile: int = MAX_TILE, loop_tile: int = 4096, rows_tile: int = ROWS_TILE,
               max_warps: int = 16) -> RowBlocks:
    """The tiling for ``m`` rows of ``n`` elements (cached for concrete sizes: part of an eager call's host
    cost; symbolic sizes, while tracing with dynamic shapes, are not hashable and are computed afresh).

    Args:
        m: rows (>= 0).
        n: elements per row (>= 1).
        max_tile: largest ``block_m * block_n`` kept in registers; wider rows are walked in tiles.
        loop_tile: tile width for the looped walk.
        rows_tile: elements per program when several rows fit (``block_m = rows_tile // block_n``).
        max_warps: at most this many warps per program (a kernel's own measured optimum).
    """
    if type(m) is int and type(n) is int:
        return _row_blocks(m, n, max_tile, loop_tile, rows_tile, max_warps)
    return _row_blocks.__wrapped__(m, n, max_tile, loop_tile, rows_tile, max_warps)


@functools.lru_cache(maxsize=1024)
def _row_blocks(m: int, n: int, max_tile: int, loop_tile: int, rows_tile: int, max_warps: int) -> RowBlocks:
    bn = next_power_of_2(n)
    if bn <= max_tile:
        bm = max(1, min(rows_tile // bn, next_power_of_2(m), 64))
        one = True
    else:
        bn, bm, one = loop_tile, 1, False
    elems = bm * bn
    warps = 16 if elems >= 8192 else 8 if elems >= 2048 else 4 if elems >= 512 else 2 if elems >= 128 else 1
    return RowBlocks(bm, bn, one, min(warps, max_warps), max(1, -(-m // bm)))


def multiprocessor_count(device: torch.device) -> int:
    """Streaming multiprocessors (CUDA/ROCm) or execution units (XPU) of ``device``; 4 on the CPU (the Triton
    interpreter)."""
    if device.type == "cpu":
        return 4
    return _units(device.type, device.index if device.index is not None else torch.get_device_module(
        device.type).current_device())


@functools.lru_cache(maxsize=16)
def _units(device_type: str, index: int) -> int:
    props = torch.get_device_module(device_type).get_device_properties(index)
    for attr in ("multi_processor_count", "gpu_subslice_count", "max_compute_units"):
        value = getattr(props, attr, None)
        if value:
            return int(value)
    return 64


#: what `device_of` returns when no device switch is needed (``nullcontext`` is reusable)
_NO_SWITCH = contextlib.nullcontext()


def device_of(t: torch.Tensor) -> contextlib.AbstractContextManager[Any]:
    """A context making ``t``'s device current for a Triton launch (Triton launches on the current device);
    a shared no-op context on the CPU or when the device is already current."""
    device = t.device
    if device.type == "cpu" or device.index is None:
        return _NO_SWITCH
    module = torch.get_device_module(device.type)
    if device.index == module.current_device():
        return _NO_SWITCH  # already current: skip the device guard's set/restore
    return module.device(device)


def wrap(kernel: Any) -> Any:
    """``torch.library.wrap_triton(kernel)``: the traceable wrapper inside a ``triton_op`` being traced, else
    the kernel's eager fast launcher ([`fast`][anyaccel._compat.triton_launch.fast], launched with the same
    ``[grid](*args, **kwargs)``). Decides with torch's own switch, and only calls ``wrap_triton`` (several
    imports per call) when it is on (`anyaccel._compat.library.wrap`).

    The fast launcher was once removed for want of an end-to-end gain; it is back because a comparison inside
    one process, on a patched Llama whose forward is bound by the host, showed one (``docs/nn_ops.md``,
    "Private shortcuts on the GPU, end to end").
    """
    return library.wrap(kernel, fast)
