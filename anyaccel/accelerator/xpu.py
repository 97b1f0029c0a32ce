"""The XPU accelerator: Intel GPUs through stock ``torch.xpu``; Intel Extension for PyTorch when installed.

Stock PyTorch (>= 2.4) has ``torch.xpu``; IPEX is imported when it is installed (it adds kernels and, on
older torch, the XPU runtime itself) but is never required. Communication backend ``xccl`` (stock
PyTorch >= 2.8), or ``ccl`` when the oneCCL bindings are installed, as in DeepSpeed's ``xpu_accelerator.py``.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Sequence
from typing import ClassVar

import torch
from typing_extensions import override

from anyaccel.accelerator.device_module import optional_attribute
from anyaccel.accelerator.registry import ProbeResult
from anyaccel.accelerator.torch_device import TorchDeviceAccelerator, package_installed

logger = logging.getLogger(__name__)

__all__ = ["XPU_Accelerator"]


def _xpu_device_count() -> int:
    """Devices ``torch.xpu`` sees; 0 when torch has no XPU runtime."""
    compiled = optional_attribute("xpu", "_is_compiled")
    count = optional_attribute("xpu", "device_count")
    if count is None or (compiled is not None and not compiled()):
        return 0
    return int(count())


class XPU_Accelerator(TorchDeviceAccelerator):  # noqa: N801 (DeepSpeed's class name)
    """Intel GPUs through ``torch.xpu``."""

    _name = "xpu"
    accelerator_priority = 300
    _communication_backend = "xccl"
    _ccl_package = "oneccl_bindings_for_pytorch"
    _graph_class_name = "XPUGraph"
    _visible_devices_envs: Sequence[str] = ("ZE_AFFINITY_MASK",)
    _export_envs: Sequence[str] = ()
    #: optional vendor extension, imported when installed.
    _extension_package: ClassVar[str] = "intel_extension_for_pytorch"

    @override
    def __init__(self) -> None:
        """Set DeepSpeed's attributes and import IPEX when it is installed.

        Side effects: imports ``intel_extension_for_pytorch`` if present (never when absent).
        """
        super().__init__()
        if package_installed(self._extension_package):
            importlib.import_module(self._extension_package)
            logger.debug("imported %s for the XPU accelerator", self._extension_package)

    @classmethod
    @override
    def probe(cls) -> ProbeResult:
        """Available when ``torch.xpu`` (possibly registered by IPEX) sees at least one device.

        Side effects: imports IPEX only when stock torch has no XPU runtime and IPEX is installed.
        """
        mask = os.environ.get("ZE_AFFINITY_MASK")
        where = f"ZE_AFFINITY_MASK={mask!r}" if mask is not None else "ZE_AFFINITY_MASK not set"
        compiled = optional_attribute("xpu", "_is_compiled")
        stock = compiled is not None and bool(compiled())
        has_ipex = package_installed(cls._extension_package)
        if not stock and has_ipex:
            importlib.import_module(cls._extension_package)
            stock = optional_attribute("xpu", "device_count") is not None
        if not stock:
            return ProbeResult(
                False, f"this torch build ({torch.__version__}) has no XPU support and "
                f"{cls._extension_package} is not installed"
            )
        count = _xpu_device_count()
        if count == 0:
            via = " with IPEX" if has_ipex else ""
            return ProbeResult(False, f"torch.xpu{via} is present but sees no XPU device ({where})", True)
        return ProbeResult(True, f"{count} XPU device(s) visible ({where})", True)
