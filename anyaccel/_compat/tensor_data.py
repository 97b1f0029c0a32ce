"""Host-side shortcuts around tensor data: many data pointers compared at once, a 0-dim float written in place.

Private names used (tested on torch 2.10.0, 2.13.0 and 2.15.0):

* ``torch._C._tensors_data_ptrs_at_indices_equal`` (CUDA-graph trees use it): compares many tensors' data
  pointers with saved ones in one C++ call;
* ``ctypes.c_float.from_address(t.data_ptr())``: writes a 0-dim float32 CPU tensor's value with a 4-byte host
  store, bypassing the dispatcher (and the version counter).

Fallbacks: ``Tensor.data_ptr`` over the list compared in Python, and ``Tensor.fill_``.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

import torch

__all__ = ["float_setter", "same_data_ptrs"]

#: below this many tensors a Python comparison is as fast as the C++ call
_MIN_BATCH = 16


@functools.cache
def _indices(n: int) -> list[int]:
    """``list(range(n))``, made once per length (read-only)."""
    return list(range(n))


def same_data_ptrs(tensors: list[torch.Tensor], ptrs: list[int]) -> bool:
    """Whether ``tensors`` still have the data pointers ``ptrs`` (a storage swap, ``p.data = x``, moves them)."""
    query = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)
    if query is not None and len(tensors) > _MIN_BATCH:
        try:
            return bool(query(tensors, ptrs, _indices(len(tensors))))
        except (TypeError, RuntimeError):
            pass
    return list(map(torch.Tensor.data_ptr, tensors)) == ptrs


def float_setter(t: torch.Tensor) -> Callable[[float], None]:
    """A function writing a value into ``t``, a 0-dim float32 CPU tensor (which the caller keeps alive).

    The private path stores the 4 bytes directly; the fallback is ``t.fill_(value)``.

    Raises:
        ValueError: ``t`` is not a 0-dim float32 CPU tensor.
    """
    if t.dim() != 0 or t.dtype != torch.float32 or t.device.type != "cpu":
        raise ValueError(f"float_setter: got a {t.dtype} tensor of shape {list(t.shape)} on {t.device}; accepted: "
                         "a 0-dim float32 CPU tensor")
    try:
        cell = ctypes.c_float.from_address(t.data_ptr())
    except (TypeError, ValueError, OverflowError):
        return functools.partial(_fill, t)

    def write(value: float) -> None:
        cell.value = value

    return write


def _fill(t: torch.Tensor, value: float) -> None:
    """The public fallback of :func:`float_setter`."""
    t.fill_(value)
