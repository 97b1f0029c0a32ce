"""The NPU accelerator: Huawei Ascend through the ``torch_npu`` package.

``torch_npu`` registers ``torch.npu``; it is imported only when it is installed and either probed by
selection or the NPU accelerator is constructed. Differences follow DeepSpeed's ``npu_accelerator.py``:
``hccl``, ``ASCEND_RT_VISIBLE_DEVICES``, launcher exports ``ASCEND``/``HCCL``/``LD_LIBRARY``/``PATH``, NPU graphs,
host-memory registration through ``torch.npu.npurt()`` (4 KiB alignment).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import ClassVar

from typing_extensions import override

from anyaccel.accelerator.device_module import optional_attribute
from anyaccel.accelerator.registry import ProbeResult
from anyaccel.accelerator.torch_device import TorchDeviceAccelerator, package_installed

__all__ = ["NPU_Accelerator"]


class NPU_Accelerator(TorchDeviceAccelerator):  # noqa: N801 (DeepSpeed's class name)
    """Ascend NPUs through ``torch_npu`` / ``torch.npu``."""

    _name = "npu"
    accelerator_priority = 200
    _communication_backend = "hccl"
    _graph_class_name = "NPUGraph"
    _visible_devices_envs: Sequence[str] = ("ASCEND_RT_VISIBLE_DEVICES",)
    _export_envs: Sequence[str] = ("ASCEND", "HCCL", "LD_LIBRARY", "PATH")
    #: ``aclrtHostRegister`` MAPPED registration (flag 0x2) needs 4 KiB-aligned addresses (DeepSpeed's value).
    _pin_memory_alignment = 4096
    _host_register = ("npurt", "npuHostRegister", "npuHostUnregister", 0x2)
    #: the vendor package providing ``torch.npu``.
    _vendor_package: ClassVar[str] = "torch_npu"

    @override
    def __init__(self) -> None:
        """Import ``torch_npu`` (which registers ``torch.npu``) and set DeepSpeed's attributes.

        Raises:
            ImportError: ``torch_npu`` is not installed; the message names the package to install.
        """
        if not package_installed(self._vendor_package):
            raise ImportError(
                f"the NPU accelerator needs the {self._vendor_package!r} package, which is not installed; "
                f"install the torch_npu build matching torch, or choose another accelerator"
            )
        importlib.import_module(self._vendor_package)
        super().__init__()

    @classmethod
    @override
    def probe(cls) -> ProbeResult:
        """Available when ``torch_npu`` is installed, imports, and ``torch.npu`` sees a device.

        Side effects: imports ``torch_npu`` only when it is installed; never when absent.
        """
        if not package_installed(cls._vendor_package):
            return ProbeResult(False, f"{cls._vendor_package} is not installed")
        try:
            importlib.import_module(cls._vendor_package)
        except Exception as exc:  # an installed but broken vendor stack is a probe result, not a crash
            return ProbeResult(False, f"{cls._vendor_package} is installed but fails to import: {exc}", True)
        count_fn = optional_attribute("npu", "device_count")
        count = int(count_fn()) if count_fn is not None else 0
        mask = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
        where = f"ASCEND_RT_VISIBLE_DEVICES={mask!r}" if mask is not None else "ASCEND_RT_VISIBLE_DEVICES not set"
        if count == 0:
            return ProbeResult(False, f"{cls._vendor_package} is installed but sees no NPU device ({where})", True)
        return ProbeResult(True, f"{count} NPU device(s) visible ({where})", True)
