"""The CPU accelerator: the host as a device, always available, the fallback of selection.

Differences from the torch-device defaults, following DeepSpeed's ``cpu_accelerator.py``: the only
synchronized device; device names are always ``"cpu"``; the device count and index come from the
launcher's ``LOCAL_WORLD_SIZE``/``LOCAL_SIZE`` and ``LOCAL_RANK`` (one "device" per local rank); memory
figures are the process's resident set and the machine's memory; pinning is a no-op (there is no device
to pin for); bfloat16 is supported and float16 only where oneDNN has fast fp16 kernels.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from anyaccel.accelerator.host_memory import (
    PeakGauge,
    available_host_memory_bytes,
    process_rss_bytes,
    total_host_memory_bytes,
)
from anyaccel.accelerator.registry import ProbeResult
from anyaccel.accelerator.torch_device import TorchDeviceAccelerator

__all__ = ["CPU_Accelerator"]


def _first_int_env(names: Sequence[str], default: int) -> int:
    """The first of ``names`` set to an integer in ``os.environ``, else ``default``."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return default


class CPU_Accelerator(TorchDeviceAccelerator):  # noqa: N801 (DeepSpeed's class name)
    """The host CPU. Communication backend ``gloo``, or ``ccl`` when oneCCL bindings are installed."""

    _name = "cpu"
    _legacy_tensor_module = "torch"
    accelerator_priority = 0
    _communication_backend = "gloo"
    _ccl_package = "oneccl_bindings_for_pytorch"
    _synchronized_device = True
    _visible_devices_envs: Sequence[str] = ()
    _export_envs: Sequence[str] = ()
    #: variables giving the number of local ranks (torchrun's, then DeepSpeed launcher's).
    _device_count_envs: ClassVar[Sequence[str]] = ("LOCAL_WORLD_SIZE", "LOCAL_SIZE")
    #: variables giving this process's local rank.
    _device_index_envs: ClassVar[Sequence[str]] = ("LOCAL_RANK",)

    def _gauge(self) -> PeakGauge:
        gauge = self.__dict__.get("_peak_gauge")
        if gauge is None:
            gauge = self.__dict__["_peak_gauge"] = PeakGauge()
        return gauge

    @classmethod
    def probe(cls) -> ProbeResult:
        """Always available."""
        return ProbeResult(True, "the host CPU is always available", stack_present=True)

    def is_available(self) -> bool:
        """Always True."""
        return True

    # device APIs
    def device_name(self, device_index: int | None = None) -> str:
        """Always ``"cpu"``: torch has one CPU device."""
        return "cpu"

    def device(self, device_index: int | None = None) -> torch.device:
        """``torch.device("cpu")``."""
        return torch.device("cpu")

    def set_device(self, device_index: int) -> None:
        """No-op: there is one CPU device."""

    def current_device(self) -> int:
        """This process's local rank (``LOCAL_RANK``), 0 outside a launcher."""
        return _first_int_env(self._device_index_envs, 0)

    def current_device_name(self) -> str:
        """Always ``"cpu"``."""
        return "cpu"

    def device_count(self) -> int:
        """Local ranks of the job (``LOCAL_WORLD_SIZE`` or ``LOCAL_SIZE``), 1 outside a launcher."""
        return _first_int_env(self._device_count_envs, 1)

    def synchronize(self, device_index: int | None = None) -> None:
        """No-op: CPU work is complete when the call returns."""

    # RNG: the CPU generator is torch's default generator
    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        """``torch.set_rng_state``."""
        torch.set_rng_state(new_state)

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        """``torch.get_rng_state()`` (a uint8 tensor)."""
        return torch.get_rng_state()

    def manual_seed(self, seed: int) -> None:
        """``torch.manual_seed`` (seeds the CPU generator)."""
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        """``torch.manual_seed``: there is one CPU generator."""
        torch.manual_seed(seed)

    def initial_seed(self) -> int:
        """``torch.initial_seed()``."""
        return int(torch.initial_seed())

    def default_generator(self, device_index: int) -> torch.Generator:
        """``torch.default_generator``."""
        return torch.default_generator

    # memory: process resident set and machine memory, in bytes
    def _current(self) -> dict[str, int]:
        rss = process_rss_bytes()
        return {"allocated": rss, "reserved": rss}

    def memory_allocated(self, device_index: int | None = None) -> int:
        """Resident set size of this process in bytes."""
        return self._gauge().observe("allocated", process_rss_bytes())

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        """Largest resident set size observed since the last reset (see ``PeakGauge``), in bytes."""
        return self._gauge().peak("allocated", process_rss_bytes())

    def memory_reserved(self, device_index: int | None = None) -> int:
        """Same as :meth:`memory_allocated`: the host has no caching allocator."""
        return self._gauge().observe("reserved", process_rss_bytes())

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        """Same as :meth:`max_memory_allocated`."""
        return self._gauge().peak("reserved", process_rss_bytes())

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """Restart peaks from the current resident set size."""
        self._gauge().reset(current=self._current())

    def memory_stats(self, device_index: int | None = None) -> dict[str, Any]:
        """Resident-set figures under ``torch.cuda.memory_stats`` key names (bytes)."""
        return {
            "allocated_bytes.all.current": self.memory_allocated(),
            "allocated_bytes.all.peak": self.max_memory_allocated(),
            "reserved_bytes.all.current": self.memory_reserved(),
            "reserved_bytes.all.peak": self.max_memory_reserved(),
        }

    def total_memory(self, device_index: int | None = None) -> int:
        """Physical memory of the machine in bytes."""
        return total_host_memory_bytes()

    def available_memory(self, device_index: int | None = None) -> int:
        """Memory available on the machine in bytes."""
        return available_host_memory_bytes()

    # data types
    def is_bf16_supported(self) -> bool:
        """True, as in DeepSpeed: torch has bfloat16 kernels on every CPU."""
        return True

    def is_fp16_supported(self) -> bool:
        """True only where oneDNN reports fast float16 (``torch.ops.mkldnn._is_mkldnn_fp16_supported``)."""
        try:
            return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
        except (AttributeError, RuntimeError):
            return False

    # pinning: no device to pin for
    def _torch_pin_memory(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` itself: host memory needs no pinning for the CPU."""
        return tensor

    def pin_memory(self, tensor: torch.Tensor, make_copy: Any = True, match_shape: bool = True,
                   align_bytes: int = 1) -> torch.Tensor:
        """``tensor`` itself (as DeepSpeed's CPU accelerator), or a new buffer when ``make_copy=False``."""
        if isinstance(make_copy, bool) and not make_copy:
            return torch.empty(tensor.shape if match_shape else (tensor.numel(),), dtype=tensor.dtype)
        return tensor
