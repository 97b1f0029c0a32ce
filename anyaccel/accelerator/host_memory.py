"""Pinned host memory: page-locked buffers and host registration, as DeepSpeed 0.19.8's accelerator offers them.

`PinnedHostMemory` is a base of [`DeepSpeedAccelerator`][anyaccel.accelerator.abstract.DeepSpeedAccelerator]. Its public
members dispatch between a native pinned-memory backend (`_native_pinned_memory`, None
here; the DeepSpeed integration supplies DeepSpeed's when ``DS_PIN_MEMORY_BACKEND=native``) and the device's
torch primitives (``_torch_*``). How a device pins is data, in class attributes a subclass sets:

Attributes:
    _torch_pins_host_memory: False where "pinning" host memory is a no-op for this device (CPU, MPS's
        unified memory): ``pin_memory`` then returns its argument and scratch buffers are not page-locked.
    _unified_host_memory: host tensors are directly accessible to the device (MPS), so every CPU tensor
        counts as pinned.
    _pin_memory_alignment: byte alignment the device runtime needs for `register_host_memory`.
    _host_register: how to register host memory with the device runtime, as (runtime accessor on the
        device module, register function, unregister function, flags), e.g. ``("cudart",
        "cudaHostRegister", "cudaHostUnregister", 0)``; None where the runtime has no such call.

As for the rest of the accelerator, no member depends on ``__init__`` having run (plug-ins written for
DeepSpeed do not call ``super().__init__()``).
"""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from anyaccel.accelerator.device_module import optional_attribute
from anyaccel.accelerator.errors import HostRegistrationError, NotHostDeviceError

logger = logging.getLogger(__name__)

__all__ = ["PinnedHostMemory"]

#: [bytes, calls] of `PinnedHostMemory._track_pinned_memory` in this process (all accelerators).
_TRACKED = [0, 0]
_TRACKED_LOCK = threading.Lock()


