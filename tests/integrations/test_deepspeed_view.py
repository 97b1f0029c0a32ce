"""The DeepSpeed-facing view and builder adapters, in this process and without importing DeepSpeed."""

from __future__ import annotations

import pickle
import sys
import types

import pytest
import torch

from anyaccel.accelerator.cpu import CPU_Accelerator
from anyaccel.integrations.deepspeed import DeepSpeedABIMissingError, builders
from anyaccel.integrations.deepspeed.view import DeepSpeedFacingAccelerator, deepspeed_view, view_class


def test_view_shares_state_and_keeps_the_class():
    acc = CPU_Accelerator()
    view = deepspeed_view(acc)
    assert isinstance(view, CPU_Accelerator) and isinstance(view, DeepSpeedFacingAccelerator)
    assert type(view).__name__ == "CPU_Accelerator" and view.__dict__ is acc.__dict__
    assert deepspeed_view(view) is view and view_class(CPU_Accelerator) is type(view)
    view.set_compile_backend("eager")
    assert acc.get_compile_backend() == "eager"  # one state
    assert view.op_builder_dir() == "deepspeed.ops.op_builder.cpu" and acc.op_builder_dir() == "anyaccel.op_builder"
    assert "DeepSpeed view" in repr(view)
    copy = pickle.loads(pickle.dumps(view))
    assert type(copy) is type(view) and copy.get_compile_backend() == "eager" and copy.__dict__ is not acc.__dict__


def test_foreign_accelerators_pass_through():
    foreign = object()
    assert deepspeed_view(foreign) is foreign


class FakeBuilder:
    """An anyaccel-style builder whose load() returns a module with chosen functions."""

    NAME = "cpu_adam"
    functions: tuple = ()

    def load(self, verbose: bool = False):
        return types.SimpleNamespace(**{name: (lambda *a: None) for name in self.functions})

    def jit_load(self, verbose: bool = False):
        return self.load(verbose)


def _adapter(functions: tuple) -> type:
    cls = type("FakeBuilder", (FakeBuilder,), {"functions": functions})
    return builders.adapter_class(cls, "CPUAdamBuilder", "cpu")


def test_adapter_gives_deepspeeds_builder_contract():
    adapter = _adapter(builders.required_functions("CPUAdamBuilder"))
    builder = adapter()
    assert builder.name == "cpu_adam" and adapter("other").name == "other"
    assert issubclass(adapter, FakeBuilder) and adapter.deepspeed_builder_name == "CPUAdamBuilder"
    module = builder.load()
    assert hasattr(module, "create_adam") and hasattr(builder.jit_load(), "adam_update")
    assert builders.adapter_class(adapter.__mro__[2], "CPUAdamBuilder", "cpu") is adapter  # cached


def test_missing_abi_raises_and_never_falls_back_to_deepspeeds_builder():
    adapter = _adapter(("adam_step",))  # a module without DeepSpeed's functions (a plug-in spec without the ABI)
    with pytest.raises(DeepSpeedABIMissingError) as info:
        adapter().load()
    assert info.value.op == "cpu_adam" and info.value.missing[:4] == ("create_adam", "adam_update", "adam_rollback",
                                                                        "destroy_adam")
    assert "anyaccel.deepspeed_abi" in str(info.value) and not hasattr(builders, "ABI_FALLBACK_ENV")


def test_module_abi_table_is_read_from_the_declarations():
    from anyaccel.integrations.deepspeed.abi import all_abis

    declared = {b: fns for abi in all_abis() for b, fns in abi.builders}
    assert dict(builders.DEEPSPEED_MODULE_ABI) == declared
    assert builders.DEEPSPEED_MODULE_ABI["FusedAdamBuilder"] == ("multi_tensor_adam",)
    assert set(builders.DEEPSPEED_MODULE_ABI) == {"CPUAdamBuilder", "FusedAdamBuilder", "CPULionBuilder",
                                                  "FusedLionBuilder", "CPUAdagradBuilder", "FusedLambBuilder",
                                                  "AsyncIOBuilder", "PinMemoryBuilder"}
    every = set(builders.DEEPSPEED_MODULE_ABI["CPUAdamBuilder"])
    linux_only = every - set(builders.required_functions("CPUAdamBuilder"))
    assert linux_only == (set() if sys.platform.startswith("linux") else
                          {f for f in builders.DEEPSPEED_MODULE_ABI["CPUAdamBuilder"] if "ctrl" in f or f in
                           ("zenflow_adam_run_worker", "zenflow_adam_submit", "zenflow_adam_wait")})


def test_pinning_through_the_view_uses_deepspeeds_native_backend_and_tracker(monkeypatch):
    calls: list = []
    native = types.SimpleNamespace(
        pin=lambda t, make_copy=True, match_shape=True: calls.append("pin") or t.clone(),
        pin_empty=lambda template, shape: calls.append(("pin_empty", shape)) or torch.empty(shape),
        is_pinned=lambda t: True,
        unpin=lambda t: calls.append("unpin") or True,
    )
    pin_memory = types.ModuleType("deepspeed.utils.pin_memory")
    pin_memory.get_active_native_pinned_memory = lambda: native  # type: ignore[attr-defined]
    tracker = types.ModuleType("deepspeed.utils.pin_memory_tracker")
    tracker.track_pinned_memory = lambda n: calls.append(("track", n))  # type: ignore[attr-defined]
    for name, module in (("deepspeed", types.ModuleType("deepspeed")),
                         ("deepspeed.utils", types.ModuleType("deepspeed.utils")),
                         ("deepspeed.utils.pin_memory", pin_memory),
                         ("deepspeed.utils.pin_memory_tracker", tracker)):
        monkeypatch.setitem(sys.modules, name, module)
    view = deepspeed_view(CPU_Accelerator())
    t = torch.ones(2, 3)
    view.pin_memory(t)
    view.pin_empty_like(t)
    assert view.is_pinned(torch.zeros(1)) is True and view.unpin_memory(t) is True
    assert calls == [("track", 24), "pin", ("track", 24), ("pin_empty", (2, 3)), "unpin"]
    assert CPU_Accelerator().pin_memory(t) is t  # anyaccel's own object: torch path, no DeepSpeed
