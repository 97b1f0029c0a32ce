"""The CUDA accelerator, also serving AMD GPUs through torch's ROCm (HIP) build.

Differences from the torch-device defaults (DeepSpeed's ``cuda_accelerator.py`` is the behavioural
reference): NCCL (RCCL on ROCm, under the same name) and its version, CUDA graphs, NVTX ranges through
``torch.cuda.nvtx`` (in NVTX domains through the ``nvtx`` package when installed), host-memory registration
through ``torch.cuda.cudart()``,
``HIP_VISIBLE_DEVICES`` beside ``CUDA_VISIBLE_DEVICES`` on ROCm, float16 from compute capability 7.0
(6.x with ``DS_ALLOW_DEPRECATED_FP16=1``, as DeepSpeed), Triton from compute capability 8.0.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import ClassVar

import torch
from typing_extensions import override

from anyaccel.accelerator.registry import ProbeResult
from anyaccel.accelerator.torch_device import TorchDeviceAccelerator, package_installed

__all__ = ["CUDA_Accelerator"]


def _visible_env_description(names: Sequence[str]) -> str:
    """``"CUDA_VISIBLE_DEVICES='0,1'"`` for each set variable, or ``"no visible-devices variable set"``."""
    shown = [f"{name}={os.environ[name]!r}" for name in names if name in os.environ]
    return ", ".join(shown) if shown else "no visible-devices variable set"


class CUDA_Accelerator(TorchDeviceAccelerator):  # noqa: N801 (DeepSpeed's class name)
    """NVIDIA (CUDA) and AMD (ROCm) GPUs through ``torch.cuda``."""

    _name = "cuda"
    _legacy_tensor_module = "torch.cuda"
    accelerator_priority = 400
    _communication_backend = "nccl"
    _graph_class_name = "CUDAGraph"
    _communication_library = "nccl"
    _host_register = ("cudart", "cudaHostRegister", "cudaHostUnregister", 0)
    supports_nvtx_domain = True
    _export_envs: Sequence[str] = ("NCCL",)
    _visible_devices_envs: Sequence[str] = ("CUDA_VISIBLE_DEVICES",)
    #: ROCm builds honour both variables; launchers set both.
    _rocm_visible_devices_envs: ClassVar[Sequence[str]] = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
    #: smallest compute capability (major) with supported float16 training, and with Triton support.
    _fp16_min_major: ClassVar[int] = 7
    _fp16_deprecated_major: ClassVar[int] = 6
    _triton_min_major: ClassVar[int] = 8
    #: DeepSpeed prefers Triton grouped GEMM below this major (Hopper has faster vendor kernels).
    _triton_grouped_mm_below_major: ClassVar[int] = 9

    @staticmethod
    def is_rocm() -> bool:
        """True on a ROCm (HIP) build of torch."""
        return getattr(torch.version, "hip", None) is not None

    def _capability(self) -> tuple[int, int]:
        """Compute capability of the current device; initialises CUDA."""
        major, minor = torch.cuda.get_device_capability()
        return int(major), int(minor)

    @override
    def visible_devices_envs(self) -> list[str]:
        """``["CUDA_VISIBLE_DEVICES"]``, plus ``"HIP_VISIBLE_DEVICES"`` on ROCm."""
        return list(self._rocm_visible_devices_envs if self.is_rocm() else self._visible_devices_envs)

    @override
    def is_fp16_supported(self) -> bool:
        """True on ROCm, or from compute capability 7.0 (6.x with ``DS_ALLOW_DEPRECATED_FP16=1``).

        Side effects: initialises CUDA; reads ``DS_ALLOW_DEPRECATED_FP16``.
        """
        if self.is_rocm():
            return True
        major, _ = self._capability()
        allow_old = os.environ.get("DS_ALLOW_DEPRECATED_FP16", "0") == "1"
        return major >= self._fp16_min_major or (allow_old and major >= self._fp16_deprecated_major)

    @override
    def is_triton_supported(self) -> bool:
        """True when the ``triton`` package is installed and the GPU is ROCm or compute capability >= 8.0."""
        if not package_installed("triton") or not self.is_available():
            return False
        return self.is_rocm() or self._capability()[0] >= self._triton_min_major

    @override
    def prefer_triton_grouped_mm(self) -> bool:
        """True when Triton works and the GPU predates Hopper (DeepSpeed's rule); False on ROCm."""
        if self.is_rocm() or not self.is_triton_supported():
            return False
        return self._capability()[0] < self._triton_grouped_mm_below_major

    @classmethod
    @override
    def probe(cls) -> ProbeResult:
        """Available when torch is a CUDA/ROCm build and sees at least one device.

        Side effects: ``torch.cuda.device_count()`` queries the driver (NVML or ``cudaGetDeviceCount``)
        without creating a CUDA context; visible-devices variables are read now, not at import.
        """
        cuda, hip = torch.version.cuda, getattr(torch.version, "hip", None)
        if cuda is None and hip is None:
            return ProbeResult(False, f"this torch build ({torch.__version__}) has no CUDA or ROCm support")
        stack = f"ROCm {hip}" if hip else f"CUDA {cuda}"
        count = torch.cuda.device_count()
        names = cls._rocm_visible_devices_envs if hip else cls._visible_devices_envs
        if count == 0:
            return ProbeResult(
                False,
                f"torch {torch.__version__} is built for {stack} but sees no GPU "
                f"({_visible_env_description(names)}; check the driver with nvidia-smi/rocm-smi)",
                stack_present=True,
            )
        return ProbeResult(True, f"{count} {stack} device(s) visible ({_visible_env_description(names)})", True)
