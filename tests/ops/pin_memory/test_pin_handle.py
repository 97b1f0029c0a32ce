"""The pin_memory op and DeepSpeed's pin_handle API over it (anyaccel/ops/pin_memory/handle.py)."""

from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

REPO = Path(__file__).resolve().parents[3]
PAGE = os.sysconf("SC_PAGE_SIZE")
DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int8, torch.int64, torch.bool)


@pytest.fixture(scope="module")
def pin_module(_ops_cache_dir: str) -> Any:
    """The ``pin_memory`` op module (``PinMemoryBuilder().load()``)."""
    from anyaccel.accelerator import get_accelerator

    return get_accelerator().create_op_builder("PinMemoryBuilder").load()


@pytest.fixture
def handle(pin_module: Any) -> Any:
    return pin_module.pin_handle()


def _regions(handle: Any) -> int:
    gc.collect()
    return int(handle.stats().regions)


def test_builder_is_a_host_op_on_every_accelerator() -> None:
    from anyaccel.ops.registry import get_builder_class

    for accelerator in ("cpu", "cuda", "xpu", "npu", "mps"):
        cls = get_builder_class("PinMemoryBuilder", accelerator)
        assert cls is not None and cls.NAME == "pin_memory"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("num_elem", [1, 3, 1023, PAGE + 7])
def test_new_tensor_is_page_aligned_writable_and_exact(handle: Any, dtype: torch.dtype, num_elem: int) -> None:
    t = handle.new_cpu_locked_tensor(num_elem, torch.empty(0, dtype=dtype))
    assert t.shape == (num_elem,) and t.dtype == dtype and t.device.type == "cpu" and t.is_contiguous()
    assert t.data_ptr() % PAGE == 0
    reference = (torch.arange(num_elem, dtype=torch.float64) % 7).to(dtype)
    t.copy_(reference)
    assert torch.equal(t.to(torch.float64), reference.to(torch.float64))
    assert handle.is_pinned(t)
    assert handle.free_cpu_locked_tensor(t) is True


