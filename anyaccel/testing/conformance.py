"""Conformance checks for an accelerator: does it honour DeepSpeed's interface as callers use it?

Each check is a function ``check(accelerator) -> None`` that raises ``AssertionError`` (or the member's
own exception) on a violation. Run them on a machine where the accelerator's device is present:

    from anyaccel.testing.conformance import run_conformance
    failures = {name: err for name, err in run_conformance(MyAccelerator()).items() if err}

or subclass `anyaccel.testing.pytest_conformance.AcceleratorConformance` in a pytest file. The
member list is that of DeepSpeed's ``accelerator/abstract_accelerator.py`` (v0.9 to v0.19); the behaviours
checked are the ones DeepSpeed's own callers rely on (``docs/plugins.md``, "Conformance suite").
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

import torch

logger = logging.getLogger(__name__)

__all__ = ["INTERFACE_MEMBERS", "CHECKS", "run_conformance"]

#: Every member of DeepSpeed's accelerator interface (plus ``amp``, still called by older clients).
INTERFACE_MEMBERS = (
    "is_synchronized_device", "use_host_timers", "resolves_data_dependency", "handles_memory_backpressure",
    "device_name", "device", "set_device", "current_device", "current_device_name", "device_count",
    "synchronize", "random", "set_rng_state", "get_rng_state", "manual_seed", "manual_seed_all",
    "initial_seed", "default_generator", "Stream", "stream", "current_stream", "default_stream", "Event",
    "empty_cache", "memory_allocated", "max_memory_allocated", "reset_max_memory_allocated", "memory_cached",
    "max_memory_cached", "reset_max_memory_cached", "memory_stats", "reset_peak_memory_stats",
    "memory_reserved", "max_memory_reserved", "total_memory", "available_memory", "is_bf16_supported",
    "is_fp16_supported", "supported_dtypes", "is_available", "range_push", "range_pop", "lazy_call",
    "communication_backend_name", "is_triton_supported", "prefer_triton_grouped_mm", "create_graph",
    "capture_to_graph", "replay_graph", "BFloat16Tensor", "ByteTensor", "DoubleTensor", "FloatTensor",
    "HalfTensor", "IntTensor", "LongTensor", "_torch_pin_memory", "_torch_is_pinned", "pin_memory",
    "is_pinned", "unpin_memory", "on_accelerator", "op_builder_dir", "create_op_builder", "get_op_builder",
    "build_extension", "export_envs", "visible_devices_envs", "set_visible_devices_envs",
    "get_compile_backend", "set_compile_backend", "amp",
    # added by DeepSpeed 0.19.8 (and members some of its concrete accelerators have)
    "is_fp64_supported", "is_current_stream_capturing", "pin_empty", "pin_empty_like", "register_host_memory",
    "unregister_host_memory", "pin_memory_alignment", "supports_nvtx_domain", "_torch_empty_pinned",
    "seed", "set_per_process_memory_fraction", "communication_backend_version",
)


def check_members_present(acc: Any) -> None:
    """Every interface member exists."""
    missing = [m for m in INTERFACE_MEMBERS if not hasattr(type(acc), m) and not hasattr(acc, m)]
    assert not missing, f"missing interface members: {missing}"


def check_name(acc: Any) -> None:
    """``_name`` is a non-empty string; ``device_name()`` is a torch device type."""
    assert isinstance(acc._name, str) and acc._name, f"_name is {acc._name!r}"
    base = acc.device_name()
    assert isinstance(base, str) and base
    torch.device(base)  # raises for a device type torch does not know
    assert acc.device_name(0) in (base, f"{base}:0"), acc.device_name(0)


def check_device_apis(acc: Any) -> None:
    """Availability, count, current device and its name agree."""
    assert acc.is_available() is True, "run the conformance suite where the device is present"
    count = acc.device_count()
    assert isinstance(count, int) and count >= 1, count
    current = acc.current_device()
    assert isinstance(current, int) and 0 <= current < max(count, current + 1), current
    assert acc.current_device_name().startswith(acc.device_name()), acc.current_device_name()
    acc.set_device(current)
    assert acc.current_device() == current
    assert isinstance(acc.device(current), torch.device)
    acc.synchronize()


def check_flags(acc: Any) -> None:
    """The four device-behaviour flags are bools."""
    for flag in ("is_synchronized_device", "use_host_timers", "resolves_data_dependency",
                 "handles_memory_backpressure"):
        assert isinstance(getattr(acc, flag)(), bool), flag


def check_communication_backend(acc: Any) -> None:
    """The communication backend is a non-empty string."""
    name = acc.communication_backend_name()
    assert isinstance(name, str) and name, name


def check_rng(acc: Any) -> None:
    """Re-seeding and restoring the generator state reproduce random draws on the device."""
    device = acc.current_device_name()
    acc.manual_seed(1234)
    assert acc.initial_seed() == 1234
    state = acc.get_rng_state()
    assert isinstance(state, torch.Tensor)
    first = torch.rand(16, device=device)
    acc.set_rng_state(state)
    second = torch.rand(16, device=device)
    assert torch.equal(first, second), "set_rng_state did not restore the generator"
    acc.manual_seed_all(99)
    assert isinstance(acc.default_generator(acc.current_device()), torch.Generator)
    assert acc.random() is torch.random


def check_streams_and_events(acc: Any) -> None:
    """``Stream``/``Event`` are classes; streams work as contexts; events record and time."""
    assert isinstance(acc.Stream, type) and isinstance(acc.Event, type)
    stream = acc.Stream()
    with acc.stream(stream):
        x = torch.ones(8, device=acc.current_device_name()) * 2
    stream.synchronize()
    assert float(x.sum()) == 16.0
    assert acc.current_stream() is not None and acc.default_stream() is not None
    start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    start.record()
    torch.ones(64, device=acc.current_device_name()).sum()
    end.record()
    end.synchronize()
    assert end.query() is True
    assert start.elapsed_time(end) >= 0.0


def check_memory(acc: Any) -> None:
    """Memory figures are non-negative ints in bytes with peaks no smaller than current values."""
    acc.empty_cache()
    acc.reset_peak_memory_stats()
    keep = torch.empty(1 << 20, dtype=torch.uint8, device=acc.current_device_name())
    for name in ("memory_allocated", "memory_reserved", "memory_cached", "total_memory", "available_memory"):
        value = getattr(acc, name)()
        assert isinstance(value, int) and value >= 0, (name, value)
    assert acc.max_memory_allocated() >= acc.memory_allocated() - (1 << 20)
    assert acc.max_memory_reserved() >= 0 and acc.max_memory_cached() >= 0
    assert acc.available_memory() <= acc.total_memory()
    assert isinstance(acc.memory_stats(), dict)
    acc.reset_max_memory_allocated()
    acc.reset_max_memory_cached()
    del keep


def check_dtypes(acc: Any) -> None:
    """``supported_dtypes`` agrees with the fp16/bf16 flags and always contains float32."""
    dtypes = acc.supported_dtypes()
    assert torch.float in dtypes
    assert (torch.half in dtypes) == acc.is_fp16_supported()
    assert (torch.bfloat16 in dtypes) == acc.is_bf16_supported()


def check_tensor_types(acc: Any) -> None:
    """Tensor-type factories accept data and the legacy size form and land on the device."""
    device_type = acc.device_name()
    data = acc.FloatTensor([1.5, -2.0])
    assert data.dtype == torch.float32 and data.device.type == device_type and data.tolist() == [1.5, -2.0]
    assert tuple(acc.FloatTensor(3).shape) == (3,)
    assert tuple(acc.LongTensor(2, 3).shape) == (2, 3)
    assert acc.HalfTensor(0).dtype == torch.float16
    expected = {"BFloat16Tensor": torch.bfloat16, "ByteTensor": torch.uint8, "DoubleTensor": torch.float64,
                "FloatTensor": torch.float32, "HalfTensor": torch.float16, "IntTensor": torch.int32,
                "LongTensor": torch.int64}
    for name, dtype in expected.items():
        assert getattr(acc, name)([1]).dtype == dtype, name


def check_placement_and_pinning(acc: Any) -> None:
    """``on_accelerator`` and pinned-memory helpers behave."""
    on_device = torch.ones(2, device=acc.current_device_name())
    assert acc.on_accelerator(on_device) is True
    if acc.device_name() != "cpu":
        assert acc.on_accelerator(torch.ones(2)) is False
    host = torch.randn(5)
    pinned = acc.pin_memory(host)
    assert torch.equal(pinned, host)
    assert isinstance(acc.is_pinned(pinned), bool)
    assert acc.pin_memory(host, make_copy=False).shape == host.shape
    assert torch.equal(acc.pin_memory(host, 64), host)  # classic align_bytes form
    acc.unpin_memory(pinned)


def check_host_memory(acc: Any) -> None:
    """DeepSpeed 0.19.8's pinned scratch buffers, fp64 flag and host-registration members behave."""
    empty = acc.pin_empty(3, 4, dtype=torch.float16)
    assert empty.shape == (3, 4) and empty.dtype == torch.float16 and empty.device.type == "cpu"
    assert acc.pin_empty((5,), dtype=torch.int32).shape == (5,)
    like = acc.pin_empty_like(torch.ones(2, 3, device=acc.current_device_name()), dtype=torch.bfloat16)
    assert like.shape == (2, 3) and like.dtype == torch.bfloat16 and like.device.type == "cpu"
    for refused in ({"device": "meta"}, {"device": "not-a-device"}):
        try:
            acc.pin_empty(2, dtype=torch.float, **refused)
        except ValueError:
            continue
        raise AssertionError(f"pin_empty({refused}) must raise ValueError: pinned memory is host memory")
    alignment = acc.pin_memory_alignment()
    assert isinstance(alignment, int) and alignment >= 1 and alignment & (alignment - 1) == 0, alignment
    assert isinstance(acc.is_fp64_supported(), bool) and isinstance(acc.is_current_stream_capturing(), bool)
    assert isinstance(acc.supports_nvtx_domain, bool)


