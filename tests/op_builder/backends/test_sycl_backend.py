"""SYCLOpBuilder and the XPU builds of the op specs without an XPU or a SYCL compiler.

A fake ``icpx`` (tests/op_builder/fixtures/fake_toolchains) answers ``--version`` like Intel's; torch's XPU
support is patched where a test needs it, and the compile call (``torch.utils.cpp_extension.load`` with
``with_sycl=True``: the SYCL backend's only use of it) is captured. The SYCL sources get a host syntax check
only when SYCL headers are available (``ANYACCEL_SYCL_INCLUDE``), see the last test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from opb_helpers import HERE, make_wrapper

from anyaccel.op_builder.backends.sycl import (
    HOST_DEVICE_DEFINE,
    SYCLImplementationError,
    SYCLOpBuilder,
    XPUArchError,
    XPUSupportError,
)
from anyaccel.op_builder.classes import builder_class, spec_builds
from anyaccel.op_builder.core import manifest as mf
from anyaccel.op_builder.core.builder import OpBuilder
from anyaccel.op_builder.errors import BuildError
from anyaccel.op_builder.toolchains import schema, torch_abi
from anyaccel.op_builder.toolchains import sycl as st
from anyaccel.ops.registry import get_builder_class

FAKES = HERE / "fixtures" / "fake_toolchains"
FAKE_ONEAPI = FAKES / "oneapi"
FAKE_ICPX_DIR = FAKE_ONEAPI / "compiler" / "latest" / "bin"
FAKE_ACPP_DIR = FAKES / "adaptivecpp" / "bin"
XPUFusedAdamBuilder = builder_class("adam", "fused_adam_sycl")
XPUFusedLionBuilder = builder_class("lion", "fused_lion_sycl")
XPUFusedLambBuilder = builder_class("lamb", "fused_lamb_sycl")


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


# ---- key, preflight, compile -----------------------------------------------------------------------------


def test_the_xpu_builds_are_sycl_builders_named_after_deepspeed(sycl_env):
    for cls, name in ((XPUFusedAdamBuilder, "fused_adam_sycl"), (XPUFusedLionBuilder, "fused_lion_sycl"),
                      (XPUFusedLambBuilder, "fused_lamb_sycl")):
        assert issubclass(cls, SYCLOpBuilder) and cls.NAME == name and cls.BACKEND == cls.DEVICE_TYPE == "xpu"
        assert cls.__name__ in ("FusedAdamBuilder", "FusedLionBuilder", "FusedLambBuilder")
        assert cls.BUILD.accelerators == ("xpu",)
        assert cls.BUILD_VAR == f"ANYACCEL_BUILD_{name.upper()}"


def test_xpu_builders_key_inputs(xpu_torch, monkeypatch, sycl_env):
    for cls, src in ((XPUFusedAdamBuilder, "adam/fused_adam_sycl.sycl"),
                     (XPUFusedLionBuilder, "lion/fused_lion_sycl.sycl")):
        b = cls()
        inputs = b.key_inputs()
        assert inputs["backend"] == "xpu" and inputs["xpu_arch_list"] == ["pvc"]
        assert inputs["device_compiler"]["path"] == str(xpu_torch)
        assert inputs["abi_target"] == "2.10" and inputs["schema_header"] is not None
        assert any(f.endswith(src) for f in inputs["files"])
        assert any(f.endswith("multi_tensor_apply.hpp") for f in inputs["files"])
        assert any(f.endswith("stable/checks.h") for f in inputs["files"])
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


def test_a_malformed_arch_list_is_typed(sycl_env, monkeypatch):
    monkeypatch.setenv(st.ARCH_LIST_ENV, "pvc,$(rm)")
    with pytest.raises(XPUArchError, match=st.ARCH_LIST_ENV) as err:
        XPUFusedAdamBuilder().arch_list()
    assert isinstance(err.value, ValueError)


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
    assert env["CXX"] and env["MAX_JOBS"]
    assert dict(os.environ) == before


def _capture_load(monkeypatch, seen: dict) -> None:
    import torch.utils.cpp_extension as cpp

    def fake_load(**kwargs):
        seen.update(kwargs)
        seen["env_arch"] = os.environ.get(st.ARCH_LIST_ENV)
        seen["which_icpx"] = shutil.which("icpx")
        seen["icpx_real"] = os.path.realpath(seen["which_icpx"]) if seen["which_icpx"] else None
        seen["sycl_home"] = cpp.SYCL_HOME
        gen = Path(kwargs["extra_include_paths"][0])
        seen["generated"] = sorted(p.name for p in gen.iterdir())
        seen["header"] = (gen / schema.HEADER_NAME).read_text()
        raise RuntimeError("Error building extension\nfused_adam_sycl.sycl:1:1: error: unknown type name 'boom'")

    monkeypatch.setattr(cpp, "load", fake_load)


def test_load_compiles_sycl_sources_with_namespace_abi_target_and_schema_header(xpu_torch, monkeypatch):
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
    for flags in (seen["extra_sycl_cflags"], seen["extra_cflags"]):
        assert f"-DANYACCEL_OP_NAMESPACE={ns}" in flags and torch_abi.target_macro((2, 10)) in flags
        assert not any(f.startswith("-I") for f in flags)  # include paths go through extra_include_paths
    assert seen["with_sycl"] is True and seen["with_cuda"] is False and seen["is_python_module"] is False
    assert [Path(s).name for s in seen["sources"]] == ["fused_adam_sycl.sycl"]
    assert seen["extra_include_paths"][1].endswith("csrc/includes")
    assert seen["generated"] == sorted([schema.HEADER_NAME, schema.DTYPES_HEADER_NAME])
    assert '"adam_step(Tensor(a!)[] params' in seen["header"]
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


def test_an_xpu_build_with_adaptivecpp_is_refused(sycl_env, monkeypatch):
    """AdaptiveCpp's kernels cannot run on torch's XPU queue (a DPC++ sycl::queue): refused before compiling."""
    monkeypatch.setattr("anyaccel.op_builder.backends.sycl.torch_has_xpu", lambda: True)
    monkeypatch.setenv("PATH", f"{FAKE_ACPP_DIR}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(SYCLImplementationError, match="AdaptiveCpp") as err:
        XPUFusedAdamBuilder().preflight()
    assert "icpx" in str(err.value) and st.SYCL_CXX_ENV in str(err.value)


def test_a_host_device_build_compiles_with_acpp_through_the_ninja_driver(sycl_env, monkeypatch, tmp_path):
    """A host-device build needs no XPU torch; with acpp its commands are acpp's, for its OpenMP CPU backend,
    with the define that selects the CPU dispatch key; the fake acpp fails the compile, a typed BuildError."""
    monkeypatch.setenv("PATH", f"{FAKE_ACPP_DIR}{os.pathsep}{os.environ['PATH']}")
    host, xpu = XPUFusedLambBuilder(host_device=True), XPUFusedLambBuilder()
    assert host.compatibility() == (True, "")
    assert HOST_DEVICE_DEFINE in host.sycl_args() and HOST_DEVICE_DEFINE not in xpu.sycl_args()
    assert _key(host) != _key(xpu)
    env = host.preflight()
    gen = tmp_path / "gen"
    steps = host.compile_steps(env, "ns_test", gen, tmp_path)
    acpp = str(FAKE_ACPP_DIR / "acpp")
    assert [s.source.name for s in steps] == ["fused_lamb_sycl.sycl"]
    cmd = steps[0].command
    assert cmd[:4] == (acpp, "--acpp-targets=omp", "-x", "c++") and HOST_DEVICE_DEFINE in cmd
    assert "-DANYACCEL_OP_NAMESPACE=ns_test" in cmd
    link = host.link_command(env)
    assert link[:3] == [acpp, "--acpp-targets=omp", "-shared"] and link[-1] == "-ltorch_cpu"
    with pytest.raises(BuildError) as err:
        XPUFusedLambBuilder(host_device=True).load()
    assert "fake acpp: cannot compile" in str(err.value) or err.value.log_path is not None


# ---- accelerator mapping -------------------------------------------------------------------------------------


@pytest.mark.parametrize("accelerator", ["xpu", "npu"])
def test_every_op_a_spec_builds_for_an_accelerator_maps_there(accelerator):
    """Each spec build declared for ``accelerator`` is what ``get_builder_class`` returns there, under the same
    DeepSpeed name as on CUDA; host builds serve it too; what a spec does not build there is None."""
    declared = {b.builder: b for _, b in spec_builds() if accelerator in b.accelerators}
    assert {"FusedAdamBuilder", "FusedLionBuilder"} <= set(declared)
    for name, build in declared.items():
        cls = get_builder_class(name, accelerator)
        assert cls is not None and cls.BUILD == build and cls.BACKEND == accelerator, name
    for name in {b.builder for _, b in spec_builds() if b.accelerators == ("*",)}:
        assert get_builder_class(name, accelerator).BACKEND == "cpu"
    for name in {b.builder for _, b in spec_builds()} - set(declared):
        cls = get_builder_class(name, accelerator)
        assert cls is None or cls.BACKEND == "cpu", name
    adam = get_builder_class("FusedAdamBuilder", accelerator)
    suffix = "sycl" if accelerator == "xpu" else "npu"
    assert adam.__name__ == "FusedAdamBuilder" and adam.NAME == f"fused_adam_{suffix}"
    assert get_builder_class("fused_lion", accelerator).NAME.startswith("fused_lion_")
    assert get_builder_class("FusedAdamBuilder", "mps") is None  # DeepSpeed's contract: None, not an error


@pytest.mark.parametrize("accelerator", ["xpu", "npu"])
def test_host_ops_serve_every_accelerator_without_device_libraries(accelerator):
    device_libs = ("-lsycl", "-lascendcl", "-ltorch_npu", "-lcudart", "-lc10_xpu", "-ltorch_xpu", "-ltorch_python",
                   "-lc10", "-fopenmp", "-lgomp")
    env = {"CXX": "c++"}
    for name in ("CPUAdamBuilder", "CPULionBuilder"):
        cls = get_builder_class(name, accelerator)
        assert cls is get_builder_class(name, "cpu")
        b = cls()
        link = b.link_command(env)
        assert "-ltorch_cpu" in link and not [f for f in link + b.cxx_args() if f.startswith(device_libs)]


def test_xpu_accelerator_create_op_builder():
    from anyaccel.accelerator.xpu import XPU_Accelerator

    acc = XPU_Accelerator()
    assert isinstance(acc.create_op_builder("FusedAdamBuilder"), XPUFusedAdamBuilder)
    assert acc.get_op_builder("FusedLionBuilder") is XPUFusedLionBuilder


# ---- the SYCL sources --------------------------------------------------------------------------------------


def _sycl_include() -> Path | None:
    raw = os.environ.get("ANYACCEL_SYCL_INCLUDE", "")
    return Path(raw) if raw and (Path(raw) / "sycl" / "sycl.hpp").is_file() else None


@pytest.mark.skipif(_sycl_include() is None, reason="set ANYACCEL_SYCL_INCLUDE to a directory with sycl/sycl.hpp "
                    "(e.g. the include/ of the intel-sycl-rt wheel) to syntax-check the SYCL sources")
@pytest.mark.parametrize("host_device", [False, True], ids=["xpu", "host_device"])
@pytest.mark.parametrize("cls", [XPUFusedAdamBuilder, XPUFusedLionBuilder, XPUFusedLambBuilder],
                         ids=["adam", "lion", "lamb"])
def test_sycl_sources_pass_a_host_syntax_check(cls, host_device, tmp_path):
    """The host pass of the SYCL sources (kernels instantiated for every dtype variant) with g++, against the
    stable-ABI headers and the spec's generated headers, as the build compiles them (XPU and host-device
    builds: DPC++'s headers define its bfloat16 extension's macro, so its bfloat16 is the one used)."""
    b = cls(host_device=host_device)
    gen = tmp_path / "gen"
    gen.mkdir()
    b.write_generated_headers(gen)
    cmd = [shutil.which("g++") or "c++", "-fsyntax-only", "-x", "c++", "-std=c++20",
           "-DSYCL_DISABLE_FSYCL_SYCLHPP_WARNING", torch_abi.target_macro(torch_abi.target()),
           "-DANYACCEL_OP_NAMESPACE=anyaccel_syntax_check", *b.sycl_args(), f"-I{gen}", f"-I{_sycl_include()}",
           f"-I{b.source_root() / 'csrc' / 'includes'}", "-isystem", str(torch_abi.include_dir()),
           *(str(b.source_root() / s) for s in b.sources())]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
