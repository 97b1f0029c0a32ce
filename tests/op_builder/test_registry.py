"""Registry lookups and the cheap import of the op-builder package."""

from __future__ import annotations

import subprocess
import sys

import pytest

from anyaccel.op_builder import CPUAdamBuilder, OpBuilder, TorchCPUOpBuilder, get_builder_class
from anyaccel.op_builder.core.errors import UnknownOpError
from anyaccel.op_builder.registry import all_builder_names, register_builder


def test_host_op_for_every_accelerator():
    for accel in ("cpu", "cuda", "xpu", "npu", "mps", "my_plugin"):
        assert get_builder_class("CPUAdamBuilder", accel) is CPUAdamBuilder  # DeepSpeed's spelling
        assert get_builder_class("cpu_adam", accel) is CPUAdamBuilder  # the op's NAME, an alias
    assert issubclass(CPUAdamBuilder, TorchCPUOpBuilder) and issubclass(CPUAdamBuilder, OpBuilder)
    assert "CPUAdamBuilder" in all_builder_names() and "cpu_adam" not in all_builder_names()


def test_unknown_op_lists_names():
    with pytest.raises(UnknownOpError, match="CPUAdamBuilder.*cpu_adam") as err:
        get_builder_class("no_such_op", "cpu")
    assert isinstance(err.value, ValueError) and "no_such_op" in str(err.value)


def test_op_missing_on_one_accelerator_is_none():
    class GpuOnlyTestBuilder(CPUAdamBuilder):
        pass

    register_builder("test_gpu_only_op", "cuda", GpuOnlyTestBuilder)
    for name in ("test_gpu_only_op", "GpuOnlyTestBuilder"):
        assert get_builder_class(name, "cpu") is None
        assert get_builder_class(name, "cuda") is GpuOnlyTestBuilder
    with pytest.raises(ValueError, match="override"):
        register_builder("GpuOnlyTestBuilder", "cuda", GpuOnlyTestBuilder)


def test_import_is_cheap():
    code = ("import sys, anyaccel.op_builder as o; o.get_builder_class('cpu_adam', 'cpu'); "
            "bad = [m for m in ('torch.utils.cpp_extension', 'cpuinfo', 'setuptools') if m in sys.modules]; "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_compatibility_reports_missing_compiler(monkeypatch, tmp_path):
    b = CPUAdamBuilder()
    assert b.compatibility() == (True, "") and b.is_compatible()
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CXX", "")
    ok, reason = CPUAdamBuilder().compatibility()
    assert not ok and "compiler" in reason
