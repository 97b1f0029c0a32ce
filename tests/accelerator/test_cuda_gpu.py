"""The whole interface on a real CUDA (or ROCm) GPU. Skipped without one.

Run on the device machine: ``PYTHONPATH=. python3 -m pytest tests/accelerator -m gpu -v``.
"""

from __future__ import annotations

import random

import pytest
import torch

from anyaccel.accelerator import explain, get_accelerator, reset_accelerator
from anyaccel.accelerator.cuda import CUDA_Accelerator
from anyaccel.testing.conformance import CHECKS

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU"),
]


@pytest.fixture
def acc():
    return CUDA_Accelerator()


def test_selection_picks_cuda():
    reset_accelerator()
    assert get_accelerator()._name == "cuda"
    report = explain()
    assert report.chosen == "cuda" and report.candidates[0].available


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_conformance_on_gpu(acc, check):
    CHECKS[check](acc)


def test_device_apis_and_memory(acc):
    assert acc.current_device_name() == f"cuda:{torch.cuda.current_device()}"
    assert acc.device_count() == torch.cuda.device_count() >= 1
    acc.reset_peak_memory_stats()
    before = acc.memory_allocated()
    n = random.randint(1 << 20, 1 << 22)
    x = torch.empty(n, dtype=torch.float32, device="cuda")
    assert acc.memory_allocated() - before >= 4 * n
    assert acc.max_memory_allocated() >= acc.memory_allocated()
    assert acc.memory_reserved() >= acc.memory_allocated() and acc.memory_cached() == acc.memory_reserved()
    assert acc.memory_stats()["allocated_bytes.all.current"] == acc.memory_allocated()
    assert 0 < acc.available_memory() <= acc.total_memory() == torch.cuda.get_device_properties(0).total_memory
    del x
    acc.empty_cache()
    assert acc.memory_allocated() == before


def test_rng_and_generators(acc):
    seed = random.randrange(1 << 30)
    acc.manual_seed_all(seed)
    a = torch.rand(64, device="cuda")
    acc.manual_seed(seed)
    assert torch.equal(a, torch.rand(64, device="cuda"))
    assert acc.default_generator(0).initial_seed() == seed and acc.initial_seed() == seed
    state = acc.get_rng_state(0)
    b = torch.rand(8, device="cuda")
    acc.set_rng_state(state, 0)
    assert torch.equal(b, torch.rand(8, device="cuda"))


def test_streams_events_and_graph_replay(acc):
    assert acc.Stream is torch.cuda.Stream and acc.Event is torch.cuda.Event
    s = acc.Stream()
    x = torch.randn(1 << 16, device="cuda")
    s.wait_stream(acc.current_stream())
    with acc.stream(s):
        assert acc.current_stream() == s
        y = x * 2
    acc.current_stream().wait_stream(s)
    torch.testing.assert_close(y, x * 2)
    start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    start.record()
    (x @ x) if x.dim() == 2 else x.sum()
    end.record()
    acc.synchronize()
    assert start.elapsed_time(end) >= 0
    assert acc.default_stream() == torch.cuda.default_stream()
    graph = acc.create_graph()
    assert isinstance(graph, torch.cuda.CUDAGraph)
    static_in = torch.randn(256, device="cuda")
    warm = acc.Stream()
    warm.wait_stream(acc.current_stream())
    with acc.stream(warm):
        static_out = static_in.sin() + 1
    acc.current_stream().wait_stream(warm)
    with acc.capture_to_graph(graph):
        static_out = static_in.sin() + 1
    for _ in range(3):
        new = torch.randn(256, device="cuda")
        static_in.copy_(new)
        acc.replay_graph(graph)
        acc.synchronize()
        torch.testing.assert_close(static_out, new.sin() + 1)


def test_tensor_factories_pinning_placement(acc):
    data = [random.random() for _ in range(5)]
    t = acc.FloatTensor(data)
    assert t.is_cuda and t.dtype == torch.float32 and t.tolist() == pytest.approx(data)
    assert acc.LongTensor(2, 3).shape == (2, 3) and acc.LongTensor(2, 3).is_cuda
    assert acc.HalfTensor(0).dtype == torch.float16 and acc.BFloat16Tensor([1.0]).dtype == torch.bfloat16
    assert isinstance(t, acc.FloatTensor) and not isinstance(t.cpu(), acc.FloatTensor)
    host = torch.randn(1000)
    pinned = acc.pin_memory(host)
    assert acc.is_pinned(pinned) and not acc.is_pinned(host) and torch.equal(pinned, host)
    empty = acc.pin_memory(host, make_copy=False, match_shape=False)
    assert acc.is_pinned(empty) and empty.shape == (1000,)
    assert acc.is_pinned(acc.pin_memory(host, 64))  # classic align_bytes form
    assert acc.on_accelerator(t) and not acc.on_accelerator(host)


def test_dtypes_flags_ranges(acc):
    major, _ = torch.cuda.get_device_capability()
    assert acc.is_bf16_supported() == torch.cuda.is_bf16_supported()
    assert acc.is_fp16_supported() == (major >= 7 or torch.version.hip is not None)
    assert acc.supported_dtypes()[0] == torch.float
    assert acc.communication_backend_name() == "nccl"
    assert acc.range_push("anyaccel") is not None
    acc.range_pop()
    assert acc.amp() is torch.cuda.amp
    assert not acc.is_synchronized_device()


def test_deepspeed_019_members_on_gpu(acc):
    """pin_empty/pin_empty_like page-lock, host registration through cudart, NCCL version, graph capture flag."""
    scratch = acc.pin_empty(4, 256, dtype=torch.bfloat16)
    assert scratch.is_pinned() and acc.is_pinned(scratch) and scratch.shape == (4, 256)
    like = acc.pin_empty_like(torch.ones(3, 5, device="cuda"), dtype=torch.float16)
    assert like.is_pinned() and like.device.type == "cpu" and like.dtype == torch.float16
    with pytest.raises(ValueError, match="must be 'cpu'"):
        acc.pin_empty(2, dtype=torch.float, device="cuda")
    assert acc.is_fp64_supported() and acc.pin_memory_alignment() == 1 and acc.supports_nvtx_domain is True
    host = torch.empty(1 << 20, dtype=torch.uint8)  # pageable memory, registered with the CUDA driver
    assert acc.register_host_memory(host.data_ptr(), host.nbytes) is True
    source = torch.randint(0, 255, (1 << 20,), dtype=torch.uint8, device="cuda")
    host.copy_(source, non_blocking=True)
    acc.synchronize()
    assert torch.equal(host, source.cpu())
    acc.unregister_host_memory(host.data_ptr())
    version = acc.communication_backend_version()
    assert isinstance(version, tuple) and version[0] >= 2
    assert acc.is_current_stream_capturing() is False
    graph, seen = acc.create_graph(), []
    static = torch.ones(8, device="cuda")
    side = acc.Stream()
    side.wait_stream(acc.current_stream())
    with acc.stream(side):
        static * 2
    acc.current_stream().wait_stream(side)
    with acc.capture_to_graph(graph):
        seen.append(acc.is_current_stream_capturing())
        static.mul_(2)
    assert seen == [True]
    acc.seed()
    acc.set_per_process_memory_fraction(1.0)