def check_graphs(acc: Any) -> None:
    """Graph members work: real capture and replay, or None / no-op on devices without graphs."""
    graph = acc.create_graph()
    if graph is None:
        with acc.capture_to_graph(graph):
            pass
        acc.replay_graph(graph)
        return
    device = acc.current_device_name()
    static_in = torch.randn(32, device=device)
    side = acc.Stream()
    side.wait_stream(acc.current_stream())
    with acc.stream(side):  # warm up outside capture, as torch's graph docs require
        static_out = static_in * 3.0
    acc.current_stream().wait_stream(side)
    with acc.capture_to_graph(graph):
        static_out = static_in * 3.0
    new = torch.randn(32, device=device)
    static_in.copy_(new)
    acc.replay_graph(graph)
    acc.synchronize()
    assert torch.allclose(static_out, new * 3.0)


def check_misc(acc: Any) -> None:
    """Profiler ranges, lazy calls, Triton flags, launcher environment, op builders, compile backend."""
    acc.range_push("anyaccel-conformance")
    acc.range_pop()
    ran = []
    acc.lazy_call(lambda: ran.append(True))
    torch.empty(1, device=acc.current_device_name())
    acc.synchronize()
    assert ran == [True], "lazy_call callback did not run once the device was initialised"
    assert isinstance(acc.is_triton_supported(), bool) and isinstance(acc.prefer_triton_grouped_mm(), bool)
    envs = acc.visible_devices_envs()
    assert all(isinstance(e, str) for e in envs) and all(isinstance(e, str) for e in acc.export_envs())
    env: dict[str, str] = {}
    acc.set_visible_devices_envs(env, [2, 0])
    assert env == {e: "2,0" for e in envs}
    assert isinstance(acc.op_builder_dir(), str)
    assert isinstance(acc.get_compile_backend(), str)
    assert inspect.isclass(acc.build_extension())


