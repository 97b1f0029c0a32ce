"""The toolchain records (anyaccel/op_builder/toolchains/records.py): found by file-system look-ups only,
accepted only when the compiler runs and its banner is the record's, chosen per backend, and why not said.

The compilers are stand-ins written into a temporary directory (and the fake icpx of
fixtures/fake_toolchains): shell scripts that print a real compiler's banner."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from opb_helpers import HERE

from anyaccel.op_builder.backends.cpu import TorchCPUOpBuilder
from anyaccel.op_builder.backends.cuda import CUDAOpBuilder
from anyaccel.op_builder.classes import builder_class
from anyaccel.op_builder.errors import ToolchainError
from anyaccel.op_builder.toolchains import cuda_flags, sycl
from anyaccel.op_builder.toolchains import records as rc
from anyaccel.op_builder.toolchains.cpu_isa import ISA_LEVELS

FAKE_ICPX_DIR = HERE / "fixtures" / "fake_toolchains" / "oneapi" / "compiler" / "latest" / "bin"
NOT_SYCL_DIR = HERE / "fixtures" / "fake_toolchains" / "not_sycl"

#: What ``acpp --acpp-version`` and ``hipcc --version`` print first (AdaptiveCpp 24.10, Debian's ROCm 5.2 hipcc).
ACPP_BANNER = ("acpp [AdaptiveCpp compilation driver], Copyright (C) 2018-2024 Aksel Alpay and the AdaptiveCpp "
               "project\\n  AdaptiveCpp version: 24.10.0+git.7677cf6e.20241220.branch.develop")
HIPCC_BANNER = "HIP version: 5.2.21153-0\\nclang version 15.0.0 (Debian)"


def fake_compiler(where: Path, name: str, flag: str, banner: str) -> Path:
    """A script ``where/name`` that prints ``banner`` for ``flag`` and fails for anything else."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / name
    path.write_text(f'#!/bin/sh\nif [ "$1" = "{flag}" ]; then printf "{banner}\\n"; exit 0; fi\nexit 1\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An environment whose PATH holds no compiler and sets no record variable; the records' default
    directories (``/opt/rocm/bin``...) are dropped, so what this machine has installed is not seen."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for name, record in rc.TOOLCHAINS.items():
        monkeypatch.setitem(rc.TOOLCHAINS, name, replace(record, default_dirs=()))
    return {"PATH": str(empty)}


def test_every_backend_chooses_among_existing_records() -> None:
    for backend, names in rc.BACKEND_TOOLCHAINS.items():
        assert names and all(n in rc.TOOLCHAINS for n in names), backend
    for name, record in rc.TOOLCHAINS.items():
        assert record.name == name and record.source_suffixes and record.banner and record.install
    assert {"host", "nvcc", "hipcc", "icpx", "acpp"} == set(rc.TOOLCHAINS)


def test_locate_starts_no_process(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    fake_compiler(bin_dir, "acpp", "--acpp-version", ACPP_BANNER)
    fake_compiler(bin_dir, "hipcc", "--version", HIPCC_BANNER)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"

    def no_process(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"locate started a process: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    assert rc.locate(rc.TOOLCHAINS["acpp"], env) == bin_dir / "acpp"
    assert rc.locate(rc.TOOLCHAINS["hipcc"], env) == bin_dir / "hipcc"
    assert rc.locate(rc.TOOLCHAINS["icpx"], env) is None


def test_prefix_variables_and_default_dirs_are_searched(env: dict[str, str], tmp_path: Path) -> None:
    fake_compiler(tmp_path / "rocm" / "bin", "hipcc", "--version", HIPCC_BANNER)
    assert rc.locate(rc.TOOLCHAINS["hipcc"], {**env, "ROCM_PATH": str(tmp_path / "rocm")}) == \
        tmp_path / "rocm" / "bin" / "hipcc"
    assert rc.locate(rc.TOOLCHAINS["icpx"], {**env, "ONEAPI_ROOT": str(FAKE_ICPX_DIR.parents[2])}) == \
        FAKE_ICPX_DIR / "icpx"  # the same place the SYCL builder's finder looks


def test_probe_reads_the_version_from_the_banner(env: dict[str, str], tmp_path: Path) -> None:
    acpp = fake_compiler(tmp_path / "bin", "acpp", "--acpp-version", ACPP_BANNER)
    found = rc.probe(rc.TOOLCHAINS["acpp"], acpp)
    assert found.ok and found.version.startswith("24.10.0") and found.path == acpp
    hipcc = fake_compiler(tmp_path / "bin", "hipcc", "--version", HIPCC_BANNER)
    assert rc.probe(rc.TOOLCHAINS["hipcc"], hipcc).version == "5.2.21153-0"
    icpx = rc.probe(rc.TOOLCHAINS["icpx"], FAKE_ICPX_DIR / "icpx")
    assert icpx.ok and icpx.version == "2025.0.4"


def test_a_compiler_of_another_family_is_refused_with_what_it_printed(tmp_path: Path) -> None:
    found = rc.probe(rc.TOOLCHAINS["icpx"], NOT_SYCL_DIR / "icpx")  # runs, but its banner is g++'s
    assert not found.ok and "is not SYCL (Intel oneAPI DPC++ icpx)" in found.why_not and found.banner in found.why_not
    acpp_as_icpx = rc.probe(rc.TOOLCHAINS["acpp"], FAKE_ICPX_DIR / "icpx")  # icpx fails --acpp-version
    assert not acpp_as_icpx.ok and "exited with status 1" in acpp_as_icpx.why_not


def test_survey_says_where_it_looked_and_how_to_install(env: dict[str, str]) -> None:
    by_name = {f.toolchain: f for f in rc.survey(env, ("hipcc", "acpp", "icpx"))}
    assert [f.ok for f in by_name.values()] == [False, False, False]
    assert "no hipcc on PATH" in by_name["hipcc"].why_not and "apt-get install hipcc" in by_name["hipcc"].why_not
    assert "ANYACCEL_SYCL_CXX unset" in by_name["acpp"].why_not and "AdaptiveCpp" in by_name["acpp"].why_not
    assert by_name["icpx"].path is None and "ONEAPI_ROOT unset" in by_name["icpx"].why_not


def test_a_variable_naming_nothing_is_reported_not_replaced(env: dict[str, str], tmp_path: Path) -> None:
    fake_compiler(tmp_path / "bin", "acpp", "--acpp-version", ACPP_BANNER)
    env = {**env, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}", "ANYACCEL_SYCL_CXX": "/no/such/acpp"}
    with pytest.raises(ToolchainError):
        rc.locate(rc.TOOLCHAINS["acpp"], env)
    (found,) = rc.survey(env, ("acpp",))
    assert not found.ok and "/no/such/acpp" in found.why_not


def test_choose_takes_the_first_usable_record_of_the_backend(env: dict[str, str], tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_compiler(bin_dir, "acpp", "--acpp-version", ACPP_BANNER)
    env = {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}
    assert rc.choose("xpu", env) == rc.probe(rc.TOOLCHAINS["acpp"], bin_dir / "acpp")  # no icpx: acpp
    shutil.copy(FAKE_ICPX_DIR / "icpx", bin_dir / "icpx")
    chosen = rc.choose("xpu", env)
    assert chosen is not None and chosen.toolchain == "icpx"  # icpx first where installed
    assert rc.choose("cpu", env) is None  # no host compiler on this PATH, CXX unset
    with pytest.raises(ValueError, match="'npu' has no toolchain records; accepted: \\['cpu', 'cuda', 'xpu'\\]"):
        rc.choose("npu", env)


def test_each_backend_holds_the_records_it_chooses_among() -> None:
    """The backends' toolkits hold the very records the report surveys, in BACKEND_TOOLCHAINS' order."""
    held = {"cpu": (TorchCPUOpBuilder.TOOLCHAIN,),
            "cuda": tuple(tk.toolchain for tk in cuda_flags.TOOLKITS.values()),
            "xpu": tuple(tk.toolchain for tk in sycl.TOOLKITS.values())}
    assert {backend: tuple(t.name for t in records) for backend, records in held.items()} == rc.BACKEND_TOOLCHAINS
    assert all(t is rc.TOOLCHAINS[t.name] for records in held.values() for t in records)
    assert CUDAOpBuilder.SOURCE_TOOLCHAIN is rc.TOOLCHAINS["nvcc"]
    for toolkit in sycl.TOOLKITS.values():
        assert toolkit.host_device_target in toolkit.toolchain.target_flags
        assert toolkit.toolchain.suffix_flags[".sycl"] == ("-x", "c++")  # torch's routing suffix is C++ to them


def test_flags_per_target_come_from_the_records() -> None:
    for level in ISA_LEVELS.values():  # the CPU SIMD levels are the host record's targets
        assert rc.flags_for(rc.TOOLCHAINS["host"], [level.name]) == level.compile_args()
    assert rc.flags_for(rc.TOOLCHAINS["nvcc"], ["8.0", "9.0+PTX"]) == cuda_flags.gencode_flags(["8.0", "9.0+PTX"])
    assert rc.flags_for(rc.TOOLCHAINS["hipcc"], ["gfx90a"]) == ["--offload-arch=gfx90a"]
    assert cuda_flags.arch_flags(cuda_flags.TOOLKITS["rocm"], ["gfx90a"]) == ["--offload-arch=gfx90a"]
    assert rc.flags_for(rc.TOOLCHAINS["acpp"], ["omp"]) == ["--acpp-targets=omp"]
    with pytest.raises(ValueError, match="no target 'pvc'; accepted: \\['generic', 'omp'\\]"):
        rc.flags_for(rc.TOOLCHAINS["acpp"], ["pvc"])
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST"):
        rc.flags_for(rc.TOOLCHAINS["nvcc"], ["sm_90"])


def test_a_toolkit_root_wins_over_path_and_the_builder_finds_what_the_record_does(
        env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hipcc: ROCM_HOME (as torch reads it) before another hipcc on PATH; the CUDA backend's ROCm toolkit finds the
    same compiler and root, and probes it with the record's HIP_PLATFORM=amd."""
    rocm = tmp_path / "rocm"
    fake_compiler(rocm / "bin", "hipcc", "--version", HIPCC_BANNER)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "hipcc").write_text('#!/bin/sh\necho "HIP version: 9.9.0-$HIP_PLATFORM"\n')
    (tmp_path / "bin" / "hipcc").chmod(0o755)
    env = {**env, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"}
    record = rc.TOOLCHAINS["hipcc"]
    assert rc.locate(record, env) == tmp_path / "bin" / "hipcc"
    assert rc.probe(record, tmp_path / "bin" / "hipcc").version == "9.9.0-amd"
    env["ROCM_HOME"] = str(rocm)
    assert rc.locate(record, env) == rocm / "bin" / "hipcc"
    assert rc.install_root(record, rocm / "bin" / "hipcc", env) == rocm
    where = rc.searched(record, env)
    assert where.index(f"no hipcc in {rocm / 'bin'} (ROCM_HOME)") < where.index("no hipcc on PATH")
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("CXX", shutil.which("c++") or shutil.which("g++") or "c++")
    monkeypatch.setenv("PYTORCH_ROCM_ARCH", "gfx90a")
    fused_adam = builder_class("adam", "fused_adam")
    inputs = fused_adam(toolkit=cuda_flags.TOOLKITS["rocm"]).extra_key_inputs()
    assert inputs["device_compiler"]["path"] == str(rocm / "bin" / "hipcc")
