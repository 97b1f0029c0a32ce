"""CUDAOpBuilder on the core OpBuilder, without a GPU: cache key, toolkit policy, the build commands through our
ninja driver, CPU-only hosts building for GPUs, the registry and the report.

A fake ``nvcc`` (a shell script under a temporary ``CUDA_HOME``) stands for the toolkit and torch's CUDA
version is patched, so the whole load path runs up to ninja, whose run is captured.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest
import torch
from opb_helpers import REAL_CXX, make_wrapper

from anyaccel.op_builder.backends.cuda import CUDAOpBuilder, GPUArchError
from anyaccel.op_builder.classes import builder_class
from anyaccel.op_builder.core import manifest as mf
from anyaccel.op_builder.core.builder import OpBuilder
from anyaccel.op_builder.errors import BuildError, OpBuilderError
from anyaccel.op_builder.toolchains import cuda_flags, schema, torch_abi
from anyaccel.op_builder.toolchains import ninja as nj
from anyaccel.ops.registry import all_builder_names, get_builder_class

FusedAdamBuilder = builder_class("adam", "fused_adam")
FusedLionBuilder = builder_class("lion", "fused_lion")


def _fake_toolkit(root: Path, release: str) -> Path:
    """A CUDA_HOME whose bin/nvcc prints ``release <release>`` like the real one, with the runtime header."""
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "lib64").mkdir(exist_ok=True)
    (root / "include").mkdir(exist_ok=True)
    major, minor = (int(x) for x in release.split("."))
    (root / "include" / "cuda_runtime_api.h").write_text(f"#define CUDART_VERSION {major * 1000 + minor * 10}\n")
    make_wrapper(root / "bin", f"echo 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                               f"echo 'Cuda compilation tools, release {release}, V{release}.1'\n", name="nvcc")
    return root


@pytest.fixture
def cuda_env(monkeypatch, tmp_path):
    """A CUDA 13.0 torch (patched), a fake 13.0 toolkit, an explicit arch list unique to the test."""
    home = _fake_toolkit(tmp_path / "cuda", "13.0")
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    monkeypatch.delenv("ANYACCEL_SKIP_CUDA_CHECK", raising=False)
    return home


def _key(builder: OpBuilder) -> str:
    return mf.compute_key(builder.key_inputs())


def _ninja_file_of_a_failed_build(builder: OpBuilder, monkeypatch) -> tuple[str, dict]:
    """Run ``builder.load()`` with ninja replaced by a capture that fails like a compiler error; return the
    ninja file it was given and the environment it would have run with."""
    seen: dict = {}

    def fake_run_ninja(ninja, build_dir, jobs, env, timeout_s, **_progress):
        seen["file"] = (Path(build_dir) / "build.ninja").read_text()
        seen["gen"] = sorted(p.name for p in (Path(build_dir) / "gen").iterdir())
        seen["env"] = dict(env)
        seen["os_environ"] = {k: os.environ.get(k) for k in ("CUDA_HOME", "NVCC", "TORCH_CUDA_ARCH_LIST")}
        seen["timeout_s"] = timeout_s
        return nj.NinjaResult(1, "FAILED: x.o\nnvcc -c fused.cu\nfused_adam_cuda.cu(1): error: identifier \"boom\" "
                                 "is undefined\nninja: build stopped: subcommand failed.\n", 0.0)

    monkeypatch.setattr(nj, "run_ninja", fake_run_ninja)
    with pytest.raises(BuildError) as err:
        builder.load()
    assert err.value.code == "compile_error" and "boom" in str(err.value)
    return seen["file"], seen


# ---- the builders ------------------------------------------------------------------------------------------


def test_cuda_builders_are_core_op_builders(cuda_env):
    for cls in (FusedAdamBuilder, FusedLionBuilder):
        b = cls()
        assert isinstance(b, OpBuilder) and isinstance(b, CUDAOpBuilder) and cls.DEVICE_TYPE == "cuda"
        inputs = b.key_inputs()
        assert inputs["backend"] == "cuda" and inputs["gpu_arch_list"] == ["9.0"]
        assert inputs["cuda_major"] == 13 and inputs["gpu_toolkit"] == "cuda" and inputs["abi_target"] == "2.10"
        assert "torch_cuda" not in inputs and "torch_hip" not in inputs
        assert inputs["device_compiler"]["path"] == str(cuda_env / "bin" / "nvcc")
        assert any(f.endswith(".cuh") for f in inputs["files"]), "the CUDA headers are part of the key"
        assert "-gencode=arch=compute_90,code=sm_90" in inputs["nvcc_args"]
        assert "device_compiler" in cls.BUILD_HOST_FIELDS and "built_with_torch" in cls.BUILD_HOST_FIELDS
        assert "gpu_arch_list" not in cls.BUILD_HOST_FIELDS and "cuda_major" not in cls.BUILD_HOST_FIELDS
        assert b.namespace(_key(b)).startswith(f"anyaccel_{cls.NAME}_")


@pytest.mark.parametrize("builder_cls", [FusedAdamBuilder, FusedLionBuilder])
def test_builder_flags_from_explicit_arch_list(builder_cls, monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0a")
    b = builder_cls()
    monkeypatch.setattr(b, "toolkit", lambda: cuda_flags.TOOLKITS["cuda"])
    args = b.nvcc_args()
    assert "-gencode=arch=compute_90a,code=sm_90a" in args and "-gencode=arch=compute_80,code=sm_80" in args
    assert all(not a.startswith("-arch") for a in args)
    assert b.arch_list() == ["8.0", "9.0a"]
    assert not any(a.startswith("-std=") for a in args + b.cxx_args())  # compile_steps adds the one standard
    for src in b.sources():
        assert src.endswith(".cu")
        text = (b.source_root() / src).read_text(encoding="utf-8")
        includes = [line.split()[1].strip('<>"') for line in text.splitlines() if line.startswith("#include")]
        torch_includes = [i for i in includes if i.startswith(("torch/", "ATen/", "c10/"))]
        assert all(i.startswith(("torch/csrc/stable/", "torch/headeronly/")) for i in torch_includes), includes
        assert "ANYACCEL_LIBRARY" in text and "TORCH_LIBRARY(" not in text and "torch/extension.h" not in text


def test_builder_without_arch_list_or_gpu_raises(monkeypatch):
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setattr("anyaccel.op_builder.toolchains.cuda.visible_capabilities", lambda: [])
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST"):
        FusedAdamBuilder().arch_list()


def test_key_changes_with_arch_list_toolkit_and_cuda_major(cuda_env, monkeypatch, tmp_path):
    base = _key(FusedAdamBuilder())
    assert _key(FusedAdamBuilder()) == base  # stable
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    assert _key(FusedAdamBuilder()) != base
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0+PTX")
    assert _key(FusedAdamBuilder()) != base
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    other = _fake_toolkit(tmp_path / "cuda2", "13.0")
    (other / "bin" / "nvcc").write_text((other / "bin" / "nvcc").read_text() + "# another build\n")
    monkeypatch.setenv("CUDA_HOME", str(other))
    assert _key(FusedAdamBuilder()) != base  # another nvcc file
    monkeypatch.setenv("CUDA_HOME", str(cuda_env))
    monkeypatch.setattr(torch.version, "cuda", "14.0")
    assert _key(FusedAdamBuilder()) != base  # another CUDA major: another runtime (cudart soname)
    monkeypatch.setattr(torch.version, "cuda", "13.2")
    assert _key(FusedAdamBuilder()) == base  # a minor upgrade keeps the binary
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert _key(FusedAdamBuilder()) == base


def test_arch_list_errors_are_typed(cuda_env, monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "sm_90")
    with pytest.raises(GPUArchError, match="TORCH_CUDA_ARCH_LIST"):
        FusedAdamBuilder().key_inputs()
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    monkeypatch.setattr("anyaccel.op_builder.toolchains.cuda.visible_capabilities", lambda: [])
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST"):
        FusedAdamBuilder().nvcc_args()


def test_toolkit_major_mismatch_is_a_build_error(cuda_env, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(_fake_toolkit(tmp_path / "old", "12.8")))
    with pytest.raises(BuildError) as err:
        FusedLionBuilder().load()
    text = str(err.value)
    assert err.value.code == "cuda_mismatch"
    assert "12.8" in text and "13.0" in text and "ANYACCEL_SKIP_CUDA_CHECK" in text and "CUDA_HOME" in text
    assert err.value.log_path is not None and err.value.log_path.exists()
    with pytest.raises(BuildError) as again:  # a failed key fails fast, with the same error
        FusedLionBuilder().load()
    assert again.value is err.value


def test_skip_cuda_check_and_preflight_environment(cuda_env, monkeypatch, tmp_path):
    old = _fake_toolkit(tmp_path / "old", "12.8")
    monkeypatch.setenv("CUDA_HOME", str(old))
    monkeypatch.setenv("ANYACCEL_SKIP_CUDA_CHECK", "1")
    env = FusedAdamBuilder().preflight()
    assert env["CUDA_HOME"] == str(old) and env["NVCC"] == str(old / "bin" / "nvcc")
    assert env["PATH"].split(os.pathsep)[0] == str(old / "bin") and env["CXX"] and env["MAX_JOBS"]
    assert os.environ["CUDA_HOME"] == str(old) and "MAX_JOBS" not in os.environ  # preflight changes nothing
    assert "NVCC" not in os.environ


def _fake_rocm(root: Path, version: str) -> Path:
    """A ROCM_HOME whose bin/hipcc prints ``HIP version: <version>`` like the real one."""
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "lib").mkdir(exist_ok=True)
    make_wrapper(root / "bin", f"echo 'HIP version: {version}'\n", name="hipcc")
    return root


def test_a_rocm_torch_builds_through_hipify_and_hipcc_with_torchs_rocm_flags(cuda_env, monkeypatch, tmp_path):
    """A ROCm torch: the same builder hipifies the sources into the build directory and hands them to hipcc with
    torch.utils.cpp_extension's ROCm flags; HIP_PLATFORM=amd is set while compiling (hipcc would otherwise pick
    nvidia on a host with nvcc and no AMD GPU). tests/csrc/test_hip_compile.py runs the real hipcc."""
    rocm = _fake_rocm(tmp_path / "rocm", "6.2.41133-dd7f95766")
    monkeypatch.setenv("ROCM_HOME", str(rocm))
    monkeypatch.setattr(torch.version, "hip", "6.2.41133")
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setenv("PYTORCH_ROCM_ARCH", "gfx942;gfx90a")
    b = FusedAdamBuilder()
    assert b.toolkit() is cuda_flags.TOOLKITS["rocm"] and b.cuda_major() is None
    env = b.preflight()
    assert env["HIPCC"] == str(rocm / "bin" / "hipcc") and env["ROCM_HOME"] == str(rocm)
    assert env["HIP_PLATFORM"] == "amd" and "NVCC" not in env
    text, seen = _ninja_file_of_a_failed_build(b, monkeypatch)
    compile_cmd = shlex.split(next(line for line in text.splitlines() if "command = " in line and " -c " in line)
                              .split("command = ", 1)[1].replace("$$", "$"))
    assert compile_cmd[0] == str(rocm / "bin" / "hipcc") and "-ccbin" not in compile_cmd
    assert "-Xcompiler" not in compile_cmd and "-fPIC" in compile_cmd and "-std=c++17" in compile_cmd
    for flag in ("--offload-arch=gfx90a", "--offload-arch=gfx942", "-fno-gpu-rdc", "-D__HIP_PLATFORM_AMD__=1",
                 "-DUSE_ROCM=1", "-DHIPBLAS_V2", torch_abi.target_macro((2, 10))):
        assert flag in compile_cmd
    source = Path(compile_cmd[compile_cmd.index("-c") + 1])
    assert source.name == "fused_adam_hip.hip" and source.parts[-4:-2] == ("hip", "csrc")
    includes = [f for f in compile_cmd if f.startswith("-I") and f.endswith("csrc/includes")]
    assert includes and all("/hip/csrc/includes" in f for f in includes)  # the translated copy's headers
    link = shlex.split(next(line for line in text.splitlines() if "command = " in line and "-shared" in line)
                       .split("command = ", 1)[1].replace("$$", "$"))
    assert "-lamdhip64" in link and "-lcudart" not in link and f"-L{rocm / 'lib'}" in link
    assert seen["env"]["HIP_PLATFORM"] == "amd"


def test_a_rocm_build_names_hipcc_when_it_is_missing(cuda_env, monkeypatch, tmp_path):
    monkeypatch.setenv("ROCM_HOME", str(tmp_path / "no-rocm"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CXX", REAL_CXX if os.path.isabs(REAL_CXX) else shutil.which(REAL_CXX))
    monkeypatch.setenv("PYTORCH_ROCM_ARCH", "gfx90a")
    builder = FusedAdamBuilder(toolkit=cuda_flags.TOOLKITS["rocm"])
    with pytest.raises(OpBuilderError, match="hipcc was not found: set ROCM_HOME") as err:
        builder.preflight()
    assert err.value.code == "compiler_missing"
    assert builder.buildability() == (False, "hipcc was not found (set ROCM_HOME to the toolkit)")


def test_the_build_goes_through_ninja_with_gencode_namespace_and_abi_target(cuda_env, monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a,8.0")
    b = FusedAdamBuilder()
    ns = b.namespace(_key(b))
    text, seen = _ninja_file_of_a_failed_build(b, monkeypatch)
    compile_cmd = shlex.split(next(line for line in text.splitlines() if "command = " in line and " -c " in line)
                              .split("command = ", 1)[1].replace("$$", "$"))
    assert compile_cmd[0] == str(cuda_env / "bin" / "nvcc") and compile_cmd[1:3] == ["-ccbin", seen["env"]["CXX"]]
    assert "-std=c++17" in compile_cmd and f"-DANYACCEL_OP_NAMESPACE={ns}" in compile_cmd
    assert torch_abi.target_macro((2, 10)) in compile_cmd
    assert "-gencode=arch=compute_90a,code=sm_90a" in compile_cmd
    assert "-gencode=arch=compute_80,code=sm_80" in compile_cmd
    assert ["-Xcompiler", "-fPIC"] == compile_cmd[compile_cmd.index("-fPIC") - 1:compile_cmd.index("-fPIC") + 1]
    assert compile_cmd[compile_cmd.index("-c") + 1].endswith("csrc/adam/fused_adam_cuda.cu")
    link = shlex.split(next(line for line in text.splitlines() if "command = " in line and "-shared" in line)
                       .split("command = ", 1)[1].replace("$$", "$"))
    assert "-ltorch_cpu" in link and "-lcudart" in link and f"-L{cuda_env / 'lib64'}" in link
    assert not [f for f in link if f in ("-ltorch_python", "-lc10", "-ltorch", "-lc10_cuda", "-ltorch_cuda")]
    assert seen["gen"] == sorted([schema.HEADER_NAME, schema.DTYPES_HEADER_NAME])
    assert seen["env"]["NVCC"] == str(cuda_env / "bin" / "nvcc") and seen["env"]["CUDA_HOME"] == str(cuda_env)
    assert seen["os_environ"]["NVCC"] == str(cuda_env / "bin" / "nvcc")  # set while compiling...
    assert "NVCC" not in os.environ and os.environ["TORCH_CUDA_ARCH_LIST"] == "9.0a,8.0"  # ...and restored
    assert seen["timeout_s"] == nj.DEFAULT_TIMEOUT_S


def test_a_cuda_op_builds_on_a_cpu_only_torch(cuda_env, monkeypatch):
    """A GPU wheel built on a CPU machine: with a CPU torch the op is buildable (not loadable), the toolkit's
    own CUDA major (read from its header) is the key's, and the build runs without the version policy."""
    monkeypatch.setattr(torch.version, "cuda", None)
    b = FusedLionBuilder()
    assert b.compatibility() == (False, "this torch is a CPU-only build (torch.version.cuda and torch.version.hip "
                                        "are None)")
    assert b.buildability() == (True, "") and b.cuda_major() == 13 and b.key_inputs()["cuda_major"] == 13
    text, _ = _ninja_file_of_a_failed_build(b, monkeypatch)
    assert "csrc/lion/fused_lion_cuda.cu" in text
    monkeypatch.setenv("CUDA_HOME", str(cuda_env / "missing"))
    monkeypatch.setenv("CXX", REAL_CXX if os.path.isabs(REAL_CXX) else shutil.which(REAL_CXX))
    monkeypatch.setenv("PATH", "/nonexistent")
    assert FusedLionBuilder().buildability() == (False, "nvcc was not found (set CUDA_HOME to the toolkit)")