CHECKS: dict[str, Callable[[Any], None]] = {
    "members_present": check_members_present,
    "name": check_name,
    "device_apis": check_device_apis,
    "flags": check_flags,
    "communication_backend": check_communication_backend,
    "rng": check_rng,
    "streams_and_events": check_streams_and_events,
    "memory": check_memory,
    "dtypes": check_dtypes,
    "tensor_types": check_tensor_types,
    "placement_and_pinning": check_placement_and_pinning,
    "host_memory": check_host_memory,
    "graphs": check_graphs,
    "misc": check_misc,
}


def run_conformance(accelerator: Any) -> dict[str, str | None]:
    """Run every check on ``accelerator``.

    Args:
        accelerator: an accelerator instance whose device is present on this machine.

    Returns:
        ``{check name: None}`` for a pass or the failure's ``"ExceptionType: message"``.

    Side effects: allocates small tensors on the device, re-seeds its generator, imports
    ``torch.utils.cpp_extension`` (``build_extension``).
    """
    results: dict[str, str | None] = {}
    for name, check in CHECKS.items():
        try:
            check(accelerator)
            results[name] = None
        except Exception as exc:  # a conformance report collects every failure
            results[name] = f"{type(exc).__name__}: {exc}"
            logger.debug("conformance check %s failed", name, exc_info=True)
    return results
