"""Page-aligned, page-locked host tensors for the async I/O op (DeepSpeed's ``new_cpu_locked_tensor``).

A buffer that starts on a page boundary is read and written with ``O_DIRECT`` straight from its memory
(no bounce copy, see ``csrc/aio/aio_engine.h``); locking its pages keeps them resident. Where torch has an
accelerator (CUDA, XPU, ...), the memory comes from torch's pinned allocator (``pin_memory=True``), so it is
also fast to copy to the device; on a CPU-only torch, from torch's CPU allocator, locked with ``mlock``
when the process may lock that much (``RLIMIT_MEMLOCK``; root may), else left unlocked (still aligned, still
correct) and said once in the log. DeepSpeed does the same with ``posix_memalign`` + ``mlock``
(``csrc/pin_memory/deepspeed_pin_tensor.cpp`` and ``page_alloc.cpp``).

Every buffer made here is remembered (its address range) until `free_locked_tensor` or the death of
the tensor object returned, so `is_locked` also recognises views of it (DeepSpeed's swapper asks
``is_pinned`` of narrowed slices of one big buffer).
"""

from __future__ import annotations

import bisect
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

#: Alignment (bytes) of the buffers made here: a page, the O_DIRECT alignment of the engine.
PAGE = 4096

_LOCK = threading.Lock()
_STARTS: list[int] = []                     # sorted start addresses of the regions
_REGIONS: dict[int, tuple[int, bool]] = {}  # start -> (end, locked with mlock)
_WARNED = False


def accelerator_pinning() -> bool:
    """Whether torch has an accelerator whose pinned host allocator ``pin_memory=True`` uses."""
    import torch

    accel = getattr(torch, "accelerator", None)
    try:
        return bool(accel is not None and accel.is_available())
    except RuntimeError:
        return False


def new_locked_tensor(num_elem: int, dtype: Any, page_lock: Callable[[int, int, bool], int]) -> Any:
    """A 1-D tensor of ``num_elem`` uninitialised elements of ``dtype`` whose memory starts on a page.

    Args:
        num_elem: elements (>= 0).
        dtype: a ``torch.dtype``.
        page_lock: the op's ``aio_page_lock(address, nbytes, lock) -> errno``.

    Returns:
        The tensor: pinned by torch's accelerator allocator, else ``mlock``-ed if allowed, else plain.

    Raises:
        ValueError: ``num_elem`` is negative or not an int, or its bytes pass
            ``anyaccel.ops.pin_memory.handle.MAX_LOCKED_BYTES``.
        RuntimeError: torch could not allocate the memory.

    Side effects: allocates ``num_elem * itemsize`` bytes plus at most two pages; may lock them in RAM.
    """
    import torch

    from anyaccel.ops.pin_memory.handle import add_pinned_lookup, locked_nbytes

    nbytes = locked_nbytes(num_elem, dtype)
    span = -(-nbytes // PAGE) * PAGE  # whole pages, so locking never touches a neighbour's page
    pin = accelerator_pinning()
    raw = torch.empty(span + PAGE, dtype=torch.uint8, pin_memory=pin)
    skip = -raw.data_ptr() % PAGE
    tensor = raw[skip:skip + nbytes].view(dtype)
    start = raw.data_ptr() + skip
    locked = False
    if not pin and span:
        err = page_lock(start, span, True)
        locked = err == 0
        if not locked:
            _warn_once(err, span)
    _remember(start, start + span, locked)
    weakref.finalize(tensor, _forget, start, page_lock)
    add_pinned_lookup(in_locked_buffer)  # the pin_memory op's is_pinned recognises these buffers too
    return tensor


def free_locked_tensor(tensor: Any, page_lock: Callable[[int, int, bool], int]) -> bool:
    """Unlock a tensor made by `new_locked_tensor` and forget it; torch frees the memory with its last
    reference (DeepSpeed's ``free_cpu_locked_tensor``).

    Returns:
        True when ``tensor`` was made here (and not freed before), else False.
    """
    return _forget(tensor.data_ptr(), page_lock)


def is_locked(tensor: Any) -> bool:
    """Whether ``tensor``'s bytes lie in a buffer made here or in a region of the ``pin_memory`` op (DeepSpeed's
    swappers assert this of buffers ``DS_PIN_MEMORY_BACKEND=native`` pinned), or torch reports it pinned."""
    from anyaccel.ops.pin_memory.handle import in_native_region

    try:
        if tensor.is_pinned():
            return True
    except RuntimeError:  # no pinned-memory backend in this torch
        pass
    if tensor.device.type != "cpu":
        return False
    return in_locked_buffer(tensor) or in_native_region(tensor)


def in_locked_buffer(tensor: Any) -> bool:
    """Whether the CPU ``tensor``'s bytes lie in one buffer of `new_locked_tensor` not yet freed (views and
    slices included). The ``pin_memory`` op's ``is_pinned`` asks this too (`new_locked_tensor` registers it
    there): DeepSpeed's pinned-tensor manager is one per process, so a buffer of
    ``aio_handle.new_cpu_locked_tensor`` is pinned for its ``pin_handle`` as well. Never loads or builds an op."""
    begin = tensor.data_ptr()
    end = begin + tensor.numel() * tensor.element_size()
    with _LOCK:
        i = bisect.bisect_right(_STARTS, begin) - 1
        return i >= 0 and end <= _REGIONS[_STARTS[i]][0]


def _remember(start: int, end: int, locked: bool) -> None:
    with _LOCK:
        if start not in _REGIONS:
            bisect.insort(_STARTS, start)
        _REGIONS[start] = (end, locked)


def _forget(start: int, page_lock: Callable[[int, int, bool], int]) -> bool:
    with _LOCK:
        region = _REGIONS.pop(start, None)
        if region is None:
            return False
        _STARTS.remove(start)
    end, locked = region
    if locked:
        page_lock(start, end - start, False)
    return True


def _warn_once(err: int, nbytes: int) -> None:
    global _WARNED
    import os

    if not _WARNED:
        _WARNED = True
        logger.info("new_cpu_locked_tensor: mlock of %d bytes failed (%s); the buffer is page-aligned but not "
                    "locked (raise `ulimit -l` to lock it)", nbytes, os.strerror(err))