def test_a_source_of_another_kind_is_refused(cuda_env, monkeypatch):
    class Odd(CUDAOpBuilder):
        NAME = "odd_cuda"
        BUILD_VAR = "ANYACCEL_BUILD_ODD_CUDA"

        def sources(self):
            return ["csrc/adam/fused_adam_sycl.sycl"]

    env = {"CXX": "c++", "NVCC": "nvcc"}
    with pytest.raises(OpBuilderError,
                       match=r"suffix '\.sycl'; the CUDA backend compiles \.cu, \.cpp, \.cc, \.cxx files"):
        Odd().compile_steps(env, "ns", Path("/gen"), Path("/build"))


def test_compatibility_reasons(monkeypatch, cuda_env):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    ok, reason = FusedAdamBuilder().compatibility()
    assert not ok and "no CUDA/ROCm device" in reason
    monkeypatch.setattr(torch.version, "cuda", None)
    ok, reason = FusedAdamBuilder().compatibility()
    assert not ok and "CPU-only" in reason
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert FusedAdamBuilder().compatibility() == (True, "")
    monkeypatch.setenv("CUDA_HOME", str(cuda_env / "missing"))
    monkeypatch.setenv("PATH", "/nonexistent")
    ok, reason = FusedAdamBuilder().compatibility()
    assert not ok and "nvcc was not found" in reason


