"""CPU (real), MPS (faked torch.mps), tensor-type factories, host streams, and the small abstract core."""

from __future__ import annotations

import random
from unittest import mock

import pytest
import torch

from anyaccel.accelerator import DeepSpeedAccelerator, UnsupportedCompileBackendError
from anyaccel.accelerator.cpu import CPU_Accelerator
from anyaccel.accelerator.mps import MPS_Accelerator
from anyaccel.accelerator.tensor_types import TensorFactory
from anyaccel.testing.conformance import INTERFACE_MEMBERS, run_conformance
from tests.accelerator.plugin_fixtures import CoreOnlyAccelerator, HostPluginAccelerator


def test_cpu_behaviour(monkeypatch):
    acc = CPU_Accelerator()
    assert acc.is_synchronized_device() and acc.use_host_timers() and acc.resolves_data_dependency()
    assert acc.device_name() == acc.device_name(3) == acc.current_device_name() == "cpu"
    rank, size = random.randint(0, 3), random.randint(4, 8)
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(size))
    assert acc.current_device() == rank and acc.device_count() == size
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    monkeypatch.setenv("LOCAL_SIZE", str(size + 1))
    assert acc.device_count() == size + 1
    assert acc.communication_backend_name() == "gloo" and acc.visible_devices_envs() == ["CUDA_VISIBLE_DEVICES"]
    assert acc.memory_allocated() > 0 and acc.max_memory_allocated() >= acc.memory_allocated() - (1 << 22)
    assert 0 < acc.available_memory() <= acc.total_memory()
    t = torch.randn(7)
    assert acc.pin_memory(t) is t and acc.pin_memory(t, make_copy=False, match_shape=False).shape == (7,)
    assert acc.Stream().record_event() is not None and acc.stream(acc.Stream()) is not None
    assert acc.create_graph() is None and torch.bfloat16 in acc.supported_dtypes()


def test_cpu_passes_conformance():
    failures = {k: v for k, v in run_conformance(CPU_Accelerator()).items() if v}
    assert failures == {}


def test_core_only_plugin_gets_working_defaults(fake_module_factory):
    """A plug-in implementing only the abstract core gets every other member, forwarding to its module."""
    module = fake_module_factory("privateuseone", count=3, graph_class=None)
    plugin = CoreOnlyAccelerator()
    plugin._device_type = "privateuseone"
    assert all(hasattr(plugin, m) for m in INTERFACE_MEMBERS)
    assert plugin.device_count() == 3 and plugin.device_name(2) == "privateuseone:2"
    plugin.set_device(2)
    assert plugin.current_device_name() == "privateuseone:2"
    assert plugin.memory_allocated() == module.figures["memory_allocated"]
    assert plugin.total_memory() == module.figures["total_memory"]
    assert plugin.Stream is module.Stream and plugin.create_graph() is None
    with plugin.capture_to_graph(None):
        pass
    assert plugin.visible_devices_envs() == [] and plugin.get_compile_backend() == "inductor"


def test_plugin_subclassing_a_builtin_passes_conformance():
    failures = {k: v for k, v in run_conformance(HostPluginAccelerator()).items() if v}
    assert failures == {}


def test_abstract_core_is_small():
    assert DeepSpeedAccelerator.__abstractmethods__ == frozenset({"is_available", "communication_backend_name"})
    with pytest.raises(TypeError):
        DeepSpeedAccelerator()  # type: ignore[abstract]


def test_conformance_reports_violations():
    class Broken(HostPluginAccelerator):
        def supported_dtypes(self):
            return [torch.half]

    results = run_conformance(Broken())
    assert results["dtypes"] is not None and results["name"] is None


def test_tensor_factory_forms():
    values = [random.uniform(-5, 5) for _ in range(4)]
    f = TensorFactory(torch.float64, "cpu")
    assert f(values).tolist() == pytest.approx(values) and f(values).dtype == torch.float64
    assert f(3).shape == (3,) and f(2, 5).shape == (2, 5) and f(torch.Size([4, 1])).shape == (4, 1)
    assert f().shape == (0,) and f(1.5).item() == 1.5
    src = torch.randn(3)
    assert torch.allclose(f(src), src.double())
    assert isinstance(f(2), f) and not isinstance(torch.randn(2), f)
    assert TensorFactory(torch.half, "cpu")(0).dtype == torch.half
    with pytest.raises(TypeError, match="positional"):
        f([1.0], 2)


