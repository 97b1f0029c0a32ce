"""``anyaccel._compat.devices`` and ``fake_tensor``: private answers, and the fallbacks when the names are gone."""

from __future__ import annotations

import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from anyaccel._compat import PrivateAPIUnavailableError, devices, fake_tensor


def test_mkldnn_fp16_supported_is_a_bool_and_false_without_the_query(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(devices.mkldnn_fp16_supported(), bool)
    monkeypatch.delattr(torch.ops.mkldnn, "_is_mkldnn_fp16_supported", raising=False)
    monkeypatch.setattr(torch.ops, "mkldnn", object())
    assert devices.mkldnn_fp16_supported() is False


def test_mps_default_generator_fallback_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    assert callable(getattr(torch.mps, "_get_default_mps_generator", None))
    monkeypatch.delattr(torch.mps, "_get_default_mps_generator")
    with pytest.raises(PrivateAPIUnavailableError, match="torch.mps._get_default_mps_generator"):
        devices.mps_default_generator()


@pytest.mark.parametrize("fallback", [False, True])
def test_is_fake(fallback: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeTensorMode():
        fake = torch.empty(3)
    if fallback:
        monkeypatch.setitem(sys.modules, "torch._subclasses.fake_tensor", None)
    assert fake_tensor.is_fake(fake) is True
    assert fake_tensor.is_fake(torch.empty(3)) is False
    assert fake_tensor.is_fake("not a tensor") is False
