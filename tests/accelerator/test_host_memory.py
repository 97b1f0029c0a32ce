"""Pinned host memory (:mod:`anyaccel.accelerator.host_memory`): DeepSpeed 0.19.8's pinned scratch buffers,
pinning through a native backend, and host registration with the device runtime, on the CPU (real) and on faked
device modules.
"""

from __future__ import annotations

import importlib.machinery
import random
import sys
import types

import pytest
import torch

from anyaccel.accelerator import HostRegistrationError, NotHostDeviceError
from anyaccel.accelerator.cpu import CPU_Accelerator
from anyaccel.accelerator.cuda import CUDA_Accelerator
from anyaccel.accelerator.npu import NPU_Accelerator
from anyaccel.accelerator.xpu import XPU_Accelerator

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8]


def _shape() -> tuple:
    return tuple(random.randint(1, 6) for _ in range(random.randint(1, 3)))


def test_cpu_pin_empty_and_like():
    acc = CPU_Accelerator()
    shape, dtype = _shape(), random.choice(DTYPES)
    for buffer in (acc.pin_empty(*shape, dtype=dtype), acc.pin_empty(shape, dtype=dtype),
                   acc.pin_empty(list(shape), dtype=dtype), acc.pin_empty(torch.Size(shape), dtype=dtype)):
        assert buffer.shape == shape and buffer.dtype == dtype and buffer.device.type == "cpu"
    template = torch.randn(*shape)
    like = acc.pin_empty_like(template)
    assert like.shape == template.shape and like.dtype == template.dtype and like.data_ptr() != template.data_ptr()
    assert acc.pin_empty_like(template, dtype=dtype).dtype == dtype
    assert acc.pin_empty(0, dtype=dtype).numel() == 0 and acc.pin_empty(dtype=dtype).shape == ()


@pytest.mark.parametrize("device", ["meta", "cuda", "cuda:1", "xpu", "not-a-device", 3.5])
def test_pin_empty_refuses_non_host_devices(device):
    acc = CPU_Accelerator()
    with pytest.raises(NotHostDeviceError, match="must be 'cpu'") as info:
        acc.pin_empty(2, dtype=torch.float, device=device)
    assert isinstance(info.value, ValueError) and info.value.device == device
    with pytest.raises(ValueError, match=repr(device)[:8]):
        acc.pin_empty_like(torch.ones(2), device=device)


def test_cpu_pinning_is_a_noop_like_deepspeeds():
    acc = CPU_Accelerator()
    t = torch.randn(*_shape())
    assert acc.pin_memory(t) is t and acc.is_pinned(acc.pin_memory(t)) == t.is_pinned() is False
    fresh = acc.pin_memory(t, make_copy=False)
    assert fresh.shape == t.shape and fresh.data_ptr() != t.data_ptr()  # DeepSpeed's CPU returns t itself
    assert acc.pin_memory(t, make_copy=False, match_shape=False).shape == (t.numel(),)
    assert acc.unpin_memory(t) is None
    assert acc.pin_memory_alignment() == 1
    assert acc.register_host_memory(t.data_ptr(), t.nbytes) is False
    assert acc.unregister_host_memory(t.data_ptr()) is None


def test_pinned_bytes_are_tracked(monkeypatch):
    acc = CPU_Accelerator()
    counted = []
    monkeypatch.setattr(acc, "_track_pinned_memory", counted.append)
    shape = _shape()
    acc.pin_empty(*shape, dtype=torch.float64)
    acc.pin_memory(torch.ones(3))  # CPU: nothing is page-locked, so nothing is counted (DeepSpeed's rule)
    assert counted == []
    monkeypatch.setattr(type(acc), "_torch_pins_host_memory", True)
    monkeypatch.setattr(type(acc), "_torch_empty_pinned", lambda self, t, s: t.new_empty(tuple(s)))
    monkeypatch.setattr(type(acc), "_torch_pin_memory", lambda self, t: t.clone())
    acc.pin_empty(*shape, dtype=torch.float64)
    acc.pin_memory(torch.ones(3))
    numel = 1
    for d in shape:
        numel *= d
    assert counted == [numel * 8, 12]


