"""``device_name()`` and ``on_accelerator()`` read every device argument kind on every built-in accelerator.

``x.cuda(arg)`` is migrated to ``x.to(get_accelerator().device_name(arg))`` whatever ``arg`` is, so
``device_name`` must turn each kind ``Tensor.cuda`` accepts into a valid device string, never ``"cuda:cuda"``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from anyaccel.accelerator.abstract import DeepSpeedAccelerator
from anyaccel.accelerator.cpu import CPU_Accelerator
from anyaccel.accelerator.cuda import CUDA_Accelerator
from anyaccel.accelerator.mps import MPS_Accelerator
from anyaccel.accelerator.npu import NPU_Accelerator
from anyaccel.accelerator.xpu import XPU_Accelerator

ACCELERATORS = [CPU_Accelerator, CUDA_Accelerator, XPU_Accelerator, NPU_Accelerator, MPS_Accelerator]

# (argument, the index it names, or None for "no index")
KINDS: list[tuple[Any, int | None]] = [
    (None, None),
    (0, 0),
    (3, 3),
    ("2", 2),
    ("cuda", None),
    ("cuda:1", 1),
    (torch.device("cuda"), None),
    (torch.device("cuda", 2), 2),
]


def _make(cls: type[DeepSpeedAccelerator]) -> DeepSpeedAccelerator:
    """An instance without ``__init__`` (as DeepSpeed plug-ins are): NPU's ``__init__`` imports torch_npu."""
    return cls.__new__(cls)


def _torch_knows(device_type: str) -> bool:
    """False for a device type this torch cannot parse ("npu" before torch_npu registers it)."""
    try:
        torch.device(device_type)
    except RuntimeError:
        return False
    return True


def _expected(acc: DeepSpeedAccelerator, index: int | None) -> str:
    if acc.device_type == "cpu" or index is None:
        return acc.device_type
    return f"{acc.device_type}:{index}"


@pytest.mark.parametrize("cls", ACCELERATORS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("value,index", KINDS, ids=[repr(k) for k, _ in KINDS])
def test_device_name_reads_every_kind(cls: type[DeepSpeedAccelerator], value: Any, index: int | None) -> None:
    acc = _make(cls)
    name = acc.device_name(value)
    assert name == _expected(acc, index)
    if _torch_knows(acc.device_type):
        assert torch.device(name).type == acc.device_type  # always a valid device string


@pytest.mark.parametrize("cls", ACCELERATORS, ids=lambda c: c.__name__)
def test_device_name_accepts_its_own_devices(cls: type[DeepSpeedAccelerator]) -> None:
    acc = _make(cls)
    if not _torch_knows(acc.device_type):
        pytest.skip(f"this torch does not know the {acc.device_type!r} device type")
    own = acc.device_name(1)
    assert acc.device_name(own) == own
    assert acc.device_name(torch.device(own)) == own


@pytest.mark.parametrize("cls", [CUDA_Accelerator, XPU_Accelerator, CPU_Accelerator], ids=lambda c: c.__name__)
@pytest.mark.parametrize("value,error,fragment", [
    (True, TypeError, "True (bool)"),
    (1.0, TypeError, "1.0 (float)"),
    (-1, ValueError, "negative device index -1"),
    ("gpu0", ValueError, "'gpu0', which is not a device string"),
])
def test_device_name_rejects_with_the_value_and_the_fix(
    cls: type[DeepSpeedAccelerator], value: Any, error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error, match="device_name") as info:
        _make(cls).device_name(value)
    assert fragment in str(info.value)


def test_device_of_another_type_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'mps' device .* this accelerator's devices are 'cuda'"):
        CUDA_Accelerator().device_name("mps:0")


@pytest.mark.parametrize("cls", ACCELERATORS, ids=lambda c: c.__name__)
def test_on_accelerator_reads_tensors_devices_and_strings(cls: type[DeepSpeedAccelerator]) -> None:
    acc = _make(cls)
    own = acc.device_type
    if not _torch_knows(own):
        pytest.skip(f"this torch does not know the {own!r} device type")
    for where in (own, f"{own}:0", torch.device(own)):
        assert acc.on_accelerator(where) is True
        assert acc.on_accelerator(where, exclude_cpu=True) is (own != "cpu")
    other = "cpu" if own != "cpu" else "meta"
    assert acc.on_accelerator(other) is False
    assert acc.on_accelerator(torch.empty(1, device="meta")) is False
    # DeepSpeed's behaviour is kept: on the CPU accelerator a CPU tensor is on it, unless the CPU is excluded
    assert acc.on_accelerator(torch.ones(1)) is (own == "cpu")
    assert acc.on_accelerator(torch.ones(1), exclude_cpu=True) is False


def test_on_accelerator_rejects_what_names_no_device() -> None:
    with pytest.raises(TypeError, match="accepts a tensor, a torch.device or a device string"):
        CPU_Accelerator().on_accelerator(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'nowhere', which is not a device string"):
        CUDA_Accelerator().on_accelerator("nowhere", exclude_cpu=True)