def test_set_compile_backend_validates():
    acc = CPU_Accelerator()
    with pytest.raises(UnsupportedCompileBackendError, match="inductor") as info:
        acc.set_compile_backend("no-such-backend")
    assert isinstance(info.value, ValueError)
    acc.set_compile_backend("eager")
    assert acc.get_compile_backend() == "eager"


def test_host_event_times_work():
    acc = CPU_Accelerator()
    start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    with pytest.raises(RuntimeError, match="record"):
        start.elapsed_time(end)
    start.record()
    torch.randn(256, 256) @ torch.randn(256, 256)
    end.record()
    assert start.elapsed_time(end) > 0.0


def test_mps_members(fake_mps):
    figures, synced = fake_mps
    acc = MPS_Accelerator()
    assert MPS_Accelerator.probe().available
    assert acc.device_count() == 1 and acc.current_device() == 0 and acc.current_device_name() == "mps:0"
    acc.set_device(0)
    with pytest.raises(ValueError, match="index 0"):
        acc.set_device(1)
    acc.synchronize()
    assert synced == [True]
    assert acc.memory_allocated() == figures["allocated"] and acc.memory_reserved() == figures["driver"]
    assert acc.total_memory() == figures["recommended"]
    assert acc.available_memory() == figures["recommended"] - figures["driver"]
    peak = figures["allocated"]
    figures["allocated"] = peak // 2
    assert acc.max_memory_allocated() == peak  # sampled peak survives a drop
    acc.reset_peak_memory_stats()
    assert acc.max_memory_allocated() == peak // 2
    assert acc.communication_backend_name() == "gloo" and acc.create_graph() is None
    stream = acc.Stream()
    stream.synchronize()
    assert synced == [True, True]
    with acc.stream(stream) as s:
        assert s is stream


def test_op_builder_lookup_delegates_to_registry(monkeypatch):
    import sys
    import types

    calls = []

    class FakeBuilder:
        pass

    def get_builder_class(name, accelerator_name):
        calls.append((name, accelerator_name))
        return FakeBuilder if name == "CPUAdamBuilder" else None

    fake = types.ModuleType("anyaccel.ops.registry")
    fake.get_builder_class = get_builder_class
    monkeypatch.setitem(sys.modules, "anyaccel.ops.registry", fake)
    if "anyaccel.ops" not in sys.modules:
        monkeypatch.setitem(sys.modules, "anyaccel.ops", types.ModuleType("anyaccel.ops"))
    acc = CPU_Accelerator()
    assert acc.get_op_builder("CPUAdamBuilder") is FakeBuilder
    assert isinstance(acc.create_op_builder("CPUAdamBuilder"), FakeBuilder)
    assert acc.create_op_builder("FusedAdamBuilder") is None
    assert calls == [("CPUAdamBuilder", "cpu"), ("CPUAdamBuilder", "cpu"), ("FusedAdamBuilder", "cpu")]
    assert acc.build_extension().__name__ == "BuildExtension"


def test_cpu_tensor_types_are_torch_classes_so_tensor_type_accepts_them():
    """``x.type(acc.FloatTensor)`` (DeepSpeed/YOLO code) needs torch's legacy class, not a factory object."""
    from anyaccel.accelerator.cpu import CPU_Accelerator

    acc = CPU_Accelerator()
    x = torch.randn(4, dtype=torch.float64)
    assert x.type(acc.FloatTensor).dtype == torch.float32
    assert x.type(acc.HalfTensor).dtype == torch.float16
    assert acc.LongTensor(2, 3).shape == (2, 3) and acc.FloatTensor([1.5]).tolist() == [1.5]


def test_mps_memory_fraction_calls_torch_mps_with_its_own_signature(fake_mps):
    """``torch.mps.set_per_process_memory_fraction`` takes the fraction only (autospec keeps the real signature);
    the interface's ``device_index`` is checked, not passed on."""
    acc = MPS_Accelerator()
    fraction = random.uniform(0.1, 0.9)
    with mock.patch.object(torch.mps, "set_per_process_memory_fraction", autospec=True) as fake:
        acc.set_per_process_memory_fraction(fraction, 0)
        acc.set_per_process_memory_fraction(fraction)
        with pytest.raises(ValueError, match="index 0"):
            acc.set_per_process_memory_fraction(fraction, 1)
    assert fake.call_args_list == [mock.call(fraction), mock.call(fraction)]
