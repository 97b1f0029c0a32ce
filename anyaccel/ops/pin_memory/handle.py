"""DeepSpeed's ``pin_handle`` API over the pinned host memory op's torch ops (``anyaccel.ops.pin_memory.spec``).

``get_accelerator().create_op_builder("PinMemoryBuilder").load()`` returns an op module whose ``pin_handle()``
makes a [`PinHandle`][anyaccel.ops.pin_memory.handle.PinHandle] (through
[`PinMemoryModule`][anyaccel.ops.pin_memory.handle.PinMemoryModule], the adapter the DeepSpeed integration's ABI
declaration names, ``anyaccel/integrations/deepspeed/abi/pin_memory.py``), with the methods DeepSpeed 0.19.8's
``NativePinnedMemory`` calls (``deepspeed/utils/pin_memory.py``; the handle of its
``csrc/pin_memory/py_ds_pin_memory.cpp``): ``new_cpu_locked_tensor``, ``free_cpu_locked_tensor``,
``free_cpu_locked_tensor_by_ptr`` and ``is_pinned``.

Lifetime: a tensor made here is a view of a native region (whole pages from ``posix_memalign``) whose storage
owns the region: the region is freed when the storage dies, i.e. when the last tensor or view using that memory
is gone, whether or not ``free_cpu_locked_tensor`` was called. ``free_cpu_locked_tensor`` ends the pinning at
once (``munlock``, the device registration undone, the region no longer counted nor recognised by
``is_pinned``) and leaves the memory to the storage, so a tensor still used afterwards reads valid memory;
DeepSpeed's own handle frees the memory there, and a later use reads freed memory.

Regions live in one table per process (the op library's), so every handle, and anyaccel's accelerator,
recognises every region.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch

from anyaccel._compat.fake_tensor import is_fake
from anyaccel.op_builder.core.loaded_ops import LOADED_OPS

logger = logging.getLogger(__name__)

__all__ = ["MAX_LOCKED_BYTES", "PinHandle", "PinMemoryModule", "PinStats", "locked_nbytes", "memlock_limit",
           "in_native_region"]

#: The most bytes one locked buffer may ask for: what the ops' ``int`` (int64) arguments hold, less a page
#: margin for the rounding up to whole pages. No host has that much memory; past it the request is a bug.
MAX_LOCKED_BYTES = 2**63 - 2**20


def locked_nbytes(num_elem: Any, dtype: torch.dtype, what: str = "new_cpu_locked_tensor") -> int:
    """The bytes of ``num_elem`` elements of ``dtype`` (``num_elem * itemsize``), checked.

    Raises:
        ValueError: ``num_elem`` is not an int ``>= 0``, or the bytes pass `MAX_LOCKED_BYTES` (the message
            names both and the bound).
    """
    if not isinstance(num_elem, int) or isinstance(num_elem, bool) or num_elem < 0:
        raise ValueError(f"{what}: num_elem={num_elem!r} is invalid; accepted: an int >= 0")
    nbytes = num_elem * torch.empty(0, dtype=dtype).element_size()
    if nbytes > MAX_LOCKED_BYTES:
        raise ValueError(f"{what}: num_elem={num_elem} of {dtype} is {nbytes} bytes, more than one buffer can ask for "
                         f"(at most {MAX_LOCKED_BYTES} bytes, the ops' 64-bit size less a margin); check how the "
                         "element count is computed")
    return nbytes

_WARN_LOCK = threading.Lock()
_WARNED = False
#: The ``NAME`` of the op build whose libraries keep the regions' table.
_OP = "pin_memory"


#: Other ops' checks "does this CPU tensor lie in one of my pinned buffers" (the async I/O op adds its
#: ``new_cpu_locked_tensor`` buffers with its first one), which ``PinHandle.is_pinned`` asks too: DeepSpeed keeps
#: one pinned-tensor manager per process for both ops. Registered here, not imported, as the async I/O op
#: already asks this module about its regions (``in_native_region``).
_OTHER_PINNED: list[Callable[[torch.Tensor], bool]] = []
_LOOKUPS_LOCK = threading.Lock()


def add_pinned_lookup(lookup: Callable[[torch.Tensor], bool]) -> None:
    """Make [`PinHandle.is_pinned`][anyaccel.ops.pin_memory.handle.PinHandle.is_pinned] also answer True for
    the CPU tensors ``lookup`` recognises (called with a non-fake CPU tensor; must not raise). Idempotent."""
    with _LOOKUPS_LOCK:
        if lookup not in _OTHER_PINNED:
            _OTHER_PINNED.append(lookup)


def in_native_region(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s bytes lie in a pinned region of this op (False when the op's library was never
    loaded, so nothing is loaded or built for the answer; False for fake, meta and non-CPU tensors).

    The libraries are those the process's table of loaded ops says it registered
    ([`LOADED_OPS.native_libraries`][anyaccel.op_builder.core.loaded_ops.LoadedOps.native_libraries]): a reset
    of the table leaves them loaded, and their regions live.
    """
    if is_fake(tensor) or tensor.device.type != "cpu":
        return False
    libraries = LOADED_OPS.native_libraries(_OP)
    if not libraries:
        return False
    start, nbytes = tensor.data_ptr(), _span_bytes(tensor)
    return any(int(getattr(torch.ops, ns).pin_find(start, nbytes)) != 0 for ns in libraries)