def test_compatibility_reason_on_cpu_torch(monkeypatch):
    b = FusedAdamBuilder()
    monkeypatch.setattr(b, "toolkit", lambda: None)
    ok, reason = b.compatibility()
    assert not ok and "CPU-only" in reason


# ---- registry, accelerators, report --------------------------------------------------------------------


def test_registry_on_cpu_and_cuda_accelerators():
    from anyaccel.accelerator.cpu import CPU_Accelerator

    for cls_name, op_name, cls in (("FusedAdamBuilder", "fused_adam", FusedAdamBuilder),
                                   ("FusedLionBuilder", "fused_lion", FusedLionBuilder)):
        assert get_builder_class(cls_name, "cuda") is cls and get_builder_class(op_name, "cuda") is cls
        assert get_builder_class(op_name, "mps") is None
        assert cls_name in all_builder_names()
        # on the CPU accelerator DeepSpeed's name is answered by the CPU build (a spec alias; DeepSpeed's
        # FusedAdam/FusedLion on CPU tensors): the same NAME, cache entry and library as CPU{Adam,Lion}Builder
        on_cpu = CPU_Accelerator().create_op_builder(cls_name)
        assert type(on_cpu).__name__ == cls_name and on_cpu.NAME == op_name.replace("fused", "cpu")
        assert get_builder_class(cls_name, "cpu") is type(on_cpu)


def test_cuda_accelerator_creates_the_builders():
    from anyaccel.accelerator.cuda import CUDA_Accelerator

    acc = CUDA_Accelerator()  # constructing it touches no device
    assert isinstance(acc.create_op_builder("FusedAdamBuilder"), FusedAdamBuilder)
    assert acc.get_op_builder("fused_lion") is FusedLionBuilder


def test_report_lists_fused_builders_on_cpu_as_the_cpu_builds(monkeypatch):
    from anyaccel import report
    from anyaccel.accelerator.cpu import CPU_Accelerator

    cpu = CPU_Accelerator()
    monkeypatch.setattr("anyaccel.accelerator.get_accelerator", lambda: cpu)  # also on a GPU machine
    monkeypatch.setattr("anyaccel.op_builder.core.builder.OpBuilder.is_built", lambda self: False)
    rows = {r["op"]: r for r in report._op_rows(build=False)}
    for name in ("FusedAdamBuilder", "FusedLionBuilder"):  # the CPU builds under DeepSpeed's names (aliases)
        assert rows[name]["compatible"] is True and rows[name]["reason"] == ""
