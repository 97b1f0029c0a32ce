"""The accelerator's native pinned-memory backend (``DS_PIN_MEMORY_BACKEND=native``, accelerator/native_pinned.py).

DeepSpeed 0.19.8's accelerator contract (``pin_memory(tensor, make_copy, match_shape)``, ``is_pinned`` on views
and storage-less tensors, ``unpin_memory``, lifetime until the last view) on the CPU accelerator, and the device
registration a CUDA host does, with the runtime faked.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from anyaccel.accelerator import native_pinned
from anyaccel.accelerator.cpu import CPU_Accelerator
from anyaccel.settings import SettingError

PAGE = os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def _cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private op cache for this module (the pin_memory op compiles once)."""
    path = str(tmp_path_factory.mktemp("pin_cache"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ANYACCEL_CACHE_DIR", path)
        yield path


@pytest.fixture
def acc(_cache: str, monkeypatch: pytest.MonkeyPatch) -> CPU_Accelerator:
    """A CPU accelerator with the native backend selected and a fresh process-wide manager."""
    monkeypatch.setenv("DS_PIN_MEMORY_BACKEND", "native")
    monkeypatch.delenv("DS_PIN_MEMORY_REGISTER_DEVICE", raising=False)
    monkeypatch.setattr(native_pinned, "_shared", {})
    return CPU_Accelerator()


def _native_regions(acc: CPU_Accelerator) -> int:
    gc.collect()
    native = acc.pinned_memory_report()["native"]
    return int(native["regions"]) if native else 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32], ids=str)
