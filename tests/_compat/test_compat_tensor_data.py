"""``anyaccel._compat.tensor_data``: data-pointer comparison and the 0-dim float writer, private and fallback."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from anyaccel._compat import tensor_data


@pytest.mark.parametrize("n", [3, 40])
@pytest.mark.parametrize("fallback", [False, True])
def test_same_data_ptrs(n: int, fallback: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if fallback:
        monkeypatch.delattr(torch._C, "_tensors_data_ptrs_at_indices_equal", raising=False)
    ts = [torch.randn(4) for _ in range(n)]
    ptrs = [t.data_ptr() for t in ts]
    assert tensor_data.same_data_ptrs(ts, ptrs)
    ts[-1].data = torch.randn(4)
    assert not tensor_data.same_data_ptrs(ts, ptrs)


@pytest.mark.parametrize("fallback", [False, True])
def test_float_setter_writes_the_value(fallback: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if fallback:
        class NoFloat:
            @staticmethod
            def from_address(address: int) -> None:
                raise TypeError("no ctypes here")

        monkeypatch.setattr(tensor_data, "ctypes", SimpleNamespace(c_float=NoFloat))
    t = torch.zeros((), dtype=torch.float32)
    write = tensor_data.float_setter(t)
    write(17.0)
    assert t.item() == 17.0


def test_float_setter_refuses_other_tensors() -> None:
    with pytest.raises(ValueError, match="0-dim float32 CPU"):
        tensor_data.float_setter(torch.zeros(2))
