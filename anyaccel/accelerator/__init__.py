"""The runtime device layer: DeepSpeed's accelerator interface on CUDA/ROCm, XPU, NPU, CPU, MPS and plug-ins.

Importing this package imports no device module beyond torch's own, spawns no process and probes nothing;
``get_accelerator()`` selects on its first call (see `anyaccel.accelerator.selection` and
``docs/accelerators.md``). Concrete accelerator classes live in their own modules
(``anyaccel.accelerator.cuda.CUDA_Accelerator``...) and are imported when selection needs them.
"""

from anyaccel.accelerator.abstract import DeepSpeedAccelerator
from anyaccel.accelerator.errors import (
    AcceleratorError,
    AcceleratorUnavailableError,
    HostRegistrationError,
    InvalidAcceleratorError,
    NotHostDeviceError,
    UnknownAcceleratorError,
    UnsupportedCompileBackendError,
    UnsupportedOperationError,
)
from anyaccel.accelerator.registry import (
    ENTRY_POINT_GROUP,
    AcceleratorSpec,
    ProbeResult,
    register_accelerator,
    unregister_accelerator,
)
from anyaccel.accelerator.selection import (
    CandidateReport,
    SelectionReport,
    explain,
    get_accelerator,
    reset_accelerator,
    set_accelerator,
)
from anyaccel.accelerator.torch_device import TorchDeviceAccelerator

__all__ = [
    "DeepSpeedAccelerator",
    "TorchDeviceAccelerator",
    "get_accelerator",
    "set_accelerator",
    "reset_accelerator",
    "explain",
    "SelectionReport",
    "CandidateReport",
    "ProbeResult",
    "AcceleratorSpec",
    "register_accelerator",
    "unregister_accelerator",
    "ENTRY_POINT_GROUP",
    "AcceleratorError",
    "AcceleratorUnavailableError",
    "InvalidAcceleratorError",
    "UnknownAcceleratorError",
    "UnsupportedCompileBackendError",
    "UnsupportedOperationError",
    "NotHostDeviceError",
    "HostRegistrationError",
]