class FakeNative:
    """DeepSpeed's NativePinnedMemory interface, recording calls."""

    def __init__(self) -> None:
        self.calls: list = []
        self.pinned: set = set()

    def pin(self, tensor, make_copy=True, match_shape=True):
        self.calls.append(("pin", make_copy, match_shape))
        out = tensor.clone().reshape(tensor.shape if match_shape else (tensor.numel(),))
        self.pinned.add(out.data_ptr())
        return out

    def pin_empty(self, template, shape):
        self.calls.append(("pin_empty", template.dtype, shape))
        out = torch.empty(shape, dtype=template.dtype)
        self.pinned.add(out.data_ptr())
        return out

    def is_pinned(self, tensor):
        return tensor.data_ptr() in self.pinned

    def unpin(self, tensor):
        self.pinned.discard(tensor.data_ptr())
        return True


def test_a_native_backend_takes_every_pinning_call(monkeypatch):
    acc = CPU_Accelerator()
    native = FakeNative()
    monkeypatch.setattr(acc, "_native_pinned_memory", lambda: native)
    t = torch.randn(4, 2)
    pinned = acc.pin_memory(t, make_copy=True, match_shape=False)
    assert pinned.shape == (8,) and acc.is_pinned(pinned) and native.calls[-1] == ("pin", True, False)
    scratch = acc.pin_empty(3, 3, dtype=torch.half)
    assert native.calls[-1] == ("pin_empty", torch.half, (3, 3)) and acc.is_pinned(scratch)
    acc.pin_empty_like(t, dtype=torch.bfloat16)
    assert native.calls[-1] == ("pin_empty", torch.bfloat16, (4, 2))
    assert acc.unpin_memory(pinned) is True and not acc.is_pinned(pinned)


class FakeRuntime:
    """``torch.cuda.cudart()`` / ``torch.npu.npurt()`` stand-in returning chosen error codes."""

    def __init__(self, register: str, unregister: str, code: int) -> None:
        self.calls: list = []
        setattr(self, register, lambda *a: self._call("register", a, code))
        setattr(self, unregister, lambda *a: self._call("unregister", a, code))

    def _call(self, what, args, code):
        self.calls.append((what, args))
        return code


@pytest.mark.parametrize("cls,accessor,register,unregister,flags,alignment", [
    (CUDA_Accelerator, "cudart", "cudaHostRegister", "cudaHostUnregister", 0, 1),
    (NPU_Accelerator, "npurt", "npuHostRegister", "npuHostUnregister", 2, 4096),
])
def test_host_registration_through_the_device_runtime(fake_module_factory, monkeypatch, cls, accessor,
                                                      register, unregister, flags, alignment):
    name = cls._name
    if name == "npu":  # the NPU accelerator imports torch_npu: an empty stand-in, removed after the test
        torch_npu = types.ModuleType("torch_npu")
        torch_npu.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None)
        monkeypatch.setitem(sys.modules, "torch_npu", torch_npu)
    module = fake_module_factory(name)
    runtime = FakeRuntime(register, unregister, 0)
    setattr(module, accessor, lambda: runtime)
    acc = cls()
    address, size = random.randrange(1, 1 << 40) * alignment, random.randrange(1, 1 << 30)
    assert acc.pin_memory_alignment() == alignment
    assert acc.register_host_memory(address, size) is True and acc.unregister_host_memory(address) is None
    assert runtime.calls == [("register", (address, size, flags)), ("unregister", (address,))]
    failing = FakeRuntime(register, unregister, 700)
    setattr(module, accessor, lambda: failing)
    with pytest.raises(HostRegistrationError, match="code 700") as info:
        acc.register_host_memory(address, size)
    assert info.value.code == 700 and info.value.address == address and isinstance(info.value, RuntimeError)
    delattr(module, accessor)
    assert acc.register_host_memory(address, size) is False  # runtime without the call: unsupported


def test_xpu_has_no_host_registration(fake_module_factory):
    fake_module_factory("xpu")
    acc = XPU_Accelerator()
    assert acc.register_host_memory(4096, 4096) is False and acc.pin_memory_alignment() == 1
