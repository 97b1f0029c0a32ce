"""The CUDA optimizer sources hipified and compiled by the real hipcc for AMD GPUs, to object code, with no device.

The build goes through the CUDA builder's ROCm branch, as a ROCm torch user's build would: the builder is given
the ROCm toolkit record (this torch is a CPU build, so "torch is a ROCm build" is stated as data, not patched),
its preflight finds and probes hipcc, and its compile steps (torch's hipify into the build directory, hipcc with
torch's ROCm extension flags, ``--offload-arch`` per ``PYTORCH_ROCM_ARCH`` entry, the stable-ABI target) are run
one by one, each exactly as ninja would run it. Each object must hold a device code object for every arch: the
clang offload bundle names its targets (``hipv4-amdgcn-amd-amdhsa--gfx90a``).

The archs are gfx90a (MI200) and gfx942 (MI300) where the toolchain knows it: Debian 12's ROCm 5.2 (clang 15)
rejects gfx942 as an invalid target ID, which `test_the_archs_are_what_this_hipcc_knows` checks from hipcc's own
answer, so gfx942 joins the list by itself on a newer ROCm.

One difference from a ROCm install, stated in `ROCM`: Debian has no rocThrust, and torch's headers include
``<thrust/complex.h>`` whenever ``__HIPCC__`` is defined (torch/headeronly/util/complex.h). NVIDIA's Thrust headers
(Debian's libthrust-dev) stand in, with their host-only (CPP) device system so that they ask for no CUDA header;
the op sources use no Thrust.

`test_the_same_sources_still_compile_for_cuda` compiles the same sources with the real nvcc through the CUDA
branch, so a fix for ROCm that breaks CUDA fails here too.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from anyaccel.op_builder.backends.cuda import CUDAOpBuilder
from anyaccel.op_builder.classes import builder_class
from anyaccel.op_builder.toolchains import cuda_flags
from anyaccel.op_builder.toolchains import ninja as nj

INSTALL = "bash scripts/install_toolchains.sh"
THRUST_COMPLEX = Path("/usr/include/thrust/complex.h")
WANTED_ARCHS = ("gfx90a", "gfx942")
OPS = (("adam", "fused_adam"), ("lion", "fused_lion"), ("lamb", "fused_lamb"))

#: The ROCm toolkit record, plus the Thrust stand-in of the module docstring.
ROCM = dataclasses.replace(
    cuda_flags.TOOLKITS["rocm"],
    base_flags=(*cuda_flags.TOOLKITS["rocm"].base_flags, "-DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP"))

hip = pytest.mark.skipif(
    not (shutil.which("hipcc") and THRUST_COMPLEX.is_file()),
    reason=f"needs hipcc, the HIP headers and Debian's Thrust headers (install them with: {INSTALL})")


def _compile_objects(builder: CUDAOpBuilder, build_dir: Path) -> list[Path]:
    """Run the builder's preflight and compile steps (no link); return the objects."""
    env = builder.preflight()
    gen_dir = build_dir / "gen"
    gen_dir.mkdir(parents=True)
    builder.write_generated_headers(gen_dir)
    steps = builder.compile_steps(env, "anyaccel_compile_test", gen_dir, build_dir)
    run_env = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    for step in steps:
        command = [*step.command, "-c", str(step.source), "-o", str(step.obj)]
        done = subprocess.run(command, env=run_env, capture_output=True, text=True, timeout=nj.build_timeout_s(),
                              check=False)
        assert done.returncode == 0, f"{' '.join(command)}\n{done.stderr[-6000:]}"
    return [step.obj for step in steps]


def _known(arch: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "probe.hip"
    source.write_text("#include <hip/hip_runtime.h>\n__global__ void probe(float* p) { p[0] = 1.f; }\n")
    return subprocess.run(["hipcc", f"--offload-arch={arch}", "-fno-gpu-rdc", "-c", str(source), "-o",
                           str(tmp_path / f"probe_{arch}.o")], env={**os.environ, **dict(ROCM.toolchain.compiler_env)},
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def archs(tmp_path_factory) -> tuple[str, ...]:
    """The wanted archs this hipcc compiles for."""
    tmp = tmp_path_factory.mktemp("hip-archs")
    return tuple(a for a in WANTED_ARCHS if _known(a, tmp).returncode == 0)


@pytest.mark.rocm_toolchain
@hip
def test_the_archs_are_what_this_hipcc_knows(archs, tmp_path):
    """gfx90a is always compiled; an arch left out is one hipcc itself rejects as an unknown target."""
    assert "gfx90a" in archs
    for arch in set(WANTED_ARCHS) - set(archs):
        answer = _known(arch, tmp_path)
        assert answer.returncode != 0 and f"invalid target ID '{arch}'" in answer.stderr, answer.stderr


@pytest.mark.rocm_toolchain
@pytest.mark.slow
@hip
@pytest.mark.parametrize(("family", "build"), OPS, ids=[b for _, b in OPS])
def test_the_cuda_sources_compile_for_amd_gpus(family, build, archs, tmp_path, monkeypatch):
    monkeypatch.setenv(ROCM.arch_env, ";".join(archs))
    builder = builder_class(family, build)(toolkit=ROCM)
    objects = _compile_objects(builder, tmp_path)
    assert (tmp_path / "hip" / "csrc" / "includes" / "hip" / "multi_tensor_apply.cuh").is_file()  # hipified
    for obj in objects:
        data = obj.read_bytes()
        assert data[:4] == b"\x7fELF"
        for arch in archs:
            assert f"amdgcn-amd-amdhsa--{arch}".encode() in data, f"{obj.name} has no {arch} code object"
        # the stream is looked up in ROCm torch's GPU library (a ROCm torch has no libtorch_cuda.so)
        assert b"libtorch_hip.so" in data and b"libtorch_cuda.so" not in data


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None,
                    reason="needs nvcc (the CUDA toolkit: https://developer.nvidia.com/cuda-downloads)")
@pytest.mark.parametrize(("family", "build"), OPS, ids=[b for _, b in OPS])
def test_the_same_sources_still_compile_for_cuda(family, build, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    monkeypatch.delenv("ROCM_HOME", raising=False)
    builder = builder_class(family, build)(toolkit=cuda_flags.TOOLKITS["cuda"])
    for obj in _compile_objects(builder, tmp_path):
        data = obj.read_bytes()
        assert data[:4] == b"\x7fELF" and b"libtorch_cuda.so" in data and b"libtorch_hip.so" not in data