def test_region_bytes_are_the_request_rounded_to_pages(handle: Any) -> None:
    before = handle.stats().bytes
    t = handle.new_cpu_locked_tensor(3 * PAGE // 4 + 1, torch.empty(0, dtype=torch.float32))  # 3 pages + 4 bytes
    assert handle.stats().bytes - before == 4 * PAGE
    del t
    assert _regions(handle) == 0


def test_is_pinned_on_views_and_foreign_tensors(handle: Any) -> None:
    buf = handle.new_cpu_locked_tensor(4096, torch.empty(0, dtype=torch.float32))
    try:
        assert handle.is_pinned(buf.narrow(0, 16, 16))
        assert handle.is_pinned(buf.view(64, 64)[:, 3])  # strided view inside the region
        assert handle.is_pinned(buf.view(64, 64).t())
        assert handle.is_pinned(buf[4095:])
        assert not handle.is_pinned(torch.empty(4096, dtype=torch.float32))
        assert not handle.is_pinned(torch.empty(0))
    finally:
        assert handle.free_cpu_locked_tensor(buf) is True


def test_other_handles_see_the_same_regions(pin_module: Any) -> None:
    a, b = pin_module.pin_handle(), pin_module.pin_handle()
    buf = a.new_cpu_locked_tensor(100, torch.empty(0, dtype=torch.float16))
    assert b.is_pinned(buf[10:20])
    assert b.free_cpu_locked_tensor(buf) is True and not a.is_pinned(buf)


def test_async_io_buffers_are_pinned_for_the_pin_handle(handle: Any) -> None:
    # DeepSpeed has one pinned-tensor manager per process: a buffer of aio_handle.new_cpu_locked_tensor is pinned
    # for the pin_memory op too (its unit/v1/nvme/test_pinned_manager.py), and the other way round
    from anyaccel.accelerator import get_accelerator

    aio = get_accelerator().create_op_builder("AsyncIOBuilder").load().aio_handle()
    try:
        buf = aio.new_cpu_locked_tensor(3000, torch.empty(0, dtype=torch.float32))
        assert aio.is_pinned(buf) and handle.is_pinned(buf) and handle.is_pinned(buf.narrow(0, 1024, 1024))
        assert handle.region_base(buf) is None  # not a region of this op: its own free does not apply
        assert handle.free_cpu_locked_tensor(buf) is False
        assert aio.free_cpu_locked_tensor(buf) is True and not handle.is_pinned(buf)
        own = handle.new_cpu_locked_tensor(100, torch.empty(0, dtype=torch.float32))
        assert aio.is_pinned(own[10:20])
        assert handle.free_cpu_locked_tensor(own) is True
    finally:
        aio.close()


def test_free_ends_pinning_once_and_keeps_memory_valid(handle: Any) -> None:
    buf = handle.new_cpu_locked_tensor(64, torch.empty(0, dtype=torch.float64))
    buf.copy_(torch.arange(64, dtype=torch.float64))
    view = buf[8:16]
    assert handle.free_cpu_locked_tensor(buf) is True
    assert not handle.is_pinned(buf) and not handle.is_pinned(view)
    assert handle.free_cpu_locked_tensor(buf) is False
    assert handle.free_cpu_locked_tensor_by_ptr(buf.data_ptr()) is False
    stats = handle.stats()
    assert stats.released_regions == 1 and stats.regions == 0
    # the memory is the storage's until the last tensor goes: still readable (DeepSpeed's would be freed)
    assert torch.equal(view, torch.arange(8, 16, dtype=torch.float64))
    del buf, view
    gc.collect()
    assert handle.stats().released_regions == 0


def test_free_by_ptr_needs_a_region_base(handle: Any) -> None:
    buf = handle.new_cpu_locked_tensor(1024, torch.empty(0, dtype=torch.float32))
    foreign = torch.empty(1024)
    assert handle.free_cpu_locked_tensor_by_ptr(foreign.data_ptr()) is False
    assert handle.free_cpu_locked_tensor_by_ptr(buf.data_ptr() + 4) is False  # inside, not the base
    assert handle.free_cpu_locked_tensor(buf[1:]) is False
    assert handle.is_pinned(buf)
    assert handle.free_cpu_locked_tensor_by_ptr(buf.data_ptr()) is True


def test_memory_freed_on_gc_and_kept_until_the_last_view(handle: Any) -> None:
    start = _regions(handle)
    buf = handle.new_cpu_locked_tensor(32, torch.empty(0, dtype=torch.float32))
    buf.copy_(torch.arange(32, dtype=torch.float32))
    view = buf.narrow(0, 8, 8)
    shared = torch.empty(0).set_(buf.untyped_storage())  # shares the storage without being a view
    del buf
    assert _regions(handle) == start + 1 and handle.is_pinned(view) and float(view[0]) == 8.0
    del view
    assert _regions(handle) == start + 1 and float(shared[31]) == 31.0
    del shared
    assert _regions(handle) == start


def test_storageless_tensors_are_not_pinned(handle: Any) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.zeros(2, 8))
        assert handle.is_pinned(fake) is False
    assert handle.is_pinned(torch.zeros(2, 8, device="meta")) is False


def test_zero_elements_give_an_unpinned_empty_tensor(handle: Any) -> None:
    start = _regions(handle)
    t = handle.new_cpu_locked_tensor(0, torch.empty(3, dtype=torch.bfloat16))
    assert t.shape == (0,) and t.dtype == torch.bfloat16 and not handle.is_pinned(t)
    assert _regions(handle) == start


@pytest.mark.parametrize("num_elem", [-1, 2.0, True, "8"])
def test_bad_num_elem_raises(handle: Any, num_elem: Any) -> None:
    with pytest.raises(ValueError, match="num_elem"):
        handle.new_cpu_locked_tensor(num_elem, torch.empty(0))


def test_op_checks_its_ranges(pin_module: Any) -> None:
    with pytest.raises(RuntimeError, match="nbytes"):
        pin_module.pin_alloc(0, True)
    with pytest.raises(RuntimeError, match="which"):
        pin_module.pin_stats(6)
    assert pin_module.pin_free(PAGE) == 0  # not a region: nothing is handed to free()


