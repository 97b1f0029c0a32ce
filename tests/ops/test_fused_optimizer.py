"""The device optimizers (FusedAdam, FusedLion on anyaccel/ops/optimizer's ListOptimizer), without a GPU.

``FusedAdam`` / ``FusedLion`` choose their kernel per device type through the implementation loader, so on
CPU tensors they run the family's ``cpu`` implementation (the host kernel, same schema) or a forced one (here
the NPU implementations registered for the CPU through ``python_ops``): bucketing, master weights, the
16-bit state mode, ``set_grad_none`` and ``load_state_dict`` are checked end to end against torch.optim.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from anyaccel.op_builder.core.loaded_ops import LOADED_OPS
from anyaccel.ops import dispatch, registry
from anyaccel.ops.adam import FusedAdam
from anyaccel.ops.lion import FusedLion


def _pair(shapes, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ref = [torch.nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in shapes]
    ours = [torch.nn.Parameter(p.detach().clone()) for p in ref]
    return ref, ours


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("impl", [None, "pycpu"])
@pytest.mark.parametrize("adam_w_mode", [True, False])
def test_fused_adam_matches_torch_on_cpu(impl, adam_w_mode: bool, python_impls) -> None:
    shapes = [(33, 65), (1000,), (7,), (0,), (4, 4097)]
    ref, ours = _pair(shapes)
    cls = torch.optim.AdamW if adam_w_mode else torch.optim.Adam
    topt = cls(ref, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05)
    opt = FusedAdam(ours, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05, adam_w_mode=adam_w_mode, impl=impl)
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        for a, b in zip(ref, ours, strict=True):
            g = torch.randn(a.shape, generator=gen)
            a.grad, b.grad = g, g.clone()
        topt.step()
        opt.step()
    for a, b in zip(ref, ours, strict=True):
        if a.numel():
            assert _rel(b, a) < 1e-5
        assert opt.state[b]["step"] == 4
    assert dispatch.choose("adam", "cpu", impl).name == (impl or "cpu")


@pytest.mark.parametrize("impl", [None, "pycpu"])
def test_fused_adam_master_weights_write_the_16bit_params(impl, python_impls) -> None:
    p = torch.nn.Parameter(torch.randn(10_001).to(torch.bfloat16))
    master = p.detach().double().clone()
    m = torch.zeros_like(master)
    v = torch.zeros_like(master)
    opt = FusedAdam([p], lr=1e-3, master_weights=True, impl=impl)
    gen = torch.Generator().manual_seed(2)
    for step in (1, 2, 3):
        g = torch.randn(10_001, generator=gen).to(torch.bfloat16)
        p.grad = g
        opt.step()
        m = 0.9 * m + 0.1 * g.double()
        v = 0.999 * v + 0.001 * g.double() ** 2
        master = master - 1e-3 / (1 - 0.9**step) * m / (v.sqrt() / (1 - 0.999**step) ** 0.5 + 1e-8)
    assert opt.state[p]["master"].dtype == torch.float32 and opt.state[p]["exp_avg"].dtype == torch.float32
    assert _rel(opt.state[p]["master"], master) < 1e-5
    assert torch.equal(p.detach(), opt.state[p]["master"].to(torch.bfloat16))


def test_fused_adam_16bit_state_and_mixed_buckets_in_one_group(python_impls) -> None:
    gen = torch.Generator().manual_seed(3)
    ps = [torch.nn.Parameter(torch.randn(65, generator=gen).to(d))
          for d in (torch.bfloat16, torch.float32, torch.float16, torch.float32)]
    opt = FusedAdam(ps, lr=1e-2, fp32_optimizer_states=False)
    before = [p.detach().clone() for p in ps]
    for p in ps:
        p.grad = torch.randn(65, generator=gen).to(p.dtype)
    opt.step()
    for p, b in zip(ps, before, strict=True):
        assert opt.state[p]["exp_avg"].dtype == (p.dtype if p.dtype != torch.float32 else torch.float32)
        assert not torch.equal(p.detach(), b)
    assert len(opt._plans[0].buckets) == 3  # bf16, fp32, fp16


@pytest.mark.parametrize("impl", [None, "pycpu"])
def test_fused_lion_matches_the_update_on_cpu(impl, python_impls) -> None:
    gen = torch.Generator().manual_seed(4)
    p = torch.nn.Parameter(torch.randn(5000, generator=gen))
    ref_p, ref_m = p.detach().double().clone(), torch.zeros(5000, dtype=torch.float64)
    opt = FusedLion([p], lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, impl=impl)
    for _ in range(3):
        g = torch.randn(5000, generator=gen)
        p.grad = g
        opt.step()
        c = 0.9 * ref_m + 0.1 * g.double()
        ref_p = ref_p * (1 - 1e-4) - 1e-3 * torch.sign(c)
        ref_m = 0.99 * ref_m + 0.01 * g.double()
    torch.testing.assert_close(opt.state[p]["exp_avg"].double(), ref_m, rtol=1e-5, atol=1e-6)
    assert ((p.detach().double() - ref_p).abs() > 1e-5).float().mean() < 1e-3  # sign ties only
    assert int(opt.state[p]["step"]) == 3  # counted for checkpoints and schedulers; Lion's math does not use it


def test_set_grad_none_and_load_state_dict_forget_the_plan(python_impls) -> None:
    p = torch.nn.Parameter(torch.randn(8))
    opt = FusedAdam([p], lr=1e-2)
    p.grad = torch.randn(8)
    opt.step()
    opt.zero_grad()
    assert p.grad is None
    keep = FusedAdam([torch.nn.Parameter(torch.randn(3))], set_grad_none=False)
    q = keep.param_groups[0]["params"][0]
    q.grad = torch.ones(3)
    keep.zero_grad()
    assert q.grad is not None and torch.equal(q.grad, torch.zeros(3))
    saved = opt.state_dict()
    p.grad = torch.randn(8)
    opt.step()
    first = opt._plans[0]
    opt.load_state_dict(saved)
    assert opt._plans == {}
    opt.step()
    assert opt._plans[0] is not first


@pytest.mark.parametrize("cls,kwargs,pattern", [
    (FusedAdam, {"lr": -1.0}, r"^FusedAdam: lr=-1\.0 is invalid; accepted: a finite lr >= 0 representable in float32$"),
    (FusedAdam, {"lr": float("nan")}, r"^FusedAdam: lr=nan is invalid; accepted: a finite lr >= 0"),
    (FusedAdam, {"betas": (1.0, 0.999)},
     r"^FusedAdam: betas\[0\]=1\.0 is invalid; accepted: a finite 0 <= betas\[0\] < 1"),
    (FusedAdam, {"weight_decay": -0.1}, r"weight_decay=-0\.1 is invalid"),
    (FusedLion, {"betas": (0.9, 1.5)},
     r"^FusedLion: betas\[1\]=1\.5 is invalid; accepted: a finite 0 <= betas\[1\] <= 1"),
    (FusedLion, {"lr": float("inf")}, r"^FusedLion: lr=inf is invalid; accepted: a finite lr >= 0"),
])
def test_front_end_range_checks(cls, kwargs, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        cls([torch.nn.Parameter(torch.randn(3))], **kwargs)


def test_amsgrad_is_not_implemented() -> None:
    with pytest.raises(NotImplementedError, match="amsgrad"):
        FusedAdam([torch.nn.Parameter(torch.randn(3))], amsgrad=True)


@pytest.mark.parametrize("cls,kwargs", [(FusedAdam, {"eps": 0.0}), (FusedAdam, {"lr": 1e39}),
                                        (FusedLion, {"weight_decay": 1e39})])
def test_values_every_kernel_refuses_are_refused_at_construction(cls, kwargs) -> None:
    with pytest.raises(ValueError):
        cls([torch.nn.Parameter(torch.randn(3))], **kwargs)


def test_forcing_an_unknown_implementation_names_the_registered_ones(python_impls) -> None:
    p = torch.nn.Parameter(torch.randn(3))
    p.grad = torch.randn(3)
    with pytest.raises(dispatch.UnknownImplementationError, match=r"op 'adam' has no implementation 'nope'"):
        FusedAdam([p], impl="nope").step()


def test_the_forced_implementation_is_the_one_that_runs(python_impls, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    row = registry._implementations["lion"]["pycpu"]
    loaded = row.loader()

    class Spy:
        def lion_step(self, *args):
            seen.append(len(args[0]))
            return loaded.lion_step(*args)

    monkeypatch.setitem(registry._implementations["lion"], "pycpu", dataclasses.replace(row, loader=Spy))
    LOADED_OPS.clear()
    ps = [torch.nn.Parameter(torch.randn(4)) for _ in range(3)]
    for p in ps:
        p.grad = torch.randn(4)
    FusedLion(ps, impl="pycpu").step()
    assert seen == [3]  # one launch for the bucket of three fp32 parameters