def memlock_limit() -> int | None:
    """The soft ``RLIMIT_MEMLOCK`` of this process in bytes (how much it may ``mlock``); None when unlimited or
    where the limit cannot be read (not POSIX)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    return None if soft == resource.RLIM_INFINITY else int(soft)


class PinStats:
    """The process's native pinned regions, read from the op library's table.

    Attributes:
        regions: pinned regions (mlock-ed or registered or neither: see
            [`PinHandle`][anyaccel.ops.pin_memory.handle.PinHandle]).
        bytes: their bytes (whole pages).
        locked_regions: regions locked in RAM with ``mlock``.
        locked_bytes: their bytes.
        released_regions: regions whose pinning ended (``free_cpu_locked_tensor``) whose memory a tensor
            still uses; freed with that tensor.
        released_bytes: their bytes.
    """

    __slots__ = ("regions", "bytes", "locked_regions", "locked_bytes", "released_regions", "released_bytes")

    def __init__(self, module: Any) -> None:
        figures = [int(module.pin_stats(i)) for i in range(6)]
        (self.regions, self.bytes, self.locked_regions, self.locked_bytes, self.released_regions,
         self.released_bytes) = figures

    def to_dict(self) -> dict[str, int]:
        """The figures as a JSON-able dict (keys as the attributes)."""
        return {k: getattr(self, k) for k in self.__slots__}


def _span_bytes(tensor: torch.Tensor) -> int:
    """Bytes from ``tensor.data_ptr()`` to the end of its last element (strides honoured; 0 when empty)."""
    if tensor.numel() == 0:
        return 0
    last = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True))
    return (last + 1) * tensor.element_size()


class PinHandle:
    """Page-aligned host tensors locked in RAM: DeepSpeed's ``pin_handle``, plus what anyaccel's accelerator adds.

    DeepSpeed calls it without arguments (``module.pin_handle()``): regions are ``mlock``-ed, as DeepSpeed's C++
    does, and DeepSpeed registers them with the device runtime itself. anyaccel's accelerator passes
    ``register``/``unregister`` so the handle registers each region with the device runtime (CUDA's
    ``cudaHostRegister``, which page-locks it, so no ``mlock`` is asked then) and undoes that before the
    memory is freed.

    Args:
        module: the loaded ``pin_memory`` op module (its torch ops ``pin_alloc``, ``pin_free``...).
        lock: ``mlock`` new regions (when no ``register`` is given). A region the process may not lock
            (``RLIMIT_MEMLOCK``, ``ulimit -l``; root may lock any amount) stays allocated, aligned and usable
            but not locked, said once in the log and in [`stats`][anyaccel.ops.pin_memory.handle.PinHandle.stats].
        register: ``register(address, nbytes) -> bool`` registering a region with the device runtime (True:
            registered), or None.
        unregister: ``unregister(address)``, undoing ``register``; required with ``register``.

    Raises:
        ValueError: ``register`` is given without ``unregister``.
    """

    def __init__(self, module: Any, lock: bool = True, register: Callable[[int, int], bool] | None = None,
                 unregister: Callable[[int], Any] | None = None) -> None:
        if register is not None and unregister is None:
            raise ValueError("PinHandle: register was given without unregister; pass both (a registered region must "
                             "be unregistered before its memory is freed) or neither")
        self._module = module
        self._lock = bool(lock)
        self._register = register
        self._unregister = unregister
        self._registered: set[int] = set()
        self._mu = threading.Lock()

    # ---- DeepSpeed's pin_handle API ------------------------------------------------------------------------

    def new_cpu_locked_tensor(self, num_elem: int, example_tensor: torch.Tensor) -> torch.Tensor:
        """A 1-D CPU tensor of ``num_elem`` uninitialised elements of ``example_tensor``'s dtype, starting on a
        page boundary, in a pinned region of its own (only the dtype of ``example_tensor`` is read).

        Args:
            num_elem: elements, an int ``>= 0``; 0 gives an empty, unpinned tensor (no region).
            example_tensor: any tensor; its dtype is used.

        Returns:
            The tensor; ``data_ptr()`` is the region's base address (what ``free_cpu_locked_tensor_by_ptr``
            takes). The region is freed when the last tensor using its memory dies.

        Raises:
            ValueError: ``num_elem`` is not an int ``>= 0``, or its bytes pass `MAX_LOCKED_BYTES`.
            RuntimeError: the memory could not be allocated (the op's message), or ``register`` raised (the
                region is freed first).

        Side effects: allocates ``num_elem * itemsize`` bytes rounded up to whole pages; locks them in RAM or
        registers them with the device runtime.
        """
        dtype = example_tensor.dtype
        nbytes = locked_nbytes(num_elem, dtype)
        if nbytes == 0:
            return torch.empty(0, dtype=dtype)
        module = self._module
        lock = self._lock and self._register is None
        base = int(module.pin_alloc(nbytes, lock))
        try:
            if self._register is not None and self._register(base, nbytes):
                with self._mu:
                    self._registered.add(base)
            # The storage holds the ctypes array for as long as it lives: the array's finalizer frees the region.
            raw = (ctypes.c_uint8 * nbytes).from_address(base)
            finalizer = weakref.finalize(raw, _free_region, module, base, self._unregister_if_registered)
            finalizer.atexit = False  # at exit the process's memory goes anyway; tensors may still be in use
            tensor = torch.frombuffer(raw, dtype=torch.uint8).view(dtype)
        except BaseException:
            self._unregister_if_registered(base)
            module.pin_free(base)
            raise
        if lock:
            _warn_if_unlocked(int(module.pin_lock_state(base)), nbytes)
        return tensor

    def free_cpu_locked_tensor(self, locked_tensor: torch.Tensor) -> bool:
        """End the pinning of the region starting at ``locked_tensor.data_ptr()`` (see the module doc).

        Returns:
            True when that address was a pinned region's base (a tensor
            [`new_cpu_locked_tensor`][anyaccel.ops.pin_memory.handle.PinHandle.new_cpu_locked_tensor] made, not
            freed before); False otherwise (nothing changed).
        """
        return self.free_cpu_locked_tensor_by_ptr(locked_tensor.data_ptr())

    def free_cpu_locked_tensor_by_ptr(self, address: int) -> bool:
        """End the pinning of the region whose base address is ``address``: undo its device registration,
        ``munlock`` it, stop counting and recognising it; its memory is freed with its last tensor.

        Returns:
            True when ``address`` was a pinned region's base; False otherwise (nothing changed).

        Raises:
            HostRegistrationError: (from ``unregister``) the device runtime refused; the region stays pinned.
        """
        address = int(address)
        if int(self._module.pin_lock_state(address)) == -2:
            return False
        self._unregister_if_registered(address)
        return bool(self._module.pin_release(address))

    def is_pinned(self, buffer: torch.Tensor) -> bool:
        """Whether ``buffer`` is pinned: torch says so (``is_pinned()``), or its bytes lie in a pinned region
        (views and slices of a region included; any handle's regions), or in a buffer of the async I/O op's
        ``new_cpu_locked_tensor`` (DeepSpeed keeps one pinned-tensor manager per process for both ops).

        Fake and meta tensors, which have no memory, and tensors on other devices are not pinned.
        """
        if is_fake(buffer) or buffer.device.type != "cpu":
            return False
        try:
            if buffer.is_pinned():
                return True
        except RuntimeError:  # a torch without a pinned-memory allocator
            pass
        if int(self._module.pin_find(buffer.data_ptr(), _span_bytes(buffer))) != 0:
            return True
        return any(lookup(buffer) for lookup in tuple(_OTHER_PINNED))

    # ---- anyaccel's additions ------------------------------------------------------------------------------

    def region_base(self, tensor: torch.Tensor) -> int | None:
        """The base address of the pinned region holding ``tensor``'s bytes, or None (not pinned here)."""
        if is_fake(tensor) or tensor.device.type != "cpu":
            return None
        base = int(self._module.pin_find(tensor.data_ptr(), _span_bytes(tensor)))
        return base or None

    def stats(self) -> PinStats:
        """The process's native pinned regions (every handle's): counts and bytes."""
        return PinStats(self._module)

    def _unregister_if_registered(self, base: int) -> None:
        with self._mu:
            registered = base in self._registered
        if registered and self._unregister is not None:
            self._unregister(base)  # raises: the region stays registered and pinned (not freed under the driver)
            with self._mu:
                self._registered.discard(base)


def _free_region(module: Any, base: int, unregister: Callable[[int], None]) -> None:
    """Finalizer of a region's storage: undo its registration, then free it. A registration that cannot be
    undone (a dead device context at shutdown) leaves the region allocated rather than freed under the driver."""
    try:
        unregister(base)
    except Exception:  # noqa: BLE001 - finalizers must not raise; the region is leaked on purpose
        logger.debug("pinned region at %#x: unregistration failed; left allocated", base, exc_info=True)
        return
    try:
        module.pin_free(base)
    except Exception:  # noqa: BLE001 - torch may be torn down at interpreter shutdown
        logger.debug("pinned region at %#x: not freed (interpreter shutting down?)", base, exc_info=True)


def _warn_if_unlocked(state: int, nbytes: int) -> None:
    global _WARNED
    if state <= 0:
        return
    with _WARN_LOCK:
        if _WARNED:
            return
        _WARNED = True
    limit = memlock_limit()
    logger.warning("pin_memory: mlock of %d bytes failed (%s; RLIMIT_MEMLOCK %s); the buffer is page-aligned but "
                   "not locked in RAM (raise `ulimit -l` to lock it)", nbytes, os.strerror(state),
                   "unlimited" if limit is None else f"{limit} bytes")


class PinMemoryModule:
    """DeepSpeed's ``pin_memory`` module ABI on a loaded anyaccel op module (the integration's adapter):
    ``module.pin_handle()`` makes a [`PinHandle`][anyaccel.ops.pin_memory.handle.PinHandle].

    Args:
        module: the [`OpModule`][anyaccel.op_builder.core.module.OpModule] of the ``pin_memory`` build.
        functions: the ABI function names the module offers (``("pin_handle",)``).
    """

    def __init__(self, module: Any, functions: tuple[str, ...] = ("pin_handle",)) -> None:
        self._module = module

    def pin_handle(self, lock: bool = True, register: Callable[[int, int], bool] | None = None,
                   unregister: Callable[[int], Any] | None = None) -> PinHandle:
        """A new handle (DeepSpeed's ``pin_handle()`` takes no argument; the keywords are anyaccel's: see
        [`PinHandle`][anyaccel.ops.pin_memory.handle.PinHandle])."""
        return PinHandle(self._module, lock=lock, register=register, unregister=unregister)
