"""The MPS accelerator: Apple silicon GPUs through ``torch.mps``.

``torch.mps`` has no device index, no streams and no peak-memory counters, and names its memory functions
differently; this class maps the interface onto it: memory figures from ``current_allocated_memory``
(allocated), ``driver_allocated_memory`` (reserved) and ``recommended_max_memory`` (total), peaks sampled
(``PeakGauge``), a host stream stand-in, ``gloo`` for communication (DeepSpeed's MPS backend has none).

Values DeepSpeed's own code depends on follow DeepSpeed's ``mps_accelerator.py``: MPS is a synchronized
device (one in-order command queue, so all four device-behaviour flags are True), it has no float64, its
visible-devices variable is ``CUDA_VISIBLE_DEVICES`` (the launcher indexes ``visible_devices_envs()[0]``),
and with unified memory every host tensor counts as pinned while pinning itself is a no-op.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
from typing_extensions import override

from anyaccel._compat import devices
from anyaccel.accelerator.host_memory_stats import PeakGauge
from anyaccel.accelerator.host_sync import HostStream, host_stream_class
from anyaccel.accelerator.registry import ProbeResult
from anyaccel.accelerator.torch_device import TorchDeviceAccelerator

__all__ = ["MPS_Accelerator"]


class MPS_Accelerator(TorchDeviceAccelerator):  # noqa: N801 (DeepSpeed's class name)
    """One Apple GPU, index 0."""

    _name = "mps"
    accelerator_priority = 100
    _communication_backend = "gloo"
    _synchronized_device = True
    #: Event is ``torch.mps.Event``; streams are the host stand-ins (see `Stream`).
    _host_streams = False
    _fp64_supported = False
    _torch_pins_host_memory = False
    _unified_host_memory = True
    #: DeepSpeed's value (``mps_accelerator.py``): its launcher reads ``visible_devices_envs()[0]``.
    _visible_devices_envs: Sequence[str] = ("CUDA_VISIBLE_DEVICES",)
    _export_envs: Sequence[str] = ()

    @classmethod
    @override
    def probe(cls) -> ProbeResult:
        """Available when ``torch.backends.mps.is_available()`` (macOS 12.3+ on Apple silicon)."""
        backend = torch.backends.mps
        if not backend.is_built():
            return ProbeResult(False, f"this torch build ({torch.__version__}) has no MPS support")
        if not backend.is_available():
            return ProbeResult(False, "torch is built with MPS but no Metal device is usable here", True)
        return ProbeResult(True, "Apple Metal (MPS) device available", True)

    def _gauge(self) -> PeakGauge:
        gauge = self.__dict__.get("_peak_gauge")
        if gauge is None:
            gauge = self.__dict__["_peak_gauge"] = PeakGauge()
        return gauge

    @staticmethod
    def _check_index(device_index: int | None) -> None:
        if device_index not in (None, 0):
            raise ValueError(f"MPS has one device, index 0; got device_index={device_index!r}")

    # device APIs
    @override
    def is_available(self) -> bool:
        """``torch.backends.mps.is_available()``."""
        return bool(torch.backends.mps.is_available())

    @override
    def device_count(self) -> int:
        """1 when MPS is available, else 0."""
        return 1 if self.is_available() else 0

    @override
    def current_device(self) -> int:
        """Always 0."""
        return 0

    @override
    def set_device(self, device_index: int) -> None:
        """Accepts only 0.

        Raises:
            ValueError: ``device_index`` is not 0.
        """
        self._check_index(device_index)

    @override
    def synchronize(self, device_index: int | None = None) -> None:
        """``torch.mps.synchronize()``."""
        self._check_index(device_index)
        torch.mps.synchronize()

    # streams: host stand-ins on every torch
    @property
    @override
    def Stream(self) -> type:  # noqa: N802 (DeepSpeed's name)
        """The host stream stand-in (synchronizes the device), on every torch version.

        DeepSpeed's MPS accelerator has no streams, and torch had none for MPS before 2.15; torch 2.15's
        ``torch.mps.Stream`` is not used, so MPS behaves the same on every supported torch.
        """
        return host_stream_class(self.device_type, lambda: self.synchronize())

    @override
    def stream(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        """A no-op context yielding ``stream`` (MPS work runs in one in-order queue)."""
        return contextlib.nullcontext(stream)

    @override
    def current_stream(self, device_index: int | None = None) -> HostStream:
        """A host stream stand-in."""
        self._check_index(device_index)
        return self.Stream()

    @override
    def default_stream(self, device_index: int | None = None) -> HostStream:
        """A host stream stand-in."""
        return self.current_stream(device_index)

    # RNG
    @override
    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        """``torch.mps.set_rng_state``."""
        torch.mps.set_rng_state(new_state)

    @override
    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        """``torch.mps.get_rng_state()``."""
        return torch.mps.get_rng_state()

    @override
    def manual_seed_all(self, seed: int) -> None:
        """``torch.mps.manual_seed``: there is one device."""
        torch.mps.manual_seed(seed)

    @override
    def initial_seed(self) -> int:
        """The initial seed of the MPS default generator."""
        return int(self.default_generator(0).initial_seed())

    @override
    def default_generator(self, device_index: int) -> torch.Generator:
        """The MPS default generator.

        Raises:
            anyaccel._compat.PrivateAPIUnavailableError: this torch has no way to reach it.
        """
        self._check_index(device_index)
        return devices.mps_default_generator()

    # memory (bytes)
    @override
    def memory_allocated(self, device_index: int | None = None) -> int:
        """``torch.mps.current_allocated_memory()``."""
        return self._gauge().observe("allocated", int(torch.mps.current_allocated_memory()))

    @override
    def max_memory_allocated(self, device_index: int | None = None) -> int:
        """Largest allocated figure observed since the last reset (``PeakGauge``)."""
        return self._gauge().peak("allocated", int(torch.mps.current_allocated_memory()))

    @override
    def memory_reserved(self, device_index: int | None = None) -> int:
        """``torch.mps.driver_allocated_memory()``."""
        return self._gauge().observe("reserved", int(torch.mps.driver_allocated_memory()))

    @override
    def max_memory_reserved(self, device_index: int | None = None) -> int:
        """Largest reserved figure observed since the last reset."""
        return self._gauge().peak("reserved", int(torch.mps.driver_allocated_memory()))

    @override
    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """Restart peaks from the current figures."""
        self._gauge().reset(current={
            "allocated": int(torch.mps.current_allocated_memory()),
            "reserved": int(torch.mps.driver_allocated_memory()),
        })

    @override
    def memory_stats(self, device_index: int | None = None) -> dict[str, Any]:
        """MPS figures under ``torch.cuda.memory_stats`` key names (bytes)."""
        return {
            "allocated_bytes.all.current": self.memory_allocated(),
            "allocated_bytes.all.peak": self.max_memory_allocated(),
            "reserved_bytes.all.current": self.memory_reserved(),
            "reserved_bytes.all.peak": self.max_memory_reserved(),
        }

    @override
    def set_per_process_memory_fraction(self, fraction: float, device_index: int | None = None) -> None:
        """``torch.mps.set_per_process_memory_fraction(fraction)``: ``torch.mps``'s takes no device argument.

        Raises:
            ValueError: ``device_index`` is not None or 0.
        """
        self._check_index(device_index)
        torch.mps.set_per_process_memory_fraction(fraction)

    @override
    def total_memory(self, device_index: int | None = None) -> int:
        """``torch.mps.recommended_max_memory()``: the GPU's recommended working-set size."""
        return int(torch.mps.recommended_max_memory())

    @override
    def available_memory(self, device_index: int | None = None) -> int:
        """``total_memory() - memory_reserved()``, never negative."""
        return max(0, self.total_memory() - self.memory_reserved())

    # data types
    @override
    def is_bf16_supported(self) -> bool:
        """True on macOS 14 or newer (``torch.backends.mps.is_macos_or_newer(14, 0)``)."""
        check = getattr(torch.backends.mps, "is_macos_or_newer", None)
        return bool(check(14, 0)) if check is not None and self.is_available() else False