class FakeRuntime:
    """A device runtime's host registration, recorded."""

    def __init__(self, fail_unregister: bool = False, fail_register: bool = False) -> None:
        self.registered: dict[int, int] = {}
        self.calls: list[tuple[str, int]] = []
        self.fail_unregister = fail_unregister
        self.fail_register = fail_register

    def register(self, address: int, nbytes: int) -> bool:
        self.calls.append(("register", address))
        if self.fail_register:
            raise RuntimeError("cudaHostRegister failed (fake)")
        self.registered[address] = nbytes
        return True

    def unregister(self, address: int) -> None:
        self.calls.append(("unregister", address))
        if self.fail_unregister:
            raise RuntimeError("cudaHostUnregister failed (fake)")
        del self.registered[address]


def test_registration_wraps_the_region_lifetime(pin_module: Any) -> None:
    rt = FakeRuntime()
    h = pin_module.pin_handle(register=rt.register, unregister=rt.unregister)
    buf = h.new_cpu_locked_tensor(1000, torch.empty(0, dtype=torch.float32))
    base = buf.data_ptr()
    assert rt.registered == {base: 4000}
    assert pin_module.pin_lock_state(base) == -1  # registered, so not mlock-ed as well
    view = buf[1:]
    del buf
    gc.collect()
    assert base in rt.registered  # a view still uses it
    del view
    gc.collect()
    assert rt.registered == {} and rt.calls == [("register", base), ("unregister", base)]
    assert pin_module.pin_lock_state(base) == -2


def test_explicit_free_unregisters_once(pin_module: Any) -> None:
    rt = FakeRuntime()
    h = pin_module.pin_handle(register=rt.register, unregister=rt.unregister)
    buf = h.new_cpu_locked_tensor(10, torch.empty(0, dtype=torch.float32))
    base = buf.data_ptr()
    assert h.free_cpu_locked_tensor(buf) is True and rt.registered == {}
    del buf
    gc.collect()
    assert rt.calls == [("register", base), ("unregister", base)]


def test_failed_unregistration_keeps_the_region(pin_module: Any) -> None:
    rt = FakeRuntime(fail_unregister=True)
    h = pin_module.pin_handle(register=rt.register, unregister=rt.unregister)
    buf = h.new_cpu_locked_tensor(10, torch.empty(0, dtype=torch.float32))
    base = buf.data_ptr()
    with pytest.raises(RuntimeError, match="Unregister"):
        h.free_cpu_locked_tensor(buf)
    assert h.is_pinned(buf)  # still pinned and registered: the driver's registration is not left dangling
    del buf
    gc.collect()
    assert pin_module.pin_lock_state(base) == -1  # the finalizer could not unregister: region left allocated
    rt.fail_unregister = False
    assert h.free_cpu_locked_tensor_by_ptr(base) is True
    pin_module.pin_free(base)


def test_failed_registration_frees_the_region(pin_module: Any) -> None:
    rt = FakeRuntime(fail_register=True)
    h = pin_module.pin_handle(register=rt.register, unregister=rt.unregister)
    start = _regions(h)
    with pytest.raises(RuntimeError, match="cudaHostRegister"):
        h.new_cpu_locked_tensor(10, torch.empty(0, dtype=torch.float32))
    assert _regions(h) == start


def test_register_needs_unregister(pin_module: Any) -> None:
    with pytest.raises(ValueError, match="unregister"):
        pin_module.pin_handle(register=lambda a, n: True)


def _run(code: str, cache: str) -> Any:
    env = {**os.environ, "PYTHONPATH": str(REPO), "ANYACCEL_CACHE_DIR": cache}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


LOCK_SNIPPET = """
import ctypes, json, logging, os, resource, torch
logging.basicConfig(level=logging.WARNING)
if os.geteuid() == 0:  # root locks past RLIMIT_MEMLOCK through CAP_IPC_LOCK: drop it (capget/capset, version 3)
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    assert libc.capget(header, data) == 0
    data[0] &= ~(1 << 14); data[1] &= ~(1 << 14)  # CAP_IPC_LOCK out of effective and permitted
    assert libc.capset(header, data) == 0, ctypes.get_errno()
soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
resource.setrlimit(resource.RLIMIT_MEMLOCK, ({limit}, hard))
from anyaccel.accelerator import get_accelerator
h = get_accelerator().create_op_builder("PinMemoryBuilder").load().pin_handle()
a = h.new_cpu_locked_tensor(1024, torch.empty(0))
b = h.new_cpu_locked_tensor(1024, torch.empty(0))
a.fill_(1.5)
print(json.dumps(dict(h.stats().to_dict(), pinned=h.is_pinned(a[3:]), value=float(a[7]))))
"""


