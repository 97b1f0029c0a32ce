"""Toolchain discovery, job sizing, environment scoping and the CUDA toolkit policy (pure functions)."""

from __future__ import annotations

import os

import pytest

from anyaccel.op_builder.toolchains import cuda as ct
from anyaccel.op_builder.core.environ import scoped_environ
from anyaccel.op_builder.core.errors import ToolchainError
from anyaccel.op_builder.toolchains.host import build_jobs, find_cxx, find_ninja, require_cxx
from opb_helpers import make_wrapper


def test_cxx_from_env_then_candidates(tmp_path):
    wrapper = make_wrapper(tmp_path, "exit 0\n", name="my-cxx")
    assert find_cxx({"CXX": str(wrapper), "PATH": ""}) == wrapper
    assert find_cxx({"CXX": "my-cxx -O2", "PATH": str(tmp_path)}) == wrapper
    make_wrapper(tmp_path, "exit 0\n", name="g++")
    assert find_cxx({"PATH": str(tmp_path)}) == tmp_path / "g++"
    assert find_cxx({"PATH": str(tmp_path / "empty")}) is None
    with pytest.raises(ToolchainError) as err:
        require_cxx({"PATH": str(tmp_path / "empty")})
    assert err.value.code == "compiler_missing"
    with pytest.raises(ToolchainError, match="no-such-compiler") as err:
        find_cxx({"CXX": "no-such-compiler", "PATH": str(tmp_path)})
    assert err.value.code == "compiler_missing"


def test_ninja_found_without_path():
    ninja = find_ninja({"PATH": ""})
    assert ninja is not None and os.access(ninja, os.X_OK)


def test_build_jobs_bounded_and_max_jobs_wins():
    gib = 2**30
    assert build_jobs({}, cpu_count=16, mem_available=64 * gib) == 16
    assert build_jobs({}, cpu_count=16, mem_available=3 * gib) == 2
    assert build_jobs({}, cpu_count=16, mem_available=gib // 10) == 1
    assert build_jobs({"MAX_JOBS": "5"}, cpu_count=2, mem_available=gib) == 5
    with pytest.raises(ValueError, match="MAX_JOBS"):
        build_jobs({"MAX_JOBS": "lots"})


def test_scoped_environ_restores_exactly(monkeypatch):
    monkeypatch.setenv("ANYACCEL_T_KEEP", "old")
    monkeypatch.delenv("ANYACCEL_T_NEW", raising=False)
    before = dict(os.environ)
    with pytest.raises(RuntimeError):
        with scoped_environ({"ANYACCEL_T_KEEP": "new", "ANYACCEL_T_NEW": "x", "HOME": None}):
            assert os.environ["ANYACCEL_T_KEEP"] == "new" and "HOME" not in os.environ
            raise RuntimeError("build failed")
    assert dict(os.environ) == before


def test_nvcc_version_parse():
    text = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"
    assert ct.parse_nvcc_version(text) == (13, 0)
    with pytest.raises(ValueError):
        ct.parse_nvcc_version("garbage")


def test_cuda_policy(caplog):
    ct.check_cuda_versions("12.8", "12.4", env={})  # minor mismatch: logged only
    with pytest.raises(ToolchainError) as err:
        ct.check_cuda_versions("13.0", "12.8", env={})
    assert err.value.code == "cuda_mismatch"
    assert "13.0" in str(err.value) and "12.8" in str(err.value) and ct.SKIP_CHECK_ENV in str(err.value)
    ct.check_cuda_versions("13.0", "12.8", env={ct.SKIP_CHECK_ENV: "1"})
    with pytest.raises(ToolchainError):
        ct.check_cuda_versions("13.0", None, env={})


def test_arch_list(monkeypatch):
    before = dict(os.environ)
    assert ct.cuda_arch_list([(9, 0), (8, 0), (9, 0)], env={}) == ["8.0", "9.0+PTX"]
    assert ct.cuda_arch_list([(9, 0)], env={"TORCH_CUDA_ARCH_LIST": "9.0a;8.0 10.0+PTX"}) == ["8.0", "9.0a", "10.0+PTX"]
    with pytest.raises(ValueError, match="0a"):
        ct.cuda_arch_list([], env={"TORCH_CUDA_ARCH_LIST": "0a"})
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST"):
        ct.cuda_arch_list([], env={})
    assert dict(os.environ) == before


def test_cuda_home(tmp_path):
    (tmp_path / "bin").mkdir()
    nvcc = make_wrapper(tmp_path / "bin", "echo 'release 12.8'\n", name="nvcc")
    assert ct.find_cuda_home({"CUDA_HOME": str(tmp_path)}) == tmp_path
    assert ct.find_nvcc({"CUDA_HOME": str(tmp_path)}) == nvcc
    assert ct.find_cuda_home({"CUDA_HOME": str(tmp_path / "missing")}) is None
