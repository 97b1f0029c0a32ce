"""Selection: set_accelerator > env override > probes by priority > CPU; reasons; strict mode; plug-ins."""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import textwrap

import pytest
import torch

import anyaccel
from anyaccel.accelerator import (
    AcceleratorUnavailableError,
    InvalidAcceleratorError,
    UnknownAcceleratorError,
    explain,
    get_accelerator,
    real_accelerator,
    register_accelerator,
    set_accelerator,
    unregister_accelerator,
)
from tests.accelerator.plugin_fixtures import CoreOnlyAccelerator, HostPluginAccelerator

BUILTINS = ["cuda", "xpu", "npu", "mps", "cpu"]


@pytest.fixture
def no_real_devices(monkeypatch):
    """Make every built-in GPU probe see a CPU-only torch, whatever machine runs the test."""
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.xpu, "_is_compiled", lambda: False, raising=False)
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: False)
    monkeypatch.setattr("anyaccel.accelerator.npu.package_installed", lambda name: False)
    monkeypatch.setattr("anyaccel.accelerator.xpu.package_installed", lambda name: False)


@pytest.fixture
def fake_cuda(monkeypatch, fake_module_factory, no_real_devices):
    """A CUDA build of torch whose device count follows CUDA_VISIBLE_DEVICES at call time."""
    module = fake_module_factory("cuda", graph_class="CUDAGraph")
    monkeypatch.setattr(torch.version, "cuda", "12.4")

    def count() -> int:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return 4
        return len([v for v in visible.split(",") if v.strip()])

    monkeypatch.setattr(module, "device_count", count)
    return module


def test_cpu_fallback_with_reasons(no_real_devices):
    acc = get_accelerator()
    assert acc._name == "cpu" and get_accelerator() is acc
    report = explain()
    assert report.chosen == "cpu" and report.source == "probe" and "fallback" in report.reason
    assert [c.name for c in report.candidates] == BUILTINS
    by_name = {c.name: c for c in report.candidates}
    assert "no CUDA or ROCm support" in by_name["cuda"].reason and not by_name["cuda"].available
    assert by_name["npu"].reason == "torch_npu is not installed"
    assert by_name["cpu"].available and all(c.source == "builtin" for c in report.candidates)
    assert json.loads(json.dumps(report.to_dict()))["chosen"] == "cpu"


def test_no_absent_vendor_package_imported():
    get_accelerator()
    explain()
    for vendor in ("torch_npu", "intel_extension_for_pytorch", "oneccl_bindings_for_pytorch"):
        assert vendor not in sys.modules


def test_gpu_chosen_when_present_and_lower_candidates_not_probed(fake_cuda):
    acc = get_accelerator()
    assert acc._name == "cuda" and acc.communication_backend_name() == "nccl"
    report = explain(probe_all=False)
    assert report.chosen == "cuda" and "4 CUDA 12.4 device(s)" in report.reason
    assert [c.probed for c in report.candidates] == [True, False, False, False, False]
    assert all(c.probed for c in explain().candidates)


