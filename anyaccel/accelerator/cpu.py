"""The CPU accelerator: the host as a device, always available, the fallback of selection.

Differences from the torch-device defaults, following DeepSpeed's ``cpu_accelerator.py``: the only
synchronized device; device names are always ``"cpu"``; the device count and index come from the
launcher's ``LOCAL_WORLD_SIZE``/``LOCAL_SIZE`` and ``LOCAL_RANK`` (one "device" per local rank); memory
figures are the process's resident set and the machine's memory; pinning is a no-op (there is no device
to pin for); bfloat16 is supported and float16 only where oneDNN has fast fp16 kernels. The
visible-devices variable is ``CUDA_VISIBLE_DEVICES``, as DeepSpeed's: its launcher indexes
``visible_devices_envs()[0]`` on every accelerator.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from typing_extensions import override

from anyaccel._compat import devices
from anyaccel.accelerator.device_names import device_index_of
from anyaccel.accelerator.host_memory_stats import (
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
    _host_streams = True
    _torch_pins_host_memory = False
    #: DeepSpeed's value (``cpu_accelerator.py``): its launcher reads ``visible_devices_envs()[0]``.
    _visible_devices_envs: Sequence[str] = ("CUDA_VISIBLE_DEVICES",)
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
    @override
    def probe(cls) -> ProbeResult:
        """Always available."""
        return ProbeResult(True, "the host CPU is always available", stack_present=True)

    @override
    def is_available(self) -> bool:
        """Always True."""
        return True

    # device APIs
    @override
    def device_name(self, device_index: int | str | torch.device | None = None) -> str:
        """Always ``"cpu"``: torch has one CPU device. ``device_index`` is checked as the base class does.

        Raises:
            TypeError: ``device_index`` is of a kind no device argument has (bool, float...).
            ValueError: a negative index, a string that is no device, or a device of another type.
        """
        device_index_of(device_index, "cpu")
        return "cpu"

    @override
    def device(self, device_index: int | None = None) -> torch.device:
        """``torch.device("cpu")``."""
        return torch.device("cpu")

    @override
    def set_device(self, device_index: int) -> None:
        """No-op: there is one CPU device."""

    @override
    def current_device(self) -> int:
        """This process's local rank (``LOCAL_RANK``), 0 outside a launcher."""
        return _first_int_env(self._device_index_envs, 0)

    @override
    def current_device_name(self) -> str:
        """Always ``"cpu"``."""
        return "cpu"

    @override
    def device_count(self) -> int:
        """Local ranks of the job (``LOCAL_WORLD_SIZE`` or ``LOCAL_SIZE``), 1 outside a launcher."""
        return _first_int_env(self._device_count_envs, 1)

    @override
    def synchronize(self, device_index: int | None = None) -> None:
        """No-op: CPU work is complete when the call returns."""

    # RNG: the CPU generator is torch's default generator
    @override
    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        """``torch.set_rng_state``."""
        torch.set_rng_state(new_state)

    @override
    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        """``torch.get_rng_state()`` (a uint8 tensor)."""
        return torch.get_rng_state()

    @override
    def manual_seed(self, seed: int) -> None:
        """``torch.manual_seed`` (seeds the CPU generator)."""
        torch.manual_seed(seed)

    @override
    def manual_seed_all(self, seed: int) -> None:
        """``torch.manual_seed``: there is one CPU generator."""
        torch.manual_seed(seed)

    @override
    def initial_seed(self) -> int:
        """``torch.initial_seed()``."""
        return int(torch.initial_seed())

    @override
    def seed(self) -> None:
        """``torch.seed()``: re-seed the CPU generator non-deterministically."""
        torch.seed()

    @override
    def default_generator(self, device_index: int) -> torch.Generator:
        """``torch.default_generator``."""
        return torch.default_generator

    # memory: process resident set and machine memory, in bytes
    def _current(self) -> dict[str, int]:
        rss = process_rss_bytes()
        return {"allocated": rss, "reserved": rss}

    @override
    def memory_allocated(self, device_index: int | None = None) -> int:
        """Resident set size of this process in bytes."""
        return self._gauge().observe("allocated", process_rss_bytes())

    @override
    def max_memory_allocated(self, device_index: int | None = None) -> int:
        """Largest resident set size observed since the last reset (see ``PeakGauge``), in bytes."""
        return self._gauge().peak("allocated", process_rss_bytes())

    @override
    def memory_reserved(self, device_index: int | None = None) -> int:
        """Same as `memory_allocated`: the host has no caching allocator."""
        return self._gauge().observe("reserved", process_rss_bytes())

    @override
    def max_memory_reserved(self, device_index: int | None = None) -> int:
        """Same as `max_memory_allocated`."""
        return self._gauge().peak("reserved", process_rss_bytes())

    @override
    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """Restart peaks from the current resident set size."""
        self._gauge().reset(current=self._current())

    def get_rss(self) -> int:
        """Resident set size of this process in bytes, recorded toward the peaks (DeepSpeed's CPU helper)."""
        rss = process_rss_bytes()
        self._gauge().observe("allocated", rss)
        self._gauge().observe("reserved", rss)
        return rss

    def reset_rss(self) -> int:
        """Restart the peaks from the current resident set size and return it (DeepSpeed's CPU helper)."""
        self.reset_peak_memory_stats()
        return process_rss_bytes()

    @override
    def memory_stats(self, device_index: int | None = None) -> dict[str, Any]:
        """Resident-set figures under ``torch.cuda.memory_stats`` key names (bytes)."""
        return {
            "allocated_bytes.all.current": self.memory_allocated(),
            "allocated_bytes.all.peak": self.max_memory_allocated(),
            "reserved_bytes.all.current": self.memory_reserved(),
            "reserved_bytes.all.peak": self.max_memory_reserved(),
        }

    @override
    def total_memory(self, device_index: int | None = None) -> int:
        """Physical memory of the machine in bytes."""
        return total_host_memory_bytes()

    @override
    def available_memory(self, device_index: int | None = None) -> int:
        """Memory available on the machine in bytes."""
        return available_host_memory_bytes()

    # data types
    @override
    def is_bf16_supported(self) -> bool:
        """True, as in DeepSpeed: torch has bfloat16 kernels on every CPU."""
        return True

    @override
    def is_fp16_supported(self) -> bool:
        """True only where oneDNN reports fast float16 (`anyaccel._compat.devices.mkldnn_fp16_supported`)."""
        return devices.mkldnn_fp16_supported()
