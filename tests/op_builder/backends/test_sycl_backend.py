"""SYCLOpBuilder and the XPU fused-optimizer builders without an XPU or a SYCL compiler.

A fake ``icpx`` (tests/op_builder/fixtures/fake_toolchains) answers ``--version`` like Intel's; torch's XPU
support is patched where a test needs it, and the compile call is captured. The SYCL sources get a host
syntax check only when SYCL headers are available (``ANYACCEL_SYCL_INCLUDE``), see the last test.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from anyaccel.ops import dispatch as impls
from anyaccel.op_builder.core import manifest as mf
from anyaccel.op_builder.toolchains import sycl as st
from anyaccel.op_builder.core.builder import OpBuilder
from anyaccel.op_builder.core.errors import BuildError, ToolchainError
from anyaccel.op_builder.registry import all_builder_names, get_builder_class
from anyaccel.op_builder.backends.sycl import SYCLOpBuilder, XPUArchError, XPUSupportError
from anyaccel.op_builder.xpu_ops import XPUFusedAdamBuilder, XPUFusedLionBuilder

from opb_helpers import make_wrapper

FAKES = Path(__file__).resolve().parent / "fixtures" / "fake_toolchains"
FAKE_ONEAPI = FAKES / "oneapi"
FAKE_ICPX_DIR = FAKE_ONEAPI / "compiler" / "latest" / "bin"


@pytest.fixture
def sycl_env(monkeypatch, tmp_path):
    """A PATH without icpx, no override, no ONEAPI_ROOT, an explicit arch list."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", f"{empty}{os.pathsep}{os.path.dirname(shutil.which('sh'))}")
    for var in (st.SYCL_CXX_ENV, st.ONEAPI_ROOT_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(st.ARCH_LIST_ENV, "pvc")
    return tmp_path


@pytest.fixture
def xpu_torch(monkeypatch, sycl_env):
    """torch patched to say it is built with XPU support, the fake icpx on PATH."""
    monkeypatch.setattr("anyaccel.op_builder.backends.sycl.torch_has_xpu", lambda: True)
    monkeypatch.setenv("PATH", f"{FAKE_ICPX_DIR}{os.pathsep}{os.environ['PATH']}")
    return FAKE_ICPX_DIR / "icpx"


def _key(builder: OpBuilder) -> str:
    return mf.compute_key(builder.key_inputs())


# ---- compiler discovery --------------------------------------------------------------------------------


def test_compiler_found_by_override_then_path_then_oneapi_root(sycl_env, monkeypatch):
    assert st.find_sycl_compiler() is None
    monkeypatch.setenv(st.ONEAPI_ROOT_ENV, str(FAKE_ONEAPI))
    assert st.find_sycl_compiler() == FAKE_ICPX_DIR / "icpx"
    other = sycl_env / "other"
    other.mkdir()
    make_wrapper(other, "echo 'Intel(R) oneAPI DPC++/C++ Compiler 2024.2.1 (2024.2.1.20240711)'\n", name="icpx")
    monkeypatch.setenv("PATH", f"{other}{os.pathsep}{os.environ['PATH']}")
    assert st.find_sycl_compiler() == other / "icpx"  # PATH before ONEAPI_ROOT
    monkeypatch.setenv(st.SYCL_CXX_ENV, str(FAKE_ICPX_DIR / "icpx"))
    assert st.find_sycl_compiler() == FAKE_ICPX_DIR / "icpx"  # the override wins
    monkeypatch.setenv(st.SYCL_CXX_ENV, "no-such-icpx")
    with pytest.raises(ToolchainError, match=st.SYCL_CXX_ENV) as err:
        st.find_sycl_compiler()
    assert err.value.code == "sycl_compiler_missing" and "no-such-icpx" in str(err.value)


def test_compiler_is_checked_by_running_it(sycl_env):
    found = st.probe_sycl_compiler(FAKE_ICPX_DIR / "icpx")
    assert found.version == (2025, 0, 4) and found.torch_version == 20250004
    assert found.home == FAKE_ONEAPI / "compiler" / "latest"
    assert "DPC++" in found.banner
    with pytest.raises(ToolchainError, match="not a SYCL") as err:
        st.probe_sycl_compiler(FAKES / "not_sycl" / "icpx")
    assert err.value.code == "sycl_compiler_missing" and "g++" in str(err.value)
    with pytest.raises(ToolchainError, match="does not run"):
        st.probe_sycl_compiler(sycl_env / "missing" / "icpx")


def test_oneapi_root_alone_is_not_trusted(sycl_env, monkeypatch):
    stale = sycl_env / "oneapi-removed"
    (stale / "compiler" / "latest" / "bin").mkdir(parents=True)
    monkeypatch.setenv(st.ONEAPI_ROOT_ENV, str(stale))
    with pytest.raises(ToolchainError) as err:
        st.require_sycl_compiler()
    text = str(err.value)
    assert err.value.code == "sycl_compiler_missing"
    assert st.SYCL_CXX_ENV in text and "icpx" in text and str(stale) in text
    liar = sycl_env / "oneapi-liar"
    (liar / "compiler" / "latest" / "bin").mkdir(parents=True)
    shutil.copy(FAKES / "not_sycl" / "icpx", liar / "compiler" / "latest" / "bin" / "icpx")
    monkeypatch.setenv(st.ONEAPI_ROOT_ENV, str(liar))
    with pytest.raises(ToolchainError, match="not a SYCL"):
        st.require_sycl_compiler()


def test_arch_list_from_variable_or_torch(sycl_env, monkeypatch):
    monkeypatch.setenv(st.ARCH_LIST_ENV, "pvc, bmg;pvc")
    assert st.xpu_arch_list() == ["bmg", "pvc"]
    monkeypatch.setenv(st.ARCH_LIST_ENV, "")
    assert st.xpu_arch_list() == []  # set but empty: JIT only, as torch
    monkeypatch.setenv(st.ARCH_LIST_ENV, "pvc,$(rm)")
    with pytest.raises(XPUArchError, match=st.ARCH_LIST_ENV):
        XPUFusedAdamBuilder().arch_list()
    monkeypatch.delenv(st.ARCH_LIST_ENV)
    monkeypatch.setattr(torch.xpu, "get_arch_list", lambda: ["pvc", "dg2-g10", "bmg"])
    assert st.xpu_arch_list() == ["bmg", "pvc"]  # torch's default drops dg2


# ---- key, preflight, compile -----------------------------------------------------------------------------


def test_xpu_builders_key_inputs(xpu_torch, monkeypatch, sycl_env):
    for cls, src in ((XPUFusedAdamBuilder, "adam/fused_adam_sycl.sycl"), (XPUFusedLionBuilder, "lion/fused_lion_sycl.sycl")):
        b = cls()
        assert isinstance(b, SYCLOpBuilder) and b.WITH_CUDA is False
        inputs = b.key_inputs()
        assert inputs["backend"] == "xpu" and inputs["xpu_arch_list"] == ["pvc"]
        assert inputs["device_compiler"]["path"] == str(xpu_torch)
        assert any(f.endswith(src) for f in inputs["files"])
        assert any(f.endswith("multi_tensor_apply.hpp") for f in inputs["files"])
        assert not any(f.endswith(".cuh") for f in inputs["files"])
        assert "device_compiler" in cls.BUILD_HOST_FIELDS and "xpu_arch_list" not in cls.BUILD_HOST_FIELDS
    base = _key(XPUFusedAdamBuilder())
    assert _key(XPUFusedAdamBuilder()) == base
    monkeypatch.setenv(st.ARCH_LIST_ENV, "pvc,bmg")
    assert _key(XPUFusedAdamBuilder()) != base
    monkeypatch.setenv(st.ARCH_LIST_ENV, "pvc")
    other = sycl_env / "icpx2"
    other.mkdir()
    shutil.copy(xpu_torch, other / "icpx")
    (other / "icpx").write_text((other / "icpx").read_text() + "# another build\n")
    monkeypatch.setenv(st.SYCL_CXX_ENV, str(other / "icpx"))
    assert _key(XPUFusedAdamBuilder()) != base
    monkeypatch.delenv(st.SYCL_CXX_ENV)
    monkeypatch.setattr(torch.version, "xpu", "20250004", raising=False)
    assert _key(XPUFusedAdamBuilder()) != base
    assert _key(XPUFusedAdamBuilder()) != _key(XPUFusedLionBuilder())


def test_cpu_torch_is_incompatible_and_refuses_to_build(sycl_env):
    ok, reason = XPUFusedAdamBuilder().compatibility()
    assert not ok and "XPU support" in reason
    with pytest.raises(XPUSupportError, match="XPU build of torch"):
        XPUFusedAdamBuilder().preflight()


def test_missing_sycl_compiler_is_a_typed_build_error(sycl_env, monkeypatch):
    monkeypatch.setattr("anyaccel.op_builder.backends.sycl.torch_has_xpu", lambda: True)
    monkeypatch.setenv(st.ARCH_LIST_ENV, "pvc,xe-lpg")  # a key no other test loads
    with pytest.raises(BuildError) as err:
        XPUFusedLionBuilder().load()
    text = str(err.value)
    assert err.value.code == "sycl_compiler_missing"
    assert "no SYCL compiler" in text and st.SYCL_CXX_ENV in text and "oneAPI" in text
    assert err.value.log_path is not None and err.value.log_path.exists()


def test_preflight_runs_the_compiler_and_changes_no_environment(xpu_torch, monkeypatch):
    monkeypatch.setenv(st.ARCH_LIST_ENV, "pvc;bmg")
    before = dict(os.environ)
    env = XPUFusedAdamBuilder().preflight()
    assert env["PATH"].split(os.pathsep)[0] == str(xpu_torch.parent)
    assert env[st.ARCH_LIST_ENV] == "bmg,pvc"  # torch's comma format, the key's list
    assert dict(os.environ) == before


def _capture_load(monkeypatch, seen: dict) -> None:
    import torch.utils.cpp_extension as cpp

    def fake_load(**kwargs):
        seen.update(kwargs)
        seen["env_arch"] = os.environ.get(st.ARCH_LIST_ENV)
        seen["which_icpx"] = shutil.which("icpx")
        seen["icpx_real"] = os.path.realpath(seen["which_icpx"]) if seen["which_icpx"] else None
        seen["sycl_home"] = cpp.SYCL_HOME
        raise RuntimeError("Error building extension\nfused_adam_sycl.sycl:1:1: error: unknown type name 'boom'")

    monkeypatch.setattr(cpp, "load", fake_load)


def test_load_compiles_sycl_sources_with_namespace_and_restores_state(xpu_torch, monkeypatch):
    import torch.utils.cpp_extension as cpp

    seen: dict = {}
    _capture_load(monkeypatch, seen)
    monkeypatch.setenv(st.ARCH_LIST_ENV, "bmg")
    b = XPUFusedAdamBuilder()
    ns = b.namespace(_key(b))
    home_before = cpp.SYCL_HOME
    with pytest.raises(BuildError) as err:
        b.load()
    assert err.value.code == "compile_error" and "boom" in str(err.value)
    macro = f"-DANYACCEL_OP_NAMESPACE={ns}"
    assert macro in seen["extra_sycl_cflags"] and macro in seen["extra_cflags"]
    assert seen["with_sycl"] is True and seen["with_cuda"] is False
    assert [Path(s).name for s in seen["sources"]] == ["fused_adam_sycl.sycl"]
    assert seen["extra_include_paths"][0].endswith("csrc/includes/sycl")
    assert seen["env_arch"] == "bmg" and seen["which_icpx"] == str(xpu_torch)
    assert seen["sycl_home"] == str(FAKE_ONEAPI / "compiler" / "latest")
    assert cpp.SYCL_HOME == home_before and os.environ[st.ARCH_LIST_ENV] == "bmg"


def test_a_compiler_not_named_icpx_is_reached_through_a_shim(sycl_env, monkeypatch):
    monkeypatch.setattr("anyaccel.op_builder.backends.sycl.torch_has_xpu", lambda: True)
    llvm = sycl_env / "llvm" / "bin"
    llvm.mkdir(parents=True)
    make_wrapper(llvm, "echo 'clang version 21.0.0git (https://github.com/intel/llvm abc123)'\n", name="clang++")
    monkeypatch.setenv(st.SYCL_CXX_ENV, str(llvm / "clang++"))
    monkeypatch.setenv(st.ARCH_LIST_ENV, "acm-g10")
    seen: dict = {}
    _capture_load(monkeypatch, seen)
    with pytest.raises(BuildError):
        XPUFusedLionBuilder().load()
    shim = Path(seen["which_icpx"])
    assert shim.name == "icpx" and seen["icpx_real"] == os.path.realpath(llvm / "clang++")
    assert shutil.which("icpx") is None  # the shim lived only during the compile


# ---- accelerator mapping and the implementation loader -------------------------------------------------------


@pytest.mark.parametrize("accelerator", ["xpu", "npu"])
def test_every_op_the_cuda_accelerator_knows_maps_on_xpu_and_npu(accelerator):
    from anyaccel.op_builder import registry

    builtin = [n for n in all_builder_names()  # rows of the package's table (tests register classes too)
               if any(isinstance(t, str) and t.startswith("anyaccel.") for t in registry._BUILDERS[n].values())]
    assert {"CPUAdamBuilder", "CPULionBuilder", "FusedAdamBuilder", "FusedLionBuilder"} <= set(builtin)
    for name in builtin:
        if get_builder_class(name, "cuda") is None:
            continue
        cls = get_builder_class(name, accelerator)
        assert cls is not None, name
        assert cls.BACKEND in ("cpu", accelerator), (name, cls)
    adam = get_builder_class("FusedAdamBuilder", accelerator)
    assert adam.__name__ == f"{accelerator.upper()}FusedAdamBuilder"
    assert get_builder_class("fused_lion", accelerator).__name__ == f"{accelerator.upper()}FusedLionBuilder"
    assert get_builder_class("FusedAdamBuilder", "mps") is None  # DeepSpeed's contract: None, not an error


@pytest.mark.parametrize("accelerator", ["xpu", "npu"])
def test_host_ops_serve_every_accelerator_without_device_libraries(accelerator):
    device_libs = ("-lsycl", "-lascendcl", "-ltorch_npu", "-lcudart", "-lc10_xpu", "-ltorch_xpu")
    for name in ("CPUAdamBuilder", "CPULionBuilder"):
        cls = get_builder_class(name, accelerator)
        assert cls is get_builder_class(name, "cpu")
        b = cls()
        assert cls.WITH_CUDA is False
        assert not [f for f in b.extra_ldflags() + b.cxx_args() if f.startswith(device_libs)]


def test_xpu_accelerator_create_op_builder():
    from anyaccel.accelerator.xpu import XPU_Accelerator

    acc = XPU_Accelerator()
    assert isinstance(acc.create_op_builder("FusedAdamBuilder"), XPUFusedAdamBuilder)
    assert acc.get_op_builder("FusedLionBuilder") is XPUFusedLionBuilder


@pytest.fixture
def fresh_loader(monkeypatch):
    """The implementation loader with its own registry, so rows added here do not leak."""
    impls.implementations("fused_adam")  # built-ins registered
    monkeypatch.setattr(impls, "_registry", {op: dict(rows) for op, rows in impls._registry.items()})
    monkeypatch.setattr(impls, "_loaded", {})
    monkeypatch.setattr(impls, "_chosen", {})
    monkeypatch.delenv("ANYACCEL_IMPL_FUSED_ADAM", raising=False)


def test_priority_loader_offers_sycl_and_triton_on_xpu(fresh_loader, monkeypatch, caplog):
    names = {c.name for c in impls.explain("fused_adam", "xpu")}
    assert {"sycl", "triton"} <= names
    sycl = [c for c in impls.explain("fused_adam", "xpu") if c.name == "sycl"][0]
    assert not sycl.available and "XPU support" in sycl.reason  # CPU torch here
    monkeypatch.setattr(XPUFusedAdamBuilder, "compatibility", lambda self: (True, ""))
    triton = impls._registry["fused_adam"]["triton"]
    impls._registry["fused_adam"]["triton"] = dataclasses.replace(triton, probe=lambda: (True, "triton is installed"))
    impls._chosen.clear()
    assert impls.choose("fused_adam", "xpu").name == "sycl"  # priority 20 > 10
    assert impls.choose("fused_adam", "xpu", name="triton").name == "triton"
    monkeypatch.setattr(XPUFusedAdamBuilder, "load", lambda self, verbose=False: "sycl-module")
    with caplog.at_level("INFO", logger="anyaccel.ops.dispatch"):
        loaded = impls.load("fused_adam", "xpu")
    assert loaded.impl_name == "sycl" and "using implementation 'sycl'" in caplog.text
    assert "sycl" not in {c.name for c in impls.explain("fused_adam", "cuda") if c.available}


# ---- the SYCL sources --------------------------------------------------------------------------------------


def _sycl_include() -> Path | None:
    raw = os.environ.get("ANYACCEL_SYCL_INCLUDE", "")
    return Path(raw) if raw and (Path(raw) / "sycl" / "sycl.hpp").is_file() else None


@pytest.mark.skipif(_sycl_include() is None, reason="set ANYACCEL_SYCL_INCLUDE to a directory with sycl/sycl.hpp "
                    "(e.g. the include/ of the intel-sycl-rt wheel) to syntax-check the SYCL sources")
@pytest.mark.parametrize("source", ["adam/fused_adam_sycl.sycl", "lion/fused_lion_sycl.sycl"])
def test_sycl_sources_pass_a_host_syntax_check(source, tmp_path):
    """The host pass of the SYCL sources (kernels instantiated for every dtype variant) with g++."""
    import anyaccel

    pkg = Path(anyaccel.__file__).parent
    stub = tmp_path / "c10" / "xpu" / "impl"
    stub.mkdir(parents=True)  # generated by an XPU build of torch; absent from CPU wheels
    (stub / "xpu_cmake_macros.h").write_text("#pragma once\n#define C10_XPU_BUILD_SHARED_LIBS\n")
    torch_inc = Path(torch.__file__).parent / "include"
    cmd = [shutil.which("g++") or "c++", "-fsyntax-only", "-x", "c++", "-std=c++20",
           "-DSYCL_DISABLE_FSYCL_SYCLHPP_WARNING", "-DANYACCEL_OP_NAMESPACE=anyaccel_syntax_check",
           f"-I{tmp_path}", f"-I{_sycl_include()}", f"-I{torch_inc}", f"-I{torch_inc / 'torch/csrc/api/include'}",
           f"-I{pkg / 'csrc/includes/sycl'}", str(pkg / "csrc" / source)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