class PinnedHostMemory(abc.ABC):
    """Page-locked host buffers and host-memory registration of an accelerator (see the module docstring)."""

    _name: str | None = None
    _torch_pins_host_memory: bool = True
    _unified_host_memory: bool = False
    _pin_memory_alignment: int = 1
    _host_register: tuple[str, str, str, int] | None = None

    @property
    @abc.abstractmethod
    def device_type(self) -> str:
        """The torch device type string of the accelerator (its device module holds the registration runtime)."""

    def _native_pinned_memory(self) -> Any:
        """The native pinned-memory backend in use: anyaccel's own
        ([`NativePinnedHostMemory`][anyaccel.accelerator.native_pinned.NativePinnedHostMemory], over the ``pin_memory``
        op) when
        ``DS_PIN_MEMORY_BACKEND=native``, else None (torch's pinning). Read at every call, as DeepSpeed does.

        A backend has DeepSpeed's ``NativePinnedMemory`` methods: ``pin(tensor, make_copy, match_shape)``,
        ``pin_empty(template, shape)``, ``is_pinned(tensor)`` and ``unpin(tensor)``.

        Raises:
            SettingError: ``DS_PIN_MEMORY_BACKEND`` is neither ``torch`` nor ``native``.
            RuntimeError: native pinning is selected and the ``pin_memory`` op cannot be built or loaded
                (no silent fallback to torch, as in DeepSpeed).

        Side effects: the first call with the native backend builds or loads the ``pin_memory`` op.
        """
        from anyaccel.accelerator import native_pinned

        if not native_pinned.native_backend_selected():
            return None
        return native_pinned.shared_native_pins(self)

    def _track_pinned_memory(self, num_bytes: int) -> None:
        """Account ``num_bytes`` of newly page-locked host memory: counted per process
        (`pinned_memory_report`) and logged at DEBUG level."""
        with _TRACKED_LOCK:
            _TRACKED[0] += int(num_bytes)
            _TRACKED[1] += 1
        logger.debug("pinned %d bytes of host memory for %s", num_bytes, self._name)

    def pinned_memory_report(self) -> dict[str, Any]:
        """What this process has pinned, for ``anyaccel report``.

        Returns:
            A JSON-able dict: ``backend`` (``"torch"`` or ``"native"``, from ``DS_PIN_MEMORY_BACKEND``; an
            invalid value is reported as ``"invalid: <message>"``), ``tracked_bytes`` and ``tracked_calls``
            (the bytes each ``pin_memory``/``pin_empty`` call asked to pin, summed, and the calls: DeepSpeed's
            tracker's figures), ``memlock_limit_bytes`` (``RLIMIT_MEMLOCK``; None: unlimited or unknown) and
            ``native``: the native regions alive now (``regions``, ``bytes``, ``locked_regions``,
            ``locked_bytes``, ``released_regions``, ``released_bytes``), or None when the native backend was
            not used in this process (the ``pin_memory`` op is never built or loaded for the report).
        """
        from anyaccel.accelerator import native_pinned
        from anyaccel.accelerator.host_memory_stats import memlock_limit_bytes
        from anyaccel.settings import SettingError

        try:
            backend = "native" if native_pinned.native_backend_selected() else "torch"
        except SettingError as exc:
            backend = f"invalid: {exc}"
        pins = native_pinned.existing_native_pins(str(self._name))
        with _TRACKED_LOCK:
            tracked_bytes, tracked_calls = _TRACKED
        return {"backend": backend, "tracked_bytes": tracked_bytes, "tracked_calls": tracked_calls,
                "memlock_limit_bytes": memlock_limit_bytes(), "native": pins.stats() if pins is not None else None}

    def _torch_pin_memory(self, tensor: torch.Tensor) -> torch.Tensor:
        """A page-locked copy of a CPU tensor (``tensor.pin_memory()``); ``tensor`` itself where pinning is a no-op."""
        if not self._torch_pins_host_memory:
            return tensor
        return tensor.pin_memory()

    def _torch_empty_pinned(self, tensor: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        """A fresh uninitialised host buffer of ``shape`` and ``tensor``'s dtype, page-locked where meaningful."""
        return tensor.new_empty(tuple(shape), device="cpu", pin_memory=bool(self._torch_pins_host_memory))

    def _torch_is_pinned(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` lives in page-locked host memory (every CPU tensor, with unified memory)."""
        if self._unified_host_memory:
            return tensor.device.type == "cpu"
        return bool(tensor.is_pinned())

    @staticmethod
    def _shape_numel(shape: Sequence[int]) -> int:
        """Number of elements of a tensor of ``shape``."""
        numel = 1
        for dim in shape:
            numel *= int(dim)
        return numel

    @staticmethod
    def _require_host_device(device: Any) -> None:
        """Check that ``device`` names the host.

        Raises:
            NotHostDeviceError: (a ``ValueError``) ``device`` is not a CPU device or not a device at all.
        """
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise NotHostDeviceError(device) from err
        if dev.type != "cpu":
            raise NotHostDeviceError(device)

    def _pin_fresh(self, template: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        """A fresh pinned scratch buffer of ``shape`` with ``template``'s dtype (native backend first)."""
        pins = self._native_pinned_memory()
        if pins is not None or self._torch_pins_host_memory:
            self._track_pinned_memory(self._shape_numel(shape) * template.element_size())
        if pins is not None:
            return pins.pin_empty(template, tuple(shape))
        return self._torch_empty_pinned(template, shape)

    def pin_memory(self, tensor: torch.Tensor, make_copy: Any = True, match_shape: bool = True,
                   align_bytes: int = 1) -> torch.Tensor:
        """Page-locked host memory for ``tensor``.

        Args:
            tensor: a CPU tensor.
            make_copy: True (default): return a pinned copy of ``tensor``'s data. False: ``tensor`` is only
                a template and a fresh, uninitialised pinned buffer of its dtype is returned (DeepSpeed >=
                0.18). An ``int`` that is not a bool here is the classic signature's ``align_bytes``.
            match_shape: with ``make_copy=False``, give the buffer ``tensor``'s shape (True) or a flat shape
                of ``tensor.numel()`` elements (False); the native backend honours it for copies too.
            align_bytes: classic signature (DeepSpeed <= 0.18.0); torch's pinned allocator already aligns
                to pages, so it is accepted and ignored.

        Returns:
            A pinned CPU tensor; ``tensor`` itself where pinning is a no-op (CPU, MPS) and a copy was asked.

        Raises:
            TypeError: the native backend is selected and ``tensor`` is sparse (see
                [`NativePinnedHostMemory.pin`][anyaccel.accelerator.native_pinned.NativePinnedHostMemory.pin]).

        Side effects: counts the pinned bytes (`_track_pinned_memory`).
        """
        if isinstance(make_copy, int) and not isinstance(make_copy, bool):
            make_copy = True  # classic positional align_bytes
        pins = self._native_pinned_memory()
        if pins is not None:
            if tensor.layout == torch.strided:  # counted first, as DeepSpeed does; a sparse tensor has no nbytes
                self._track_pinned_memory(tensor.nbytes)  # (anyaccel's backend refuses it, uncounted)
            return pins.pin(tensor, make_copy=make_copy, match_shape=match_shape)
        if make_copy:
            if self._torch_pins_host_memory:
                self._track_pinned_memory(tensor.nbytes)
            return self._torch_pin_memory(tensor)
        shape = tensor.shape if match_shape else (tensor.numel(),)
        return self._pin_fresh(tensor, shape)

    def pin_empty(self, *size: Any, dtype: torch.dtype, device: Any = "cpu") -> torch.Tensor:
        """A fresh, uninitialised pinned host tensor (DeepSpeed >= 0.19.8), without a pageable template.

        Args:
            *size: the shape, as integers or one tuple/list/``torch.Size``.
            dtype: the element type.
            device: must name the host (``"cpu"``): this allocates host memory.

        Raises:
            NotHostDeviceError: ``device`` is not the CPU.
        """
        self._require_host_device(device)
        if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
            shape = tuple(size[0])
        else:
            shape = tuple(size)
        return self._pin_fresh(torch.empty(0, dtype=dtype, device="cpu"), shape)

    def pin_empty_like(self, tensor: torch.Tensor, device: Any = "cpu", dtype: torch.dtype | None = None
                       ) -> torch.Tensor:
        """A fresh pinned host tensor shaped like ``tensor`` (of ``dtype``, else ``tensor``'s dtype).

        ``tensor`` may live on any device; only its shape and dtype are read. DeepSpeed's
        ``engine.offload_states()`` and ZeRO-1/2 offload call this.

        Raises:
            NotHostDeviceError: ``device`` is not the CPU.
        """
        self._require_host_device(device)
        template = torch.empty(0, dtype=tensor.dtype if dtype is None else dtype, device="cpu")
        return self._pin_fresh(template, tuple(tensor.shape))

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is in page-locked host memory (native backend first, then torch)."""
        pins = self._native_pinned_memory()
        if pins is not None and pins.is_pinned(tensor):
            return True
        return self._torch_is_pinned(tensor)

    def unpin_memory(self, tensor: torch.Tensor) -> Any:
        """Release pinning of ``tensor``.

        Returns:
            The native backend's answer (True when it freed the buffer); None otherwise, as DeepSpeed:
            torch frees its pinned memory when the tensor dies, so there is nothing to do.
        """
        pins = self._native_pinned_memory()
        if pins is not None:
            return pins.unpin(tensor)
        return None

    def pin_memory_alignment(self) -> int:
        """Byte alignment `register_host_memory` needs (class attribute ``_pin_memory_alignment``; 1: none)."""
        return int(self._pin_memory_alignment)

    def _host_register_functions(self) -> tuple[Callable[..., Any], Callable[..., Any], int] | None:
        """(register, unregister, flags) from the device runtime per ``_host_register``, or None if absent."""
        spec = getattr(self, "_host_register", None)
        accessor = optional_attribute(self.device_type, spec[0]) if spec else None
        if spec is None or accessor is None:
            return None
        runtime = accessor()
        register, unregister = getattr(runtime, spec[1], None), getattr(runtime, spec[2], None)
        if register is None or unregister is None:
            return None
        return register, unregister, spec[3]

    def register_host_memory(self, address: int, num_bytes: int) -> bool:
        """Register ``num_bytes`` of page-locked host memory at ``address`` with the device runtime.

        Used by DeepSpeed's native pinned-memory backend so device copies from mlocked buffers use DMA.
        ``address`` must be aligned to `pin_memory_alignment`.

        Returns:
            True when registered; False when this device's runtime has no host registration (CPU, MPS, XPU,
            a runtime lacking the call).

        Raises:
            HostRegistrationError: the runtime call returned an error code.

        Side effects: initialises the device runtime (``torch.cuda.cudart()``, ``torch.npu.npurt()``).
        """
        functions = self._host_register_functions()
        if functions is None:
            return False
        register, _, flags = functions
        code = int(register(address, num_bytes, flags))
        if code != 0:
            raise HostRegistrationError(str(self._name), "register", address, code)
        return True

    def unregister_host_memory(self, address: int) -> None:
        """Undo `register_host_memory` for ``address``; nothing where registration is unsupported.

        Raises:
            HostRegistrationError: the runtime call returned an error code.
        """
        functions = self._host_register_functions()
        if functions is None:
            return None
        code = int(functions[1](address))
        if code != 0:
            raise HostRegistrationError(str(self._name), "unregister", address, code)
        return None

