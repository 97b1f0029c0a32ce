"""``anyaccel._compat.data_ptrs``: the private batched check and the forced public fallback give the same answers."""

from __future__ import annotations

import pytest
import torch

from anyaccel._compat import data_ptrs


@pytest.fixture(params=["private", "fallback"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "fallback":
        monkeypatch.setattr(data_ptrs, "_private", lambda: None)
    elif data_ptrs._private() is None:
        pytest.skip(f"torch {torch.__version__} has no torch._C._tensors_data_ptrs_at_indices_equal")
    return str(request.param)


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_unchanged_pointers_are_the_same(path: str, n: int) -> None:
    ts = [torch.randn(3 + i % 5) for i in range(n)]
    assert data_ptrs.same_data_ptrs(ts, [t.data_ptr() for t in ts])


@pytest.mark.parametrize("moved", [0, 3, 6])
def test_a_swapped_storage_is_seen(path: str, moved: int) -> None:
    ts = [torch.randn(4) for _ in range(7)]
    ptrs = [t.data_ptr() for t in ts]
    ts[moved].data = torch.randn(4)  # what p.data = x does to a parameter
    assert not data_ptrs.same_data_ptrs(ts, ptrs)


def test_lengths_that_differ_are_not_the_same(path: str) -> None:
    ts = [torch.randn(2) for _ in range(3)]
    assert not data_ptrs.same_data_ptrs(ts, [t.data_ptr() for t in ts][:2])


def test_a_refusing_private_check_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuses(*args: object) -> bool:
        raise TypeError("incompatible function arguments")

    monkeypatch.setattr(data_ptrs, "_private", lambda: refuses)
    ts = [torch.randn(2) for _ in range(3)]
    ptrs = [t.data_ptr() for t in ts]
    assert data_ptrs.same_data_ptrs(ts, ptrs)
    ts[1].data = torch.randn(2)
    assert not data_ptrs.same_data_ptrs(ts, ptrs)
