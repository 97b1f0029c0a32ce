"""Members DeepSpeed 0.19.8 added (fp64, NVTX domains, seeds...; pinned memory is in test_host_memory.py) and the
members only some of DeepSpeed's concrete accelerators have, on the CPU (real) and on faked device modules.
"""

from __future__ import annotations

import importlib.machinery
import random
import sys
import types

import pytest
import torch

from anyaccel.accelerator import UnsupportedOperationError
from anyaccel.accelerator.cpu import CPU_Accelerator
from anyaccel.accelerator.cuda import CUDA_Accelerator
from anyaccel.accelerator.mps import MPS_Accelerator


def test_cpu_misc_members():
    acc = CPU_Accelerator()
    assert acc.is_fp64_supported() is True and acc.is_current_stream_capturing() is False
    assert acc.supports_nvtx_domain is False and acc.communication_backend_version() is None
    acc.manual_seed(5)
    acc.seed()
    assert acc.initial_seed() != 5 or torch.initial_seed() != 5
    rss = acc.get_rss()
    assert rss > 0 and acc.max_memory_allocated() >= rss - (1 << 24)
    assert acc.reset_rss() > 0
    with pytest.raises(UnsupportedOperationError, match="set_per_process_memory_fraction"):
        acc.set_per_process_memory_fraction(0.5)
    assert acc.range_push("x", domain="DeepSpeed", category="c") is None and acc.range_pop(domain="DeepSpeed") is None


def test_mps_follows_deepspeeds_values(fake_mps, monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_macos_or_newer", lambda major, minor: True)
    acc = MPS_Accelerator()
    assert [acc.is_synchronized_device(), acc.use_host_timers(), acc.resolves_data_dependency(),
            acc.handles_memory_backpressure()] == [True] * 4
    assert acc.is_fp64_supported() is False and torch.float64 not in acc.supported_dtypes()
    assert acc.visible_devices_envs() == ["CUDA_VISIBLE_DEVICES"]
    assert acc.Event is torch.mps.Event  # DeepSpeed's; streams stay host stand-ins (torch.mps has none)
    assert acc.Stream.__name__ == "MpsHostStream"
    host = torch.randn(3)
    assert acc.pin_memory(host) is host and acc.is_pinned(host) is True  # unified memory
    assert acc.pin_memory(host, make_copy=False).is_pinned() is False


def test_mps_seed_and_memory_fraction(fake_mps, monkeypatch):
    calls = []
    monkeypatch.setattr(torch.mps, "seed", lambda: calls.append("seed"))
    monkeypatch.setattr(torch.mps, "set_per_process_memory_fraction", lambda f: calls.append(f))
    acc = MPS_Accelerator()
    acc.seed()
    acc.set_per_process_memory_fraction(0.25)
    assert calls == ["seed", 0.25]


def test_cuda_nccl_version_and_stream_capture(fake_module_factory):
    module = fake_module_factory("cuda")
    version = (2, random.randint(18, 30), random.randint(0, 9))
    module.nccl = types.SimpleNamespace(version=lambda: version)
    acc = CUDA_Accelerator()
    assert acc.communication_backend_version() == version
    module.is_current_stream_capturing = lambda: True
    assert acc.is_current_stream_capturing() is True


def test_nvtx_domains_through_the_nvtx_package(fake_module_factory, monkeypatch):
    module = fake_module_factory("cuda")
    events: list = []

    class Domain:
        def __init__(self, name):
            self.name = name

        def push_range(self, message, category=None):
            events.append(("push", self.name, message, category))
            return 7

        def pop_range(self):
            events.append(("pop", self.name))

    nvtx = types.ModuleType("nvtx")
    nvtx.__spec__ = importlib.machinery.ModuleSpec("nvtx", None)
    nvtx.get_domain = Domain  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nvtx", nvtx)
    acc = CUDA_Accelerator()
    assert acc.range_push("step", domain="DeepSpeed", category="zero") == 7
    acc.range_pop(domain="DeepSpeed")
    assert events == [("push", "DeepSpeed", "step", "zero"), ("pop", "DeepSpeed")]
    acc.range_push("plain")  # no domain: torch's NVTX
    assert ("range_push", ("plain",)) in module.calls
    monkeypatch.delitem(sys.modules, "nvtx")
    fresh = CUDA_Accelerator()
    fresh.range_push("no package", domain="DeepSpeed")  # without the nvtx package: torch's NVTX
    assert ("range_push", ("no package",)) in module.calls