@pytest.mark.parametrize("shape", [(4, 8), (3, 5, 7), (1,), (0, 3)])
def test_pin_copies_matches_shape_and_tags(acc: CPU_Accelerator, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    source = (torch.arange(torch.Size(shape).numel(), dtype=torch.float64) * 0.5 - 3).reshape(shape)
    tensor = source.to(dtype)
    pinned = acc.pin_memory(tensor)
    assert tuple(pinned.shape) == shape and pinned.dtype == dtype
    assert torch.equal(pinned.to(torch.float64), tensor.to(torch.float64))
    assert pinned.ds_pinned is True and acc.is_pinned(pinned)
    assert pinned.data_ptr() == pinned.ds_pin_base
    flat = acc.pin_memory(tensor, match_shape=False)
    assert tuple(flat.shape) == (tensor.numel(),) and torch.equal(flat, tensor.reshape(-1))
    scratch = acc.pin_memory(tensor, make_copy=False)
    assert tuple(scratch.shape) == shape and acc.is_pinned(scratch)


def test_the_source_may_be_non_contiguous(acc: CPU_Accelerator) -> None:
    tensor = torch.arange(40, dtype=torch.float32).reshape(5, 8).t()
    pinned = acc.pin_memory(tensor)
    assert torch.equal(pinned, tensor) and pinned.is_contiguous()


def test_is_pinned_on_views(acc: CPU_Accelerator) -> None:
    pinned = acc.pin_memory(torch.arange(32, dtype=torch.float32).reshape(4, 8))
    view = pinned.reshape(-1).narrow(0, 8, 8)
    assert getattr(view, "ds_pinned", False) is False
    assert acc.is_pinned(view) and acc.is_pinned(pinned[1]) and acc.is_pinned(pinned[:, 2])
    assert not acc.is_pinned(torch.arange(32, dtype=torch.float32))


def test_unpin_frees_range_and_views(acc: CPU_Accelerator) -> None:
    pinned = acc.pin_memory(torch.arange(32, dtype=torch.float32).reshape(4, 8))
    view = pinned.reshape(-1).narrow(0, 8, 8)
    assert acc.unpin_memory(pinned) is True
    assert not acc.is_pinned(pinned) and not acc.is_pinned(view)
    assert acc.unpin_memory(pinned) is False
    assert float(view[0]) == 8.0  # the memory stays the view's


def test_unpin_of_anything_else_is_false(acc: CPU_Accelerator) -> None:
    pinned = acc.pin_memory(torch.ones(64))
    assert acc.unpin_memory(torch.ones(3)) is False
    assert acc.unpin_memory(pinned[1:]) is False and acc.is_pinned(pinned)
    assert acc.unpin_memory(torch.ones(3, device="meta")) is False


def test_memory_freed_on_gc(acc: CPU_Accelerator) -> None:
    start = _native_regions(acc)
    pinned = acc.pin_memory(torch.arange(32, dtype=torch.float32))
    assert _native_regions(acc) == start + 1
    del pinned
    assert _native_regions(acc) == start


def test_allocation_survives_until_all_views_dropped(acc: CPU_Accelerator) -> None:
    start = _native_regions(acc)
    pinned = acc.pin_memory(torch.arange(32, dtype=torch.float32))
    view = pinned.narrow(0, 8, 8)
    del pinned
    assert _native_regions(acc) == start + 1 and acc.is_pinned(view) and float(view[0]) == 8.0
    del view
    assert _native_regions(acc) == start


def test_unpin_after_data_redirect_frees_the_original(acc: CPU_Accelerator) -> None:
    pinned = acc.pin_memory(torch.arange(32, dtype=torch.float32))
    base = pinned.data_ptr()
    keep = pinned.narrow(0, 0, 1)
    pinned.data = torch.zeros(32)
    assert pinned.data_ptr() != base
    assert acc.unpin_memory(pinned) is True
    assert not acc.is_pinned(keep)


def test_storageless_tensors(acc: CPU_Accelerator) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    acc.pin_memory(torch.ones(4))  # the backend exists
    with FakeTensorMode() as mode:
        assert acc.is_pinned(mode.from_tensor(torch.zeros(2, 8))) is False
    assert acc.is_pinned(torch.zeros(2, 8, device="meta")) is False


def test_pin_empty_and_pin_empty_like(acc: CPU_Accelerator) -> None:
    empty = acc.pin_empty(3, 5, dtype=torch.bfloat16)
    assert empty.shape == (3, 5) and empty.dtype == torch.bfloat16 and acc.is_pinned(empty)
    like = acc.pin_empty_like(torch.empty(2, 9, device="meta"), dtype=torch.float16)
    assert like.shape == (2, 9) and like.dtype == torch.float16 and acc.is_pinned(like)


def test_accounting(acc: CPU_Accelerator) -> None:
    base = acc.pinned_memory_report()
    keep = acc.pin_memory(torch.ones(PAGE // 4 + 1))  # 2 pages
    report = acc.pinned_memory_report()
    assert report["backend"] == "native"
    assert report["tracked_calls"] == base["tracked_calls"] + 1
    assert report["tracked_bytes"] == base["tracked_bytes"] + keep.nbytes
    assert report["native"]["bytes"] - (base["native"] or {"bytes": 0})["bytes"] == 2 * PAGE
    assert acc.unpin_memory(keep) is True
    released = acc.pinned_memory_report()["native"]
    assert released["released_regions"] >= 1 and released["regions"] == report["native"]["regions"] - 1


def test_the_report_shows_the_figures(acc: CPU_Accelerator, monkeypatch: pytest.MonkeyPatch) -> None:
    from anyaccel import report
    from anyaccel.accelerator import set_accelerator

    set_accelerator(acc)
    keep = acc.pin_memory(torch.ones(10))
    section = report.collect()["pinned_memory"]
    assert section["backend"] == "native" and section["native"]["regions"] >= 1
    line = report._render_pinned(section)
    assert "backend native" in line and f"{section['native']['bytes']} bytes in" in line
    del keep


def test_torch_backend_is_the_default(acc: CPU_Accelerator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DS_PIN_MEMORY_BACKEND")
    t = torch.ones(3)
    assert acc.pin_memory(t) is t and acc.unpin_memory(t) is None  # CPU: torch pinning is a no-op
    assert acc.pinned_memory_report()["backend"] == "torch" and acc.pinned_memory_report()["native"] is None


def test_a_bad_backend_name_raises(acc: CPU_Accelerator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_PIN_MEMORY_BACKEND", "nativ")
    with pytest.raises(SettingError, match="DS_PIN_MEMORY_BACKEND='nativ'.*native"):
        acc.pin_memory(torch.ones(3))
    assert acc.pinned_memory_report()["backend"].startswith("invalid:")


def test_native_without_the_op_fails_early(acc: CPU_Accelerator, monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def load(self, verbose: bool = False) -> Any:
            raise OSError("simulated build failure")

    monkeypatch.setattr(CPU_Accelerator, "create_op_builder", lambda self, name: Broken())
    with pytest.raises(RuntimeError, match="DS_PIN_MEMORY_BACKEND=native requires the pin_memory op") as info:
        acc.pin_memory(torch.ones(3))
    assert isinstance(info.value.__cause__, OSError)


class FakeCudart:
    """``torch.cuda.cudart()``'s host registration, recorded (0: cudaSuccess)."""

    def __init__(self) -> None:
        self.live: dict[int, int] = {}
        self.calls: list[tuple[str, int]] = []

    def cudaHostRegister(self, address: int, nbytes: int, flags: int) -> int:  # noqa: N802 - the runtime's name
        self.calls.append(("register", address))
        self.live[address] = nbytes
        return 0

    def cudaHostUnregister(self, address: int) -> int:  # noqa: N802 - the runtime's name
        self.calls.append(("unregister", address))
        return 0 if self.live.pop(address, None) is not None else 1


def _fake_cuda_host(acc: CPU_Accelerator, monkeypatch: pytest.MonkeyPatch) -> FakeCudart:
    runtime = FakeCudart()
    monkeypatch.setattr(acc, "_host_register_functions",
                        lambda: (runtime.cudaHostRegister, runtime.cudaHostUnregister, 0))
    return runtime


def test_a_cuda_host_registers_each_region(acc: CPU_Accelerator, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = _fake_cuda_host(acc, monkeypatch)
    pinned = acc.pin_memory(torch.arange(1000, dtype=torch.float32))
    base = pinned.data_ptr()
    assert base % PAGE == 0 and runtime.live == {base: 4000}
    view = pinned[10:]
    assert acc.unpin_memory(pinned) is True and runtime.live == {}
    assert acc.pinned_memory_report()["native"]["locked_regions"] == 0  # the runtime locks, not mlock
    del pinned, view
    gc.collect()
    assert runtime.calls == [("register", base), ("unregister", base)]


def test_a_cuda_host_unregisters_on_gc(acc: CPU_Accelerator, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = _fake_cuda_host(acc, monkeypatch)
    pinned = acc.pin_memory(torch.ones(10))
    base = pinned.data_ptr()
    del pinned
    gc.collect()
    assert runtime.calls == [("register", base), ("unregister", base)] and runtime.live == {}


def test_registration_can_be_turned_off(acc: CPU_Accelerator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_PIN_MEMORY_REGISTER_DEVICE", "0")
    runtime = _fake_cuda_host(acc, monkeypatch)
    pinned = acc.pin_memory(torch.ones(10))
    assert runtime.calls == [] and acc.is_pinned(pinned)


def _sparse(layout: str) -> torch.Tensor:
    dense = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    return {"coo": dense.to_sparse(), "uncoalesced-coo": torch.sparse_coo_tensor([[0, 0], [1, 1]], [1.0, 2.0], (2, 3)),
            "csr": dense.to_sparse_csr(), "csc": dense.to_sparse_csc()}[layout]


@pytest.mark.parametrize("make_copy", [True, False])
@pytest.mark.parametrize("layout", ["coo", "uncoalesced-coo", "csr", "csc"])
def test_a_sparse_tensor_is_a_typed_error_naming_the_fixes(acc: CPU_Accelerator, layout: str, make_copy: bool) -> None:
    """Sparse tensors are refused by type with the fixes; the native backend said "nbytes is not defined for sparse
    tensors" (or "do not have
    is_contiguous"); it pins dense regions, so it refuses with the ways out, and nothing is pinned or counted."""
    before = _native_regions(acc)
    with pytest.raises(TypeError, match=r"cannot be pinned by the native backend .*DS_PIN_MEMORY_BACKEND=torch"):
        acc.pin_memory(_sparse(layout), make_copy=make_copy)
    assert _native_regions(acc) == before


def test_the_named_fix_for_coo_pins_its_parts(acc: CPU_Accelerator) -> None:
    t = _sparse("uncoalesced-coo").coalesce()
    pinned = torch.sparse_coo_tensor(acc.pin_memory(t.indices()), acc.pin_memory(t.values()), t.shape)
    assert torch.equal(pinned.to_dense(), t.to_dense())
    assert acc.is_pinned(pinned.values())
