"""A fake GPU-like accelerator for the engine tests."""

from __future__ import annotations

from typing_extensions import override

from anyaccel.accelerator.abstract import DeepSpeedAccelerator


class FakeGPU(DeepSpeedAccelerator):
    """A GPU-like accelerator with an explicit device count; records ``set_device`` calls.

    Named ``cuda`` so that ``torch.device("cuda", i)`` can be built on a CPU-only torch; nothing runs on it.
    """

    _name = "cuda"
    _visible_devices_envs = ("CUDA_VISIBLE_DEVICES",)

    def __init__(self, count: int, backend: str = "nccl") -> None:
        self.count = count
        self.backend = backend
        self.set_device_calls: list[int] = []

    @override
    def is_available(self) -> bool:
        return self.count > 0

    @override
    def communication_backend_name(self) -> str:
        return self.backend

    @override
    def device_count(self) -> int:
        return self.count

    @override
    def set_device(self, device_index: int) -> None:
        self.set_device_calls.append(device_index)
