"""Drift checks: our accelerators against the installed DeepSpeed's (read from source, never imported), and
``@override`` on every overriding member (a misspelt DeepSpeed member must not silently fall back to a default).
"""

from __future__ import annotations

import inspect

import pytest

from anyaccel.accelerator import DeepSpeedAccelerator, TorchDeviceAccelerator
from anyaccel.accelerator.cpu import CPU_Accelerator
from anyaccel.accelerator.cuda import CUDA_Accelerator
from anyaccel.accelerator.mps import MPS_Accelerator
from anyaccel.accelerator.npu import NPU_Accelerator
from anyaccel.accelerator.xpu import XPU_Accelerator
from anyaccel.integrations.deepspeed.view import DeepSpeedFacingAccelerator
from anyaccel.testing.interface_diff import deepspeed_classes, missing_members, signature_problems

OURS = {
    "CPU_Accelerator": CPU_Accelerator,
    "CUDA_Accelerator": CUDA_Accelerator,
    "XPU_Accelerator": XPU_Accelerator,
    "NPU_Accelerator": NPU_Accelerator,
    "MPS_Accelerator": MPS_Accelerator,
}
#: Public members of DeepSpeed's concrete classes we deliberately do not have (docs/deepspeed.md says why).
NOT_MIRRORED = {"class_dict"}  # DeepSpeed's per-instance builder cache; anyaccel's op registry replaces it


@pytest.fixture(scope="module")
def deepspeed() -> dict:
    classes = deepspeed_classes()
    if not classes:
        pytest.skip("DeepSpeed is not installed (a test-only dependency)")
    return classes


def test_every_abstract_member_exists_with_a_compatible_signature(deepspeed):
    abstract = deepspeed["DeepSpeedAccelerator"]
    assert len(abstract) >= 79
    assert missing_members(DeepSpeedAccelerator, abstract) == []
    assert signature_problems(DeepSpeedAccelerator, abstract, check_names=True) == {}


@pytest.mark.parametrize("name", sorted(OURS))
def test_every_public_member_of_deepspeeds_concrete_class_exists(deepspeed, name):
    theirs = deepspeed[name]
    missing = set(missing_members(OURS[name], theirs, include_private=False)) - NOT_MIRRORED
    assert missing == set()
    # DeepSpeed's concrete classes rename positional parameters (create_op_builder(self, op_name)): arity only
    assert signature_problems(OURS[name], theirs, check_names=False) == {}


def test_deepspeed_only_class_members_are_on_the_base(deepspeed):
    """Public members any of DeepSpeed's accelerators (HPU, MLU, SDAA...) has are written once, on the base."""
    extra = {"get_rss", "reset_rss", "apply_hpu_workarounds"} | NOT_MIRRORED  # CPU- / HPU-specific helpers
    for name, members in deepspeed.items():
        assert set(missing_members(DeepSpeedAccelerator, members, include_private=False)) <= extra, name


def test_values_deepspeeds_own_code_depends_on():
    # launcher/runner.py indexes visible_devices_envs()[0] on every accelerator
    for cls in OURS.values():
        assert cls._visible_devices_envs and cls._visible_devices_envs[0].isupper()
    assert CPU_Accelerator._visible_devices_envs == MPS_Accelerator._visible_devices_envs == ("CUDA_VISIBLE_DEVICES",)
    # MPS is a synchronized device in DeepSpeed (all four flags True) and has no float64
    mps = MPS_Accelerator()
    flags = (mps.is_synchronized_device(), mps.use_host_timers(), mps.resolves_data_dependency(),
             mps.handles_memory_backpressure())
    assert flags == (True, True, True, True) and mps.is_fp64_supported() is False
    assert CUDA_Accelerator.supports_nvtx_domain is True and CPU_Accelerator.supports_nvtx_domain is False
    assert NPU_Accelerator._pin_memory_alignment == 4096


# ---------------------------------------------------------------------------------------------------- @override
#: Members a class adds that override nothing (everything else in a class body must override, decorated).
OWN_MEMBERS = {
    TorchDeviceAccelerator: {"probe"},
    CPU_Accelerator: {"_gauge", "_current", "get_rss", "reset_rss"},
    CUDA_Accelerator: {"is_rocm", "_capability"},
    MPS_Accelerator: {"_gauge", "_check_index"},
    XPU_Accelerator: set(),
    NPU_Accelerator: set(),
    DeepSpeedFacingAccelerator: {"__reduce__"},
}


def _functions(cls: type):
    """(name, underlying function) for every function-like member defined in ``cls``'s own body."""
    for name, raw in vars(cls).items():
        if isinstance(raw, property):
            raw = raw.fget
        elif isinstance(raw, (staticmethod, classmethod)):
            raw = raw.__func__
        if inspect.isfunction(raw):
            yield name, raw


def _defined_in_bases(cls: type, name: str) -> bool:
    return any(name in vars(base) for base in cls.__mro__[1:] if base is not object)


@pytest.mark.parametrize("cls", list(OWN_MEMBERS), ids=lambda c: c.__name__)
def test_overriding_members_are_decorated_and_decorations_override(cls):
    undecorated, stray, unlisted = [], [], []
    for name, function in _functions(cls):
        overrides = _defined_in_bases(cls, name)
        decorated = getattr(function, "__override__", False)
        if overrides and not decorated and not (name.startswith("__") and name != "__repr__"):
            undecorated.append(name)
        if decorated and not overrides:
            stray.append(name)  # what a type checker reports: @override on a misspelt name
        if not overrides and name not in OWN_MEMBERS[cls] and not name.startswith("__"):
            unlisted.append(name)  # a new member: a misspelt DeepSpeed name would land here
    assert undecorated == [], f"add @typing_extensions.override to {cls.__name__}.{undecorated}"
    assert stray == [], f"{cls.__name__}: @override on members no base defines: {stray}"
    assert unlisted == [], f"{cls.__name__} adds members that override nothing: {unlisted} (misspelt?)"


def test_the_check_catches_a_misspelt_member():
    from typing_extensions import override

    class Typo(CPU_Accelerator):
        @override
        def is_fp64_suported(self) -> bool:  # misspelt on purpose
            return False

    assert [n for n, f in _functions(Typo) if getattr(f, "__override__", False) and not _defined_in_bases(Typo, n)] \
        == ["is_fp64_suported"]
