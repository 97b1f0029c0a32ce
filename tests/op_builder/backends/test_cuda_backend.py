"""CUDAOpBuilder on the core OpBuilder, without a GPU: cache key, toolkit policy, compile call, registry.

A fake ``nvcc`` (a shell script under a temporary ``CUDA_HOME``) stands for the toolkit and torch's CUDA
version is patched, so the whole load path runs up to the compiler, whose call is captured.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from anyaccel.op_builder.core import manifest as mf
from anyaccel.op_builder.core.builder import OpBuilder
from anyaccel.op_builder.backends.cuda import CUDAOpBuilder, GPUArchError
from anyaccel.op_builder.core.errors import BuildError
from anyaccel.op_builder.fused_adam import FusedAdamBuilder
from anyaccel.op_builder.fused_lion import FusedLionBuilder
from anyaccel.op_builder.registry import all_builder_names, get_builder_class

from opb_helpers import make_wrapper


def _fake_toolkit(root: Path, release: str) -> Path:
    """A CUDA_HOME whose bin/nvcc prints ``release <release>`` like the real one."""
    (root / "bin").mkdir(parents=True, exist_ok=True)
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


def test_cuda_builders_are_core_op_builders(cuda_env):
    for cls in (FusedAdamBuilder, FusedLionBuilder):
        b = cls()
        assert isinstance(b, OpBuilder) and isinstance(b, CUDAOpBuilder)
        inputs = b.key_inputs()
        assert inputs["backend"] == "cuda" and inputs["gpu_arch_list"] == ["9.0"]
        assert inputs["torch_cuda"] == "13.0" and inputs["gpu_toolkit"] == "cuda"
        assert inputs["device_compiler"]["path"] == str(cuda_env / "bin" / "nvcc")
        assert any(f.endswith(".cuh") for f in inputs["files"]), "the CUDA headers are part of the key"
        assert "-gencode=arch=compute_90,code=sm_90" in inputs["nvcc_args"]
        assert "device_compiler" in cls.BUILD_HOST_FIELDS and "gpu_arch_list" not in cls.BUILD_HOST_FIELDS
        assert b.namespace(_key(b)).startswith(f"anyaccel_{cls.NAME}_")


def test_key_changes_with_arch_list_toolkit_and_torch_cuda(cuda_env, monkeypatch, tmp_path):
    base = _key(FusedAdamBuilder())
    assert _key(FusedAdamBuilder()) == base  # stable
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    assert _key(FusedAdamBuilder()) != base
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0+PTX")
    ptx = _key(FusedAdamBuilder())
    assert ptx != base
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    other = _fake_toolkit(tmp_path / "cuda2", "13.0")
    (other / "bin" / "nvcc").write_text((other / "bin" / "nvcc").read_text() + "# another build\n")
    monkeypatch.setenv("CUDA_HOME", str(other))
    assert _key(FusedAdamBuilder()) != base  # another nvcc file
    monkeypatch.setenv("CUDA_HOME", str(cuda_env))
    monkeypatch.setattr(torch.version, "cuda", "13.1")
    assert _key(FusedAdamBuilder()) != base
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
    assert env["CUDA_HOME"] == str(old) and env["TORCH_CUDA_ARCH_LIST"] == "9.0"
    assert env["PATH"].split(os.pathsep)[0] == str(old / "bin")
    assert os.environ["CUDA_HOME"] == str(old) and "MAX_JOBS" not in os.environ  # preflight changes nothing


def test_load_compiles_with_gencode_and_namespace_and_restores_env(cuda_env, monkeypatch):
    seen = {}

    def fake_load(**kwargs):
        seen.update(kwargs)
        seen["env_arch"] = os.environ.get("TORCH_CUDA_ARCH_LIST")
        seen["env_cuda_home"] = os.environ.get("CUDA_HOME")
        raise RuntimeError("Error building extension\nfused_adam_cuda.cu(1): error: identifier \"boom\" is undefined")

    monkeypatch.setattr("torch.utils.cpp_extension.load", fake_load)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a,8.0")
    monkeypatch.setenv("CUDA_HOME", str(cuda_env))
    b = FusedAdamBuilder()
    ns = b.namespace(_key(b))
    with pytest.raises(BuildError) as err:
        b.load()
    assert err.value.code == "compile_error" and "boom" in str(err.value)
    macro = f"-DANYACCEL_OP_NAMESPACE={ns}"
    assert macro in seen["extra_cuda_cflags"] and macro in seen["extra_cflags"]
    assert "-gencode=arch=compute_90a,code=sm_90a" in seen["extra_cuda_cflags"]
    assert seen["with_cuda"] is True and seen["sources"][0].endswith("adam/fused_adam_cuda.cu")
    assert seen["env_arch"] == "8.0;9.0a"  # the key's list, set only while compiling
    assert seen["env_cuda_home"] == str(cuda_env)
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "9.0a,8.0"  # restored exactly


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


def test_registry_on_cpu_and_cuda_accelerators():
    from anyaccel.accelerator.cpu import CPU_Accelerator

    for cls_name, op_name, cls in (("FusedAdamBuilder", "fused_adam", FusedAdamBuilder),
                                   ("FusedLionBuilder", "fused_lion", FusedLionBuilder)):
        assert get_builder_class(cls_name, "cuda") is cls and get_builder_class(op_name, "cuda") is cls
        assert get_builder_class(cls_name, "cpu") is None and get_builder_class(op_name, "mps") is None
        assert cls_name in all_builder_names()
        assert CPU_Accelerator().create_op_builder(cls_name) is None  # DeepSpeed's contract on CPU


def test_cuda_accelerator_creates_the_builders():
    from anyaccel.accelerator.cuda import CUDA_Accelerator

    acc = CUDA_Accelerator()  # constructing it touches no device
    assert isinstance(acc.create_op_builder("FusedAdamBuilder"), FusedAdamBuilder)
    assert acc.get_op_builder("fused_lion") is FusedLionBuilder


def test_report_lists_gpu_ops_incompatible_on_cpu(monkeypatch):
    from anyaccel import report
    from anyaccel.accelerator.cpu import CPU_Accelerator

    cpu = CPU_Accelerator()
    monkeypatch.setattr("anyaccel.accelerator.get_accelerator", lambda: cpu)  # also on a GPU machine
    monkeypatch.setattr("anyaccel.op_builder.core.builder.OpBuilder.is_built", lambda self: False)
    rows = {r["op"]: r for r in report._op_rows(build=False)}
    for name in ("FusedAdamBuilder", "FusedLionBuilder"):
        assert rows[name]["compatible"] is False and "cpu" in rows[name]["reason"]
