"""Every member of the CUDA, XPU and NPU accelerators, against fake torch device modules."""

from __future__ import annotations

import importlib
import random
import sys

import pytest
import torch

from anyaccel.accelerator.cuda import CUDA_Accelerator
from anyaccel.accelerator.errors import UnsupportedOperationError
from anyaccel.accelerator.npu import NPU_Accelerator
from anyaccel.accelerator.xpu import XPU_Accelerator

# (class, device type, graph class, communication backend, visible-devices variables, export prefixes)
DEVICES = {
    "cuda": (CUDA_Accelerator, "CUDAGraph", "nccl", ["CUDA_VISIBLE_DEVICES"], ["NCCL"]),
    "xpu": (XPU_Accelerator, "XPUGraph", "xccl", ["ZE_AFFINITY_MASK"], []),
    "npu": (NPU_Accelerator, "NPUGraph", "hccl", ["ASCEND_RT_VISIBLE_DEVICES"],
            ["ASCEND", "HCCL", "LD_LIBRARY", "PATH"]),
}


@pytest.fixture
def fake_torch_npu(tmp_path, monkeypatch):
    """An installed ``torch_npu`` package (found by find_spec) that registers nothing by itself."""
    (tmp_path / "torch_npu").mkdir()
    (tmp_path / "torch_npu" / "__init__.py").write_text("IMPORTED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("torch_npu", None)


@pytest.fixture(params=sorted(DEVICES))
def device(request, fake_module_factory, fake_torch_npu):
    """(accelerator, fake module, expectations) for each torch-device accelerator."""
    name = request.param
    cls, graph, comm, visible, export = DEVICES[name]
    module = fake_module_factory(name, count=random.randint(2, 8), graph_class=graph)
    return cls(), module, (name, graph, comm, visible, export)


def test_names_and_device_apis(device):
    acc, module, (name, *_rest) = device
    index = random.randrange(module.device_count())
    assert acc._name == name and acc.device_name() == name and acc.device_name(index) == f"{name}:{index}"
    if name != "npu":  # real torch_npu renames the PrivateUse1 backend; the fake does not
        assert acc.device(index) == torch.device(name, index)
    assert acc.is_available() is True and acc.device_count() == module.device_count()
    acc.set_device(index)
    assert acc.current_device() == index and acc.current_device_name() == f"{name}:{index}"
    acc.synchronize()
    acc.synchronize(index)
    assert ("synchronize", ()) in module.calls and ("synchronize", (index,)) in module.calls
    assert not acc.is_synchronized_device() and not acc.use_host_timers()
    assert not acc.resolves_data_dependency() and not acc.handles_memory_backpressure()


def test_rng(device):
    acc, module, _ = device
    seed = random.randrange(1 << 30)
    acc.manual_seed(seed)
    acc.manual_seed_all(seed + 1)
    assert ("manual_seed", (seed,)) in module.calls and ("manual_seed_all", (seed + 1,)) in module.calls
    assert torch.equal(acc.get_rng_state(), module.rng_state) and ("get_rng_state", ()) in module.calls
    acc.get_rng_state(1)
    assert ("get_rng_state", (1,)) in module.calls
    state = torch.randint(0, 255, (8,), dtype=torch.uint8)
    acc.set_rng_state(state, 1)
    assert module.calls[-1][0] == "set_rng_state" and module.calls[-1][1][1] == 1
    assert acc.initial_seed() == module.figures["initial_seed"]
    assert acc.default_generator(1) is module.default_generators[1]
    assert acc.random() is torch.random


def test_streams_events_graphs(device):
    acc, module, (name, graph_class, *_rest) = device
    assert acc.Stream is module.Stream and acc.Event is module.Event
    s = acc.Stream()
    with acc.stream(s) as entered:
        assert entered is s
    assert acc.current_stream(1).args == ("current", 1) and acc.default_stream().args == ("default",)
    graph = acc.create_graph()
    assert type(graph).__name__ == graph_class
    pool = object()
    with acc.capture_to_graph(graph, pool=pool):
        pass
    assert ("graph", (graph, pool, None)) in module.calls
    acc.replay_graph(graph)
    assert ("replay", (graph,)) in module.calls
    assert acc.is_current_stream_capturing() is False


def test_memory(device):
    acc, module, _ = device
    f = module.figures
    acc.empty_cache()
    assert ("empty_cache", ()) in module.calls
    assert acc.memory_allocated() == f["memory_allocated"] and acc.memory_allocated(1) == f["memory_allocated"]
    assert ("memory_allocated", (1,)) in module.calls
    assert acc.max_memory_allocated() == f["max_memory_allocated"]
    assert acc.memory_reserved() == acc.memory_cached() == f["memory_reserved"]
    assert acc.max_memory_reserved() == acc.max_memory_cached() == f["max_memory_reserved"]
    assert acc.total_memory(1) == f["total_memory"] and acc.available_memory() == f["free_memory"]
    assert acc.memory_stats()["allocated_bytes.all.current"] == f["memory_allocated"]
    for reset in (acc.reset_peak_memory_stats, acc.reset_max_memory_allocated, acc.reset_max_memory_cached):
        reset(1)
    assert module.calls.count(("reset_peak_memory_stats", (1,))) == 3


def test_available_memory_fallback_without_mem_get_info(device, monkeypatch):
    acc, module, _ = device
    monkeypatch.delattr(type(module), "mem_get_info")
    f = module.figures
    assert acc.available_memory() == f["total_memory"] - f["memory_reserved"]


def test_missing_runtime_function_is_a_typed_error(device, monkeypatch):
    acc, module, (name, *_rest) = device
    monkeypatch.delattr(type(module), "memory_stats")
    with pytest.raises(UnsupportedOperationError, match=f"memory_stats.*torch.{name}.memory_stats"):
        acc.memory_stats()


def test_dtypes_misc_and_launcher_envs(device):
    acc, module, (name, _graph, comm, visible, export) = device
    assert acc.is_bf16_supported() == module.bf16
    dtypes = acc.supported_dtypes()
    assert dtypes[0] == torch.float and (torch.bfloat16 in dtypes) == module.bf16
    assert acc.communication_backend_name() == comm
    assert acc.visible_devices_envs() == visible and acc.export_envs() == export
    ids = random.sample(range(16), 3)
    env = {"OTHER": "x"}
    acc.set_visible_devices_envs(env, ids)
    assert env == {"OTHER": "x", **{v: ",".join(map(str, ids)) for v in visible}}
    assert acc.range_push("step") == 1 and acc.range_push("s", domain="d", category=2) == 1
    acc.range_pop()
    assert ("range_push", ("step",)) in module.calls and ("range_pop", ()) in module.calls
    ran = []
    acc.lazy_call(lambda: ran.append(1))
    assert ran == [] and len(module.lazy_callbacks) == 1  # queued until the device initialises
    assert acc.amp() is module.amp
    assert acc.op_builder_dir() == "anyaccel.op_builder"
    assert acc.get_compile_backend() == "inductor"


def test_tensor_types_and_placement(device):
    acc, _module, (name, *_rest) = device
    for prop, dtype in (("FloatTensor", torch.float), ("LongTensor", torch.long), ("HalfTensor", torch.half),
                        ("BFloat16Tensor", torch.bfloat16), ("ByteTensor", torch.uint8),
                        ("IntTensor", torch.int), ("DoubleTensor", torch.double)):
        factory = getattr(acc, prop)
        assert factory.dtype == dtype
        if acc._legacy_tensor_module:  # CPU and CUDA: torch's own classes, so x.type(acc.FloatTensor) works
            assert factory is getattr(importlib.import_module(acc._legacy_tensor_module), prop)
        else:
            assert factory.device_type == name
    assert acc.on_accelerator(torch.randn(2)) is False
    assert acc.on_accelerator(torch.empty(2, device="meta")) is False


def test_cuda_rocm_visible_devices_and_fp16(fake_module_factory, monkeypatch):
    module = fake_module_factory("cuda", graph_class="CUDAGraph")
    acc = CUDA_Accelerator()
    monkeypatch.setattr(torch.version, "hip", "6.2.0", raising=False)
    assert acc.visible_devices_envs() == ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"]
    assert acc.is_fp16_supported() is True
    env = {}
    acc.set_visible_devices_envs(env, [3, 1])
    assert env == {"CUDA_VISIBLE_DEVICES": "3,1", "HIP_VISIBLE_DEVICES": "3,1"}
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    for major, expected in ((6, False), (7, True), (9, True)):
        module.capability = (major, 0)
        assert acc.is_fp16_supported() is expected
    module.capability = (6, 1)
    monkeypatch.setenv("DS_ALLOW_DEPRECATED_FP16", "1")
    assert acc.is_fp16_supported() is True


def test_ccl_backend_when_oneccl_installed(tmp_path, monkeypatch, fake_module_factory):
    fake_module_factory("xpu")
    (tmp_path / "oneccl_bindings_for_pytorch").mkdir()
    (tmp_path / "oneccl_bindings_for_pytorch" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert XPU_Accelerator().communication_backend_name() == "ccl"
    from anyaccel.accelerator.cpu import CPU_Accelerator

    assert CPU_Accelerator().communication_backend_name() == "ccl"


def test_npu_requires_torch_npu(monkeypatch):
    monkeypatch.setattr("anyaccel.accelerator.npu.package_installed", lambda name: False)
    with pytest.raises(ImportError, match="torch_npu"):
        NPU_Accelerator()


def test_xpu_imports_ipex_when_installed(tmp_path, monkeypatch, fake_module_factory):
    fake_module_factory("xpu")
    (tmp_path / "intel_extension_for_pytorch").mkdir()
    (tmp_path / "intel_extension_for_pytorch" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        XPU_Accelerator()
        assert "intel_extension_for_pytorch" in sys.modules
    finally:
        sys.modules.pop("intel_extension_for_pytorch", None)
