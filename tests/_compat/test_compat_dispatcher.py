"""``anyaccel._compat.dispatcher``: each query's private answer equals its public fallback's."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from anyaccel._compat import dispatcher


class _Passthrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


def _without(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The fallback forced: the module's lookup of ``torch._C.<name>`` finds nothing (torch itself keeps it)."""
    real = dispatcher._private
    monkeypatch.setattr(dispatcher, "_private", lambda n: None if n == name else real(n))


def test_dispatch_mode_active(monkeypatch: pytest.MonkeyPatch) -> None:
    assert dispatcher.dispatch_mode_active() is False
    with _Passthrough():
        assert dispatcher.dispatch_mode_active() is True
    _without(monkeypatch, "_len_torch_dispatch_stack")
    assert dispatcher.dispatch_mode_active() is True  # unknown: the path correct under any mode


@pytest.mark.parametrize("device_type", ["cpu", "cuda", "meta", "xpu", "mps"])
def test_dispatch_key_for_device(device_type: str, monkeypatch: pytest.MonkeyPatch) -> None:
    private = dispatcher.dispatch_key_for_device(device_type)
    _without(monkeypatch, "_dispatch_key_for_device")
    assert dispatcher.dispatch_key_for_device(device_type) == private


@pytest.mark.parametrize(("op", "key"), [("aten::mm", "CPU"), ("aten::add.Tensor", "CPU"),
                                         ("aten::_fused_adam_", "CPU"), ("aten::mm", "Meta")])
def test_has_kernel(op: str, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    private = dispatcher.has_kernel(op, key)
    _without(monkeypatch, "_dispatch_has_kernel_for_dispatch_key")
    assert dispatcher.has_kernel(op, key) == private


@pytest.mark.parametrize("text", ["ns::f(Tensor x, float eps=1e-06) -> Tensor",
                                  "ns::g(Tensor(a!) x,  Tensor[] ys, int? n=None) -> (Tensor, Tensor)"])
def test_canonical_schema(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    private = dispatcher.canonical_schema(text)  # what str() of the registered schema prints
    other = text.replace("1e-06", "0.000001")
    monkeypatch.setattr(dispatcher, "_private", lambda name: None)
    assert dispatcher.canonical_schema(private) == dispatcher.canonical_schema(text)
    assert dispatcher.canonical_schema(other) == dispatcher.canonical_schema(text)
    assert dispatcher.canonical_schema(text.replace("x", "y")) != dispatcher.canonical_schema(text)


def test_registered_schema_of_an_overload_a_packet_and_a_custom_op(monkeypatch: pytest.MonkeyPatch) -> None:
    want = "aten::mm(Tensor self, Tensor mat2) -> Tensor"
    assert dispatcher.registered_schema(torch.ops.aten.mm.default) == want
    assert dispatcher.registered_schema(torch.ops.aten.mm) == want

    @torch.library.custom_op("anyaccel_compat_test::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    assert dispatcher.registered_schema(twice) == "anyaccel_compat_test::twice(Tensor x) -> Tensor"
    assert dispatcher.registered_schema(object()) is None  # nothing readable: callers skip the comparison