def test_detection_is_lazy_and_honours_launcher_variables(fake_cuda, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a launcher hides every GPU after import
    assert get_accelerator()._name == "cpu"
    anyaccel.accelerator.reset_accelerator()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    acc = get_accelerator()
    assert acc._name == "cuda" and acc.device_count() == 2


def test_unusable_stack_warned_once_and_strict_raises(fake_cuda, monkeypatch, caplog):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with caplog.at_level(logging.WARNING, logger="anyaccel.accelerator.selection"):
        assert get_accelerator()._name == "cpu"
        explain()
        explain()
    warnings = [r for r in caplog.records if "installed but unusable" in r.getMessage()]
    assert len(warnings) == 1 and "sees no GPU" in warnings[0].getMessage()
    anyaccel.accelerator.reset_accelerator()
    monkeypatch.setenv("ANYACCEL_STRICT", "1")
    with pytest.raises(AcceleratorUnavailableError, match="ANYACCEL_STRICT=1.*sees no GPU"):
        get_accelerator()


@pytest.mark.parametrize("env", ["ANYACCEL_ACCELERATOR", "DS_ACCELERATOR"])
def test_override_unknown_name_lists_valid_names(env, monkeypatch):
    bogus = f"warp{random.randrange(1000)}"
    monkeypatch.setenv(env, bogus)
    with pytest.raises(UnknownAcceleratorError) as info:
        get_accelerator()
    message = str(info.value)
    assert isinstance(info.value, ValueError) and bogus in message and env in message
    assert all(name in message for name in BUILTINS)


def test_override_unavailable_names_the_reason(no_real_devices, monkeypatch):
    monkeypatch.setenv("ANYACCEL_ACCELERATOR", "cuda")
    with pytest.raises(AcceleratorUnavailableError, match="no CUDA or ROCm support"):
        get_accelerator()


def test_override_chooses_and_anyaccel_variable_wins(fake_cuda, monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    monkeypatch.setenv("ANYACCEL_ACCELERATOR", "CPU")
    assert get_accelerator()._name == "cpu"
    report = explain()
    assert report.source == "env" and report.override_env == "ANYACCEL_ACCELERATOR"
    anyaccel.accelerator.reset_accelerator()
    monkeypatch.delenv("ANYACCEL_ACCELERATOR")
    assert get_accelerator()._name == "cuda" and explain().override_env == "DS_ACCELERATOR"


def test_npu_probe_imports_installed_torch_npu(tmp_path, monkeypatch, fake_module_factory, no_real_devices):
    monkeypatch.undo()  # keep the other stacks absent but let find_spec see the fake torch_npu
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: False)
    package = tmp_path / "torch_npu"
    package.mkdir()
    count = random.randint(1, 8)
    (package / "__init__.py").write_text(textwrap.dedent(f"""
        import torch
        from tests.accelerator.conftest import FakeDeviceModule
        torch.npu = FakeDeviceModule("npu", count={count})
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(torch, "npu", None, raising=False)
    try:
        acc = get_accelerator()
        assert acc._name == "npu" and acc.device_count() == count and acc.communication_backend_name() == "hccl"
    finally:
        sys.modules.pop("torch_npu", None)


def test_set_accelerator_validates():
    for bad in (42, "cuda", object()):
        with pytest.raises(InvalidAcceleratorError, match="not a usable accelerator") as info:
            set_accelerator(bad)
        assert isinstance(info.value, TypeError)
    with pytest.raises(InvalidAcceleratorError, match=r"set_accelerator\(CoreOnlyAccelerator\(\)\)"):
        set_accelerator(CoreOnlyAccelerator)
    nameless = CoreOnlyAccelerator()
    nameless._name = ""
    with pytest.raises(InvalidAcceleratorError, match="_name"):
        set_accelerator(nameless)


def test_set_accelerator_accepts_plugin_without_super_init():
    plugin = CoreOnlyAccelerator()
    real_accelerator.set_accelerator(plugin)  # DeepSpeed plug-ins install themselves through this path
    assert anyaccel.get_accelerator() is plugin and real_accelerator.get_accelerator() is plugin
    report = explain()
    assert report.chosen == "coreonly" and report.source == "set_accelerator"
    assert report.candidates[0].source == "set_accelerator"
    assert plugin.current_device_name() == "cpu:0" and plugin.device_count() == 1
    assert real_accelerator.is_current_accelerator_supported() is False


def test_registered_accelerator_priority(no_real_devices):
    register_accelerator("hostplugin", HostPluginAccelerator, priority=900)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_accelerator("hostplugin", HostPluginAccelerator)
        with pytest.raises(ValueError, match="already registered"):
            register_accelerator("cuda", HostPluginAccelerator)
        acc = get_accelerator()
        assert acc._name == "hostplugin"
        assert explain().candidates[0].source == "registered"
    finally:
        unregister_accelerator("hostplugin")


def _write_distribution(root, name: str, entry_points: str, module_source: str) -> None:
    (root / f"{name}.py").write_text(module_source)
    info = root / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[anyaccel.accelerators]\n{entry_points}\n")


def test_entry_point_plugin_discovered_and_chosen(tmp_path, monkeypatch, no_real_devices):
    _write_distribution(
        tmp_path, "fakevendor_accel", "fakevendor = fakevendor_accel:FakeVendorAccelerator",
        textwrap.dedent("""
            from tests.accelerator.plugin_fixtures import CoreOnlyAccelerator

            class FakeVendorAccelerator(CoreOnlyAccelerator):
                accelerator_priority = 250
                def __init__(self):
                    self._name = "fakevendor"
                    self._device_type = "cpu"
                    self._communication_backend_name = "gloo"
        """),
    )
    _write_distribution(tmp_path, "brokenvendor_accel", "brokenvendor = brokenvendor_accel:Missing", "")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        acc = get_accelerator()
        assert acc._name == "fakevendor"
        report = explain()
        names = [c.name for c in report.candidates]
        assert names.index("xpu") < names.index("fakevendor") < names.index("npu")  # priority 250
        by_name = {c.name: c for c in report.candidates}
        assert by_name["fakevendor"].source == "entry-point" and by_name["fakevendor"].priority == 250
        assert not by_name["brokenvendor"].available and "probe failed" in by_name["brokenvendor"].reason
        anyaccel.accelerator.reset_accelerator()
        monkeypatch.setenv("ANYACCEL_ACCELERATOR", "fakevendor")
        assert get_accelerator()._name == "fakevendor"
    finally:
        for module in ("fakevendor_accel", "brokenvendor_accel"):
            sys.modules.pop(module, None)
