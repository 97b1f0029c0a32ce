"""The accelerator's native pinned-memory backend (``DS_PIN_MEMORY_BACKEND=native``), over the ``pin_memory`` op.

DeepSpeed 0.19 pins big ZeRO-Offload host buffers through an op rather than ``tensor.pin_memory()``, because
torch's caching host allocator rounds each request up to a power of two and keeps freed blocks cached, so a
few large buffers can hold nearly twice their size in page-locked memory. With ``DS_PIN_MEMORY_BACKEND=native``
the accelerator's ``pin_memory`` / ``pin_empty`` / ``pin_empty_like`` / ``is_pinned`` / ``unpin_memory`` use
[`NativePinnedHostMemory`][anyaccel.accelerator.native_pinned.NativePinnedHostMemory]: exact page-rounded regions from
the ``pin_memory`` op
(``create_op_builder("PinMemoryBuilder")``, its ``pin_handle``; ``anyaccel/ops/pin_memory/handle.py``).

What pinning means per host:

- an accelerator with host registration (CUDA: ``cudaHostRegister`` through ``torch.cuda.cudart()``; NPU):
  each region is registered with the device runtime, which page-locks it and lets copies to the device use
  DMA; it is unregistered before its memory is freed. ``DS_PIN_MEMORY_REGISTER_DEVICE=0`` (DeepSpeed's
  variable) skips registration and ``mlock``-s instead;
- the CPU (and other accelerators without registration): each region is locked in RAM with ``mlock``, within
  ``RLIMIT_MEMLOCK`` (``ulimit -l``; root is not limited). Past the limit a region stays allocated,
  page-aligned and usable but not locked (logged once;
  [`NativePinnedHostMemory.stats`][anyaccel.accelerator.native_pinned.NativePinnedHostMemory.stats] counts locked
  regions apart). The contract below holds either way.

Contract (DeepSpeed 0.19.8's ``NativePinnedMemory``): ``pin`` copies and keeps the shape (``make_copy``,
``match_shape``), the result carries ``ds_pinned = True`` and ``ds_pin_base`` (its region's base address, so
``unpin`` finds the region after ``.data`` is redirected); ``is_pinned`` recognises views and slices and says
False for fake and meta tensors; ``unpin`` ends the pinning (True) or does nothing (False); a region's memory
is freed when the last tensor or view using it dies.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from anyaccel import settings
from anyaccel._compat.fake_tensor import is_fake

__all__ = ["NativePinnedHostMemory", "existing_native_pins", "native_backend_selected", "shared_native_pins"]

_lock = threading.Lock()
_shared: dict[str, NativePinnedHostMemory] = {}


def native_backend_selected() -> bool:
    """Whether ``DS_PIN_MEMORY_BACKEND`` selects the native backend (read on every call, as DeepSpeed does).

    Raises:
        SettingError: (a ``ValueError``) the variable is neither ``torch`` nor ``native``.
    """
    return settings.PIN_MEMORY_BACKEND.get() == "native"


class NativePinnedHostMemory:
    """Native pinned host memory of one accelerator: DeepSpeed's ``NativePinnedMemory`` methods.

    Args:
        handle: a [`PinHandle`][anyaccel.ops.pin_memory.handle.PinHandle] (the ``pin_memory`` op module's
            ``pin_handle(...)``), registering regions with the device runtime or not.
    """

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def pin(self, tensor: torch.Tensor, make_copy: bool = True, match_shape: bool = True) -> torch.Tensor:
        """A pinned CPU tensor for ``tensor`` (any device; its values are copied when ``make_copy``).

        Args:
            tensor: the source (``make_copy``) or template: its dtype and shape are used.
            make_copy: copy ``tensor``'s values in (True) or leave the buffer uninitialised.
            match_shape: ``tensor``'s shape (True) or flat, ``(tensor.numel(),)``.

        Returns:
            The pinned tensor, tagged ``ds_pinned`` and ``ds_pin_base``.

        Raises:
            TypeError: ``tensor`` is sparse (COO, CSR, ...) or otherwise not strided: regions hold dense memory.
                The message names the fixes: pin a COO tensor's parts, or use torch's backend, whose
                ``tensor.pin_memory()`` pins sparse COO.
            RuntimeError: the memory could not be allocated, or the device runtime refused the registration.
        """
        if tensor.layout != torch.strided:
            raise TypeError(
                f"pin_memory: a {tensor.layout} tensor of shape {list(tensor.shape)} cannot be pinned by the native "
                "backend (DS_PIN_MEMORY_BACKEND=native), which pins dense memory; pin its parts (for COO: "
                "t = t.coalesce(); torch.sparse_coo_tensor(pin_memory(t.indices()), pin_memory(t.values()), t.shape)), "
                "pass t.to_dense(), or set DS_PIN_MEMORY_BACKEND=torch, whose tensor.pin_memory() pins sparse COO")
        out_shape = tuple(tensor.shape) if match_shape else (tensor.numel(),)
        locked = self._new(tensor.dtype, out_shape)
        if make_copy:
            locked.copy_(tensor.reshape(out_shape))
        return locked

    def pin_empty(self, example: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        """A fresh uninitialised pinned tensor of ``shape`` with ``example``'s dtype (only the dtype is read)."""
        return self._new(example.dtype, tuple(int(d) for d in shape))

    def _new(self, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        numel = 1
        for dim in shape:
            numel *= int(dim)
        base = self._handle.new_cpu_locked_tensor(numel, torch.empty(0, dtype=dtype))
        locked = base[:numel].view(shape)
        locked.ds_pinned = True
        locked.ds_pin_base = base.data_ptr()
        return locked

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` (or the region its bytes lie in) is pinned natively or by torch."""
        if getattr(tensor, "ds_pinned", False):
            return True
        return bool(self._handle.is_pinned(tensor))

    def unpin(self, tensor: torch.Tensor) -> bool:
        """End the pinning of ``tensor``'s region (found by ``ds_pin_base``, else ``tensor.data_ptr()``).

        The memory stays valid until the last tensor using it dies (no use-after-free).

        Returns:
            True when a pinned region was released; False when ``tensor`` is not one (nothing changes).

        Raises:
            HostRegistrationError: the device runtime refused to unregister; the region stays pinned.
        """
        base = getattr(tensor, "ds_pin_base", None)
        if base is None:
            if tensor.device.type != "cpu" or is_fake(tensor):
                return False
            base = tensor.data_ptr()
        freed = bool(self._handle.free_cpu_locked_tensor_by_ptr(int(base)))
        if hasattr(tensor, "ds_pinned"):
            tensor.ds_pinned = False
        return freed

    def stats(self) -> dict[str, int]:
        """The process's native pinned regions: ``regions``, ``bytes``, ``locked_regions``, ``locked_bytes``,
        ``released_regions``, ``released_bytes`` (bytes are whole pages)."""
        result: dict[str, int] = self._handle.stats().to_dict()
        return result


def shared_native_pins(accelerator: Any) -> NativePinnedHostMemory:
    """The process-wide native backend of ``accelerator`` (one per accelerator name), made on first use.

    Registration with the device runtime is used where the accelerator has one and
    ``DS_PIN_MEMORY_REGISTER_DEVICE`` is on (the default).

    Raises:
        RuntimeError: the ``pin_memory`` op could not be built or loaded (chained to the build error), or the
            accelerator has no ``PinMemoryBuilder``: native pinning was asked for and cannot be given.

    Side effects: builds or loads the ``pin_memory`` op on first use (a compile on a cold cache).
    """
    name = str(accelerator._name)
    with _lock:
        pins = _shared.get(name)
        if pins is not None:
            return pins
        try:
            builder = accelerator.create_op_builder("PinMemoryBuilder")
            if builder is None:
                raise LookupError(f"accelerator {name!r} has no PinMemoryBuilder")
            module = builder.load()
        except Exception as exc:
            raise RuntimeError(f"DS_PIN_MEMORY_BACKEND=native requires the pin_memory op, which failed to build or "
                               f"load on accelerator {name!r}: {exc}; fix the build (`anyaccel report --build` "
                               "says why) or unset DS_PIN_MEMORY_BACKEND to pin through torch") from exc
        register = unregister = None
        if accelerator._host_register_functions() is not None and settings.PIN_MEMORY_REGISTER_DEVICE.get():
            register, unregister = accelerator.register_host_memory, accelerator.unregister_host_memory
        pins = NativePinnedHostMemory(module.pin_handle(lock=True, register=register, unregister=unregister))
        _shared[name] = pins
        return pins


def existing_native_pins(accelerator_name: str) -> NativePinnedHostMemory | None:
    """The native backend made in this process for ``accelerator_name``, or None (nothing built or loaded)."""
    with _lock:
        return _shared.get(accelerator_name)
