"""The op registry (anyaccel/ops/registry.py) and the builder classes it serves (anyaccel/op_builder/classes.py):
classes derived from the op specs under their builder names, hand-written rows through the one hook,
lookups per accelerator, the dispatcher seeing a replaced row, and the cheap import of the op-builder package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import anyaccel.op_builder as op_builder
from anyaccel.op_builder import CPUAdamBuilder, OpBuilder, TorchCPUOpBuilder
from anyaccel.op_builder.classes import builder_class, spec_builder_class, spec_builds
from anyaccel.op_builder.core.loaded_ops import LOADED_OPS
from anyaccel.op_builder.errors import UnknownOpError
from anyaccel.ops import dispatch, registry
from anyaccel.ops.registry import BuilderRow, all_builder_names, get_builder_class
from anyaccel.spec import SpecError, all_op_specs


def register_builder(name: str, accelerator: str, cls: str | type, override: bool = False) -> None:
    registry.register(BuilderRow(name, accelerator, cls), override=override)


def test_host_op_for_every_accelerator():
    for accel in ("cpu", "cuda", "xpu", "npu", "mps", "my_plugin"):
        assert get_builder_class("CPUAdamBuilder", accel) is CPUAdamBuilder  # DeepSpeed's spelling
        assert get_builder_class("cpu_adam", accel) is CPUAdamBuilder  # the build's NAME, an alias
    assert issubclass(CPUAdamBuilder, TorchCPUOpBuilder) and issubclass(CPUAdamBuilder, OpBuilder)
    assert "CPUAdamBuilder" in all_builder_names() and "cpu_adam" not in all_builder_names()


def test_every_spec_build_becomes_one_class_made_once():
    assert spec_builds() == [(s, b) for s in all_op_specs() for b in s.builds]
    for s, b in spec_builds():
        cls = builder_class(s.family, b.name)
        assert cls is builder_class(s.family, b.name)  # made once
        assert cls.__name__ == b.builder and cls.__module__ == "anyaccel.op_builder.builders"
        assert (cls.NAME, cls.BUILD_VAR, cls.BUILD, cls.SPEC.family) == (b.name, b.build_var, b, s.family)
        assert b.builder in all_builder_names()
        for acc in b.accelerators:
            assert get_builder_class(b.builder, "cpu" if acc == "*" else acc) is cls
    with pytest.raises(SpecError, match="has no build 'nope'"):
        builder_class("adam", "nope")
    with pytest.raises(SpecError, match="unknown op family"):
        builder_class("nope", "cpu_adam")


def test_package_attributes_are_the_builders():
    assert op_builder.CPUAdamBuilder is builder_class("adam", "cpu_adam")
    assert op_builder.FusedAdamBuilder is builder_class("adam", "fused_adam")  # the CUDA row, else the host one
    assert spec_builder_class("FusedLionBuilder") is builder_class("lion", "fused_lion")
    assert spec_builder_class("fused_lion_sycl") is builder_class("lion", "fused_lion")  # an alias of the name
    assert spec_builder_class("NoSuchBuilder") is None
    assert {"OpBuilder", "CPUAdamBuilder", "FusedLionBuilder", "builder_class"} <= set(dir(op_builder))
    with pytest.raises(AttributeError, match="NoSuchBuilder"):
        op_builder.NoSuchBuilder  # noqa: B018
    with pytest.raises(AttributeError, match="nothing_here"):
        op_builder.nothing_here  # noqa: B018


def test_unknown_op_lists_names():
    with pytest.raises(UnknownOpError, match="CPUAdamBuilder.*cpu_adam") as err:
        get_builder_class("no_such_op", "cpu")
    assert isinstance(err.value, ValueError) and "no_such_op" in str(err.value)


@pytest.fixture
def fresh_registry(monkeypatch):
    """Hand-written rows registered by a test stay in that test."""
    monkeypatch.setattr(registry, "_rows", {k: dict(v) for k, v in registry._rows.items()})
    monkeypatch.setattr(registry, "_row_aliases", dict(registry._row_aliases))
    yield
    LOADED_OPS.clear()  # the rows are restored: nothing loaded through the test's rows survives it


def test_op_missing_on_one_accelerator_is_none(fresh_registry):
    class GpuOnlyTestBuilder(CPUAdamBuilder):
        pass

    register_builder("test_gpu_only_op", "cuda", GpuOnlyTestBuilder)
    for name in ("test_gpu_only_op", "GpuOnlyTestBuilder"):
        assert get_builder_class(name, "cpu") is None
        assert get_builder_class(name, "cuda") is GpuOnlyTestBuilder
    with pytest.raises(ValueError, match="override"):
        register_builder("GpuOnlyTestBuilder", "cuda", GpuOnlyTestBuilder)
    register_builder("GpuOnlyTestBuilder", "cuda", CPUAdamBuilder, override=True)
    assert get_builder_class("GpuOnlyTestBuilder", "cuda") is CPUAdamBuilder
    assert "GpuOnlyTestBuilder" in all_builder_names()


def test_a_row_registered_by_import_path(fresh_registry, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "op_builder"))  # toy_builder.py
    register_builder("test_lazy_op", "*", "toy_builder:ToyBuilder")
    from toy_builder import ToyBuilder

    assert get_builder_class("ToyBuilder", "cuda") is ToyBuilder
    assert get_builder_class("test_lazy_op", "x") is ToyBuilder


def test_a_spec_row_is_replaced_only_with_override(fresh_registry):
    class FusedAdamBuilder(OpBuilder):  # a plug-in's class of the same DeepSpeed name
        NAME = "plugin_fused_adam"

    with pytest.raises(ValueError, match="already has a builder for 'cuda'"):
        register_builder("FusedAdamBuilder", "cuda", FusedAdamBuilder)
    register_builder("FusedAdamBuilder", "cuda", FusedAdamBuilder, override=True)
    assert get_builder_class("FusedAdamBuilder", "cuda") is FusedAdamBuilder
    assert get_builder_class("FusedAdamBuilder", "xpu") is builder_class("adam", "fused_adam_sycl")


def test_a_plugin_row_under_a_deepspeed_name_leaves_the_other_accelerators_alone(fresh_registry):
    class MyFusedAdamBuilder(OpBuilder):
        NAME = "my_fused_adam"

    register_builder("FusedAdamBuilder", "my_accel", MyFusedAdamBuilder)
    assert get_builder_class("FusedAdamBuilder", "my_accel") is MyFusedAdamBuilder
    assert get_builder_class("FusedAdamBuilder", "cuda") is builder_class("adam", "fused_adam")
    with pytest.raises(ValueError, match="override"):
        register_builder("FusedAdamBuilder", "cuda", MyFusedAdamBuilder)


def test_a_replaced_build_row_is_what_the_dispatcher_loads(fresh_registry):
    """The builder view and the implementation view are one registry: replacing the CPU Adam row changes what
    ``create_op_builder`` returns and what ``FusedAdam``/``CPUAdam`` load, together."""
    loaded = object()

    class MyCPUAdamBuilder(CPUAdamBuilder):
        def load(self, verbose: bool = False) -> object:
            return loaded

    register_builder("CPUAdamBuilder", "cpu", MyCPUAdamBuilder, override=True)
    assert get_builder_class("CPUAdamBuilder", "cpu") is MyCPUAdamBuilder
    assert dispatch.load("adam", "cpu", "cpu") is loaded


def test_one_hook_for_implementations_too(fresh_registry, monkeypatch):
    monkeypatch.setattr(registry, "_implementations", {k: dict(v) for k, v in registry._implementations.items()})
    impl = registry.RegisteredImplementation("adam", "mine", 99, ("cpu",), lambda: (True, ""), lambda: "mine")
    registry.register(impl)
    with pytest.raises(ValueError, match="override=True"):
        registry.register(impl)
    assert dispatch.choose("adam", "cpu").name == "mine" and dispatch.load("adam", "cpu") == "mine"


def test_import_is_cheap():
    code = ("import sys, anyaccel.ops.registry as r; r.get_builder_class('cpu_adam', 'cpu'); "
            "bad = [m for m in ('torch.utils.cpp_extension', 'cpuinfo', 'setuptools', 'triton') if m in sys.modules]; "
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
    assert not CPUAdamBuilder().is_compatible(verbose=True)


#: The main job: a builder by its native name, loaded, then one step of the optimizer over its op.
_MAIN_JOB = """
import json, sys, torch
from anyaccel import get_accelerator
from anyaccel.ops.adam import CPUAdam
get_accelerator().create_op_builder("CPUAdamBuilder").load()
model = torch.nn.Linear(7, 3)
opt = CPUAdam(model.parameters(), lr=1e-3)
model(torch.randn(2, 7)).sum().backward()
before = model.weight.detach().clone()
opt.step()
assert not torch.equal(before, model.weight)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("anyaccel"))))
"""


@pytest.mark.slow
def test_native_path_imports_no_integration(cpu_adam_module: Any) -> None:
    """create_op_builder("CPUAdamBuilder").load() and a CPUAdam step read no integration (DeepSpeed's builder
    aliases and module ABI are asked for only by DeepSpeed's names), in a fresh process on the warm cache."""
    out = subprocess.run([sys.executable, "-c", _MAIN_JOB], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    modules = json.loads(out.stdout.strip().splitlines()[-1])
    assert "anyaccel.op_builder.core.loading" in modules  # the job ran the load path
    assert [m for m in modules if m.startswith("anyaccel.integrations")] == []


def test_deepspeed_names_still_resolve_after_native_lookups() -> None:
    """A native lookup first, then DeepSpeed's alias on the CPU: the alias is read when asked for."""
    assert get_builder_class("CPUAdamBuilder", "cpu") is CPUAdamBuilder
    alias = get_builder_class("FusedAdamBuilder", "cpu")
    assert alias is not None and alias.__name__ == "FusedAdamBuilder" and alias.BUILD is CPUAdamBuilder.BUILD
    assert alias.__mro__[1:] == CPUAdamBuilder.__mro__[1:]  # the same build on the same base, its own class
    assert get_builder_class("FusedAdamBuilder", "cuda") is builder_class("adam", "fused_adam")
