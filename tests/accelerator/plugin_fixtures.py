"""Minimal plug-in accelerators, written the way DeepSpeed plug-ins are (no ``super().__init__()``)."""

from __future__ import annotations

from anyaccel.accelerator import DeepSpeedAccelerator
from anyaccel.accelerator.cpu import CPU_Accelerator


class CoreOnlyAccelerator(DeepSpeedAccelerator):
    """Implements only the abstract core; runs on the host through torch.cpu-style defaults."""

    def __init__(self) -> None:  # deliberately no super().__init__(), like real DeepSpeed plug-ins
        self._name = "coreonly"
        self._device_type = "cpu"
        self._communication_backend_name = "gloo"

    def is_available(self) -> bool:
        return True

    def communication_backend_name(self) -> str:
        return self._communication_backend_name


class HostPluginAccelerator(CPU_Accelerator):
    """A plug-in subclassing a built-in, with a name and priority of its own."""

    accelerator_priority = 1000
    _device_type = "cpu"

    def __init__(self) -> None:
        self._name = "hostplugin"
