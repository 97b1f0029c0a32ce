"""The CUDA toolkit policy (anyaccel/op_builder/toolchains/cuda.py): finding nvcc, reading its version, the
toolkit/torch major-version rule and the arch list. Pure functions, no GPU."""

from __future__ import annotations

import os

import pytest
from opb_helpers import make_wrapper

from anyaccel.op_builder.errors import ToolchainError
from anyaccel.op_builder.toolchains import cuda as ct


def test_nvcc_version_parse():
    text = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"
    assert ct.parse_nvcc_version(text) == (13, 0)
    with pytest.raises(ValueError):
        ct.parse_nvcc_version("garbage")


def test_cuda_policy():
    ct.check_cuda_versions("12.8", "12.4", env={})  # minor mismatch: logged only
    with pytest.raises(ToolchainError) as err:
        ct.check_cuda_versions("13.0", "12.8", env={})
    assert err.value.code == "cuda_mismatch"
    assert "13.0" in str(err.value) and "12.8" in str(err.value) and ct.SKIP_CHECK_ENV in str(err.value)
    ct.check_cuda_versions("13.0", "12.8", env={ct.SKIP_CHECK_ENV: "1"})
    with pytest.raises(ToolchainError):
        ct.check_cuda_versions("13.0", None, env={})


def test_arch_list():
    before = dict(os.environ)
    assert ct.cuda_arch_list([(9, 0), (8, 0), (9, 0)], env={}) == ["8.0", "9.0+PTX"]
    assert ct.cuda_arch_list([(9, 0)], env={"TORCH_CUDA_ARCH_LIST": "9.0a;8.0 10.0+PTX"}) == ["8.0", "9.0a", "10.0+PTX"]
    with pytest.raises(ValueError, match="0a"):
        ct.cuda_arch_list([], env={"TORCH_CUDA_ARCH_LIST": "0a"})
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST"):
        ct.cuda_arch_list([], env={})
    assert dict(os.environ) == before


def test_cuda_home_and_nvcc(tmp_path):
    (tmp_path / "bin").mkdir()
    nvcc = make_wrapper(tmp_path / "bin", "echo 'release 12.8'\n", name="nvcc")
    assert ct.find_cuda_home({"CUDA_HOME": str(tmp_path)}) == tmp_path
    assert ct.find_nvcc({"CUDA_HOME": str(tmp_path)}) == nvcc
    assert ct.find_cuda_home({"CUDA_HOME": str(tmp_path / "missing")}) is None


@pytest.mark.parametrize("text,expected", [
    ("#define CUDART_VERSION 13000\n", (13, 0)),
    ("/* x */\n#define  CUDART_VERSION   12080 // 12.8\n", (12, 8)),
    ("#define OTHER 1\n", None),
])
def test_header_cuda_version_reads_the_toolkit_without_running_it(tmp_path, text, expected):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda_runtime_api.h").write_text(text)
    assert ct.header_cuda_version(tmp_path) == expected
    assert ct.header_cuda_version(tmp_path / "missing") is None
