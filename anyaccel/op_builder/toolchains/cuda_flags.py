"""The GPU toolkits of the CUDA op-builder backend, as data: each holds its toolchain record, plus its flags.

A [`GPUToolkit`][anyaccel.op_builder.toolchains.cuda_flags.GPUToolkit] holds the toolchain record of its device
compiler (nvcc or hipcc, `anyaccel.op_builder.toolchains.records`: how it is found and probed, its arch flags,
its source suffixes) and adds what the backend does around it (hipify, the base flags, the runtime library).
The arch-flag functions below are the records' ``arch_flags``. Pure functions and data tables, no device access
and no process: ``CUDAOpBuilder`` (`anyaccel.op_builder.backends.cuda`) calls them, and CI tests them without a
GPU.

Sources: nvcc's ``-gencode`` forms are from the CUDA Compiler Driver NVCC manual ("Options for Steering GPU
Code Generation"); the ``a`` (arch-specific, e.g. ``sm_90a`` for wgmma) and ``f`` (family-specific, CUDA
12.9+) suffixes are from the same manual; torch's own arch-list parsing is
``torch.utils.cpp_extension._get_cuda_arch_flags``, which we bypass by passing explicit ``-gencode`` flags
(torch adds none when any flag names an arch), so the list we hash into the cache key is exactly the list
compiled. ROCm: ``--offload-arch=gfxNNN`` per entry of ``PYTORCH_ROCM_ARCH`` (torch's ROCm build docs).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from anyaccel.op_builder.toolchains.records import TOOLCHAINS, Toolchain, flags_for

_ARCH = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")
_GFX = re.compile(r"^gfx[0-9a-f]+(:[a-z+-:]+)?$")


@dataclass(frozen=True)
class GPUToolkit:
    """How one GPU toolkit flavour builds torch extensions: its device compiler's toolchain record and what the
    backend adds to it.

    Attributes:
        name: ``"cuda"`` or ``"rocm"``.
        toolchain: the device compiler's record (``nvcc`` / ``hipcc``): its look-up, probe, version, the
            variables it runs with, its arch flags and source suffixes.
        arch_env: the variable that lists target architectures.
        hipify: whether CUDA sources must be translated to HIP first (torch.utils.hipify, which
            ``torch.utils.cpp_extension`` runs itself for ROCm builds of torch).
        base_flags: device-compiler flags every op gets. No ``-std=``: torch.utils.cpp_extension passes the
            standard torch's headers require (C++20 for torch 2.13), and forcing an older one breaks them.
        compiler_var: the build-environment variable naming the device compiler (``NVCC`` / ``HIPCC``).
        home_var: the variable naming the toolkit root in the build's environment (``CUDA_HOME`` / ``ROCM_HOME``).
        host_compiler_flag: the flag naming the host compiler (nvcc's ``-ccbin``), or None when the device
            compiler is itself the host compiler (hipcc is clang).
        host_flag_prefix: the flag that forwards one host-compiler flag (nvcc's ``-Xcompiler``), or None when
            host flags are passed as they are.
        runtime_library: the GPU runtime linked into the op (``-l<name>``).
    """

    name: str
    toolchain: Toolchain
    arch_env: str
    hipify: bool
    base_flags: tuple[str, ...]
    compiler_var: str = "NVCC"
    home_var: str = "CUDA_HOME"
    host_compiler_flag: str | None = "-ccbin"
    host_flag_prefix: str | None = "-Xcompiler"
    runtime_library: str = "cudart"

    @property
    def compiler(self) -> str:
        """The device compiler's name, its record's (``nvcc`` / ``hipcc``)."""
        return self.toolchain.name


#: The toolkit flavours, keyed by name. Backend differences as data.
TOOLKITS: dict[str, GPUToolkit] = {
    "cuda": GPUToolkit(
        name="cuda",
        toolchain=TOOLCHAINS["nvcc"],
        arch_env="TORCH_CUDA_ARCH_LIST",
        hipify=False,
        base_flags=("-O3", "--expt-relaxed-constexpr", "-lineinfo"),
    ),
    # torch.utils.cpp_extension's flags for a ROCm CUDAExtension: COMMON_HIP_FLAGS (the HIP platform, USE_ROCM, the
    # hipBLAS v2 API) and COMMON_HIPCC_FLAGS (fp16 without HIP's implicit half operators and conversions, the
    # *_sync warp builtins of ROCm 6.2+), and -fno-gpu-rdc (whole-program device code: no device link step), which
    # it adds unless the user asks for -fgpu-rdc. HIP_PLATFORM=amd is the hipcc record's compiler_env.
    "rocm": GPUToolkit(
        name="rocm",
        toolchain=TOOLCHAINS["hipcc"],
        arch_env="PYTORCH_ROCM_ARCH",
        hipify=True,
        base_flags=("-O3", "-fno-gpu-rdc", "-D__HIP_PLATFORM_AMD__=1", "-DUSE_ROCM=1", "-DHIPBLAS_V2",
                    "-DCUDA_HAS_FP16=1", "-D__HIP_NO_HALF_OPERATORS__=1", "-D__HIP_NO_HALF_CONVERSIONS__=1",
                    "-DHIP_ENABLE_WARP_SYNC_BUILTINS=1"),
        compiler_var="HIPCC",
        home_var="ROCM_HOME",
        host_compiler_flag=None,
        host_flag_prefix=None,
        runtime_library="amdhip64",
    ),
}


def toolkit_for(hip_version: str | None, cuda_version: str | None) -> GPUToolkit | None:
    """The toolkit flavour of a torch build.

    Args:
        hip_version: ``torch.version.hip`` (None unless torch is a ROCm build).
        cuda_version: ``torch.version.cuda`` (None unless torch is a CUDA build).

    Returns:
        ``TOOLKITS["rocm"]`` for a ROCm torch, ``TOOLKITS["cuda"]`` for a CUDA torch, None for a CPU-only
        torch (no GPU op can be built).
    """
    if hip_version:
        return TOOLKITS["rocm"]
    if cuda_version:
        return TOOLKITS["cuda"]
    return None


def gencode_flags(arch_list: Sequence[str]) -> list[str]:
    """nvcc ``-gencode`` flags for a parsed ``TORCH_CUDA_ARCH_LIST``.

    Args:
        arch_list: entries ``major.minor[a|f][+PTX]``, e.g. ``["8.0", "9.0a", "9.0+PTX"]``.

    Returns:
        One ``-gencode=arch=compute_XY[s],code=sm_XY[s]`` per entry (machine code), plus
        ``-gencode=arch=compute_XY[s],code=compute_XY[s]`` (PTX, JIT-compiled by the driver on newer GPUs)
        for ``+PTX`` entries; de-duplicated, in input order. "9.0" gives ``sm_90``, "9.0a" ``sm_90a``.

    Raises:
        ValueError: an entry is malformed (the message names it and the accepted form), or the list is
            empty.
    """
    if not arch_list:
        raise ValueError("empty GPU arch list; set TORCH_CUDA_ARCH_LIST (e.g. '9.0') or make a GPU visible")
    flags: list[str] = []
    for entry in arch_list:
        m = _ARCH.match(entry.strip())
        if not m:
            raise ValueError(
                f"GPU arch {entry!r} is not of the form major.minor[a|f][+PTX] (e.g. '9.0', '9.0a', '8.6+PTX'); "
                "fix TORCH_CUDA_ARCH_LIST"
            )
        num = f"{m.group(1)}{m.group(2)}{m.group(3)}"
        wanted = [f"-gencode=arch=compute_{num},code=sm_{num}"]
        if m.group(4):
            wanted.append(f"-gencode=arch=compute_{num},code=compute_{num}")
        flags.extend(f for f in wanted if f not in flags)
    return flags


def rocm_arch_flags(arch_list: Sequence[str]) -> list[str]:
    """hipcc ``--offload-arch`` flags for a ``PYTORCH_ROCM_ARCH`` list (``["gfx90a", "gfx942"]``).

    Raises:
        ValueError: an entry is not a ``gfx`` target name, or the list is empty.
    """
    if not arch_list:
        raise ValueError("empty ROCm arch list; set PYTORCH_ROCM_ARCH (e.g. 'gfx90a;gfx942')")
    for entry in arch_list:
        if not _GFX.match(entry):
            raise ValueError(f"ROCm arch {entry!r} is not a gfx target name (e.g. 'gfx90a'); fix PYTORCH_ROCM_ARCH")
    return [f"--offload-arch={a}" for a in dict.fromkeys(arch_list)]


def arch_flags(toolkit: GPUToolkit, arch_list: Sequence[str]) -> list[str]:
    """The arch flags of ``toolkit`` for ``arch_list``: its record's ``arch_flags`` (`gencode_flags` for nvcc,
    `rocm_arch_flags` for hipcc).

    Raises:
        ValueError: a malformed entry or an empty list (the message names the variable to fix).
    """
    return flags_for(toolkit.toolchain, arch_list)