def test_mlock_within_the_limit_locks(_ops_cache_dir: str, pin_module: Any) -> None:
    out, _ = _run(LOCK_SNIPPET.format(limit=1 << 20), _ops_cache_dir)
    assert out["regions"] == 2 and out["locked_regions"] == 2 and out["locked_bytes"] == 2 * PAGE
    assert out["pinned"] and out["value"] == 1.5


def test_mlock_past_the_limit_still_allocates_and_says_so(_ops_cache_dir: str, pin_module: Any) -> None:
    out, stderr = _run(LOCK_SNIPPET.format(limit=0), _ops_cache_dir)
    assert out["regions"] == 2 and out["locked_regions"] == 0  # aligned, usable, not locked
    assert out["pinned"] and out["value"] == 1.5
    assert stderr.count("mlock of") == 1 and "RLIMIT_MEMLOCK 0 bytes" in stderr


def test_unlocked_warning_names_the_limit(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from anyaccel.ops.pin_memory import handle as handle_mod

    monkeypatch.setattr(handle_mod, "_WARNED", False)
    with caplog.at_level(logging.WARNING, logger=handle_mod.__name__):
        handle_mod._warn_if_unlocked(12, 4096)  # ENOMEM
        handle_mod._warn_if_unlocked(12, 4096)
    assert len(caplog.records) == 1 and "4096 bytes" in caplog.text and "ulimit -l" in caplog.text


def test_the_async_io_handle_recognises_native_regions(pin_module: Any, _ops_cache_dir: str) -> None:
    """DeepSpeed's swappers assert ``aio_handle.is_pinned(buffer)`` of buffers the native backend pinned."""
    from anyaccel.accelerator import get_accelerator

    aio = get_accelerator().create_op_builder("AsyncIOBuilder").load().aio_handle(block_size=8192, queue_depth=2)
    try:
        buf = pin_module.pin_handle().new_cpu_locked_tensor(3000, torch.empty(0, dtype=torch.float16))
        assert aio.is_pinned(buf) and aio.is_pinned(buf[100:200])
        assert not aio.is_pinned(torch.empty(3000, dtype=torch.float16))
        pin_module.pin_handle().free_cpu_locked_tensor(buf)
        assert not aio.is_pinned(buf)
    finally:
        aio.close()


@pytest.mark.parametrize(("num_elem", "dtype"), [(2**62, torch.float32), (2**61, torch.float32), (2**63, torch.uint8),
                                                 (2**63 // 8, torch.float64), (2**100, torch.bfloat16)])
def test_a_count_past_the_ops_size_is_a_value_error(handle: Any, num_elem: int, dtype: torch.dtype) -> None:
    """A count whose bytes pass int64 said "Expected a value of type 'int' ... but instead found type 'int'"."""
    before = _regions(handle)
    with pytest.raises(ValueError, match=rf"num_elem={num_elem} of {dtype} is \d+ bytes, more than one buffer"):
        handle.new_cpu_locked_tensor(num_elem, torch.empty(0, dtype=dtype))
    assert _regions(handle) == before


def test_regions_are_recognised_across_a_reset_of_the_loaded_ops(handle: Any) -> None:
    """The library (and its table of regions) stays loaded when the process's table of loaded ops is reset, so
    other ops (the async I/O handle's ``is_pinned``) still recognise the regions."""
    from anyaccel.op_builder.core.loaded_ops import LOADED_OPS
    from anyaccel.ops.pin_memory.handle import in_native_region

    buf = handle.new_cpu_locked_tensor(100, torch.empty(0, dtype=torch.float32))
    try:
        LOADED_OPS.clear()
        assert in_native_region(buf) and in_native_region(buf[10:20])
        assert not in_native_region(torch.empty(100))
    finally:
        assert handle.free_cpu_locked_tensor(buf) is True
    assert not in_native_region(buf)
