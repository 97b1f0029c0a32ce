"""The shared base of the host optimizers (anyaccel/ops/host_optimizer.py) and the builder-backed
implementation factories (anyaccel/op_builder/implementations.py)."""

from __future__ import annotations

import pytest
import torch

from anyaccel.ops import dispatch as implementations
from anyaccel.ops.adam import CPUAdam
from anyaccel.ops.cpu_lion import CPULion
from anyaccel.ops.host_optimizer import check_hyper_parameters


def test_each_optimizer_class_has_its_own_kernel_cache_and_lock():
    assert CPUAdam._op_lock is not CPULion._op_lock
    assert CPUAdam._BUILDER != CPULion._BUILDER

    class MyAdam(CPUAdam):  # a user subclass that does not set _BUILDER shares its parent's op
        pass

    assert MyAdam._BUILDER == CPUAdam._BUILDER


def test_both_optimizers_step_through_their_own_kernel(op_cache_dir, monkeypatch):
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(op_cache_dir))
    gen = torch.Generator().manual_seed(7)
    for cls in (CPUAdam, CPULion):
        p = torch.nn.Parameter(torch.randn(37, generator=gen))
        p.grad = torch.randn(37, generator=gen)
        before = p.detach().clone()
        cls([p], lr=1e-2).step()
        assert not torch.equal(p.detach(), before), cls.__name__
    assert CPUAdam._op_module is not CPULion._op_module
    assert CPUAdam._op_module.namespace.startswith("anyaccel_cpu_adam_")
    assert CPULion._op_module.namespace.startswith("anyaccel_cpu_lion_")


@pytest.mark.parametrize("value,pattern", [
    (float("inf"), r"Opt: lr=inf is invalid; accepted: a finite lr >= 0"),
    (-1.0, r"Opt: lr=-1.0 is invalid"),
    (torch.ones(2), r"Opt: lr.*Python number"),
])
def test_shared_hyper_parameter_check_names_value_and_range(value, pattern):
    with pytest.raises(ValueError, match=pattern):
        check_hyper_parameters("Opt", (("lr", value, "a finite lr >= 0", lambda v: v >= 0),))


def test_builder_probe_and_loader_use_the_class_at_call_time(monkeypatch):
    class FakeBuilder:
        def compatibility(self):
            return False, "no device"

        def load(self):
            return "loaded"

    probe = implementations.builder_probe(FakeBuilder)
    loader = implementations.builder_loader(FakeBuilder)
    assert probe() == (False, "no device") and loader() == "loaded"
    monkeypatch.setattr(FakeBuilder, "compatibility", lambda self: (True, ""))
    assert probe() == (True, "")  # a patched class is seen: the builder is made at each probe
