"""GPU compiler flags (anyaccel/op_builder/toolchains/cuda_flags.py): ``-gencode`` per arch, ROCm arch flags
and the toolkit flavour of a torch build. Pure functions: no GPU, no compiler run."""

from __future__ import annotations

import pytest

from anyaccel.op_builder.toolchains import cuda_flags


@pytest.mark.parametrize(
    "arch_list,expected",
    [
        (["9.0"], ["-gencode=arch=compute_90,code=sm_90"]),
        (["9.0a"], ["-gencode=arch=compute_90a,code=sm_90a"]),
        (["8.0", "9.0+PTX"], ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
                              "-gencode=arch=compute_90,code=compute_90"]),
        (["10.0f"], ["-gencode=arch=compute_100f,code=sm_100f"]),
        (["9.0", "9.0"], ["-gencode=arch=compute_90,code=sm_90"]),
    ],
)
def test_gencode_flags(arch_list, expected):
    assert cuda_flags.gencode_flags(arch_list) == expected


@pytest.mark.parametrize("bad", [["sm_90"], ["9"], ["9.0b"], []])
def test_gencode_rejects_bad_entries(bad):
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST"):
        cuda_flags.gencode_flags(bad)


def test_rocm_arch_flags_and_validation():
    assert cuda_flags.rocm_arch_flags(["gfx90a", "gfx942", "gfx90a"]) == ["--offload-arch=gfx90a",
                                                                          "--offload-arch=gfx942"]
    with pytest.raises(ValueError, match="PYTORCH_ROCM_ARCH"):
        cuda_flags.rocm_arch_flags(["9.0"])


@pytest.mark.parametrize(
    "hip,cuda,expected",
    [("6.2.41133", None, "rocm"), (None, "13.0", "cuda"), (None, None, None), ("6.2", "12.4", "rocm")],
)
def test_hipify_decision(hip, cuda, expected):
    tk = cuda_flags.toolkit_for(hip, cuda)
    assert (tk.name if tk else None) == expected
    if tk is not None:
        assert tk.hipify == (expected == "rocm")


def test_toolkit_tables_and_arch_flags():
    cuda, rocm = cuda_flags.TOOLKITS["cuda"], cuda_flags.TOOLKITS["rocm"]
    assert (cuda.compiler, cuda.arch_env, cuda.hipify) == ("nvcc", "TORCH_CUDA_ARCH_LIST", False)
    assert (rocm.compiler, rocm.arch_env, rocm.hipify) == ("hipcc", "PYTORCH_ROCM_ARCH", True)
    assert not any(f.startswith("-std=") for tk in (cuda, rocm) for f in tk.base_flags)
    assert cuda_flags.arch_flags(cuda, ["9.0"]) == ["-gencode=arch=compute_90,code=sm_90"]
    assert cuda_flags.arch_flags(rocm, ["gfx942"]) == ["--offload-arch=gfx942"]
