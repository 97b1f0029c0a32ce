"""``state_dict()`` lays out ``step`` as ``torch.optim`` does (one tensor per parameter), so a checkpoint continues
identically in ``torch.optim.AdamW`` / ``Adam`` and back.

Reference: ``torch.optim.AdamW`` (or ``Adam``) on float64 copies of the parameters for all N + M steps, with the
same gradients. Our fp32 runs must stay within fp32 rounding of it (relative 1e-5 over 7 steps); a step count
that advanced once per parameter per step (a shared ``step`` tensor loaded into torch) changes the bias
correction and misses by orders of magnitude more.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch

from anyaccel.ops.adam.cpu import CPUAdam
from anyaccel.ops.adam.fused import FusedAdam

SIZES = (1, 7, 33, 130)
HYPER = {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.05}
N, M = 3, 4


def _grads(step: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return [torch.randn(n, generator=gen, dtype=torch.float64) for n in SIZES]


def _start(dtype: torch.dtype) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(n, generator=gen, dtype=torch.float64).to(dtype)) for n in SIZES]


def _run(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], steps: range) -> None:
    for s in steps:
        for p, g in zip(params, _grads(s), strict=True):
            p.grad = g.to(p.dtype)
        opt.step()


def _ours(cls: type, params: list[torch.nn.Parameter], adamw: bool) -> torch.optim.Optimizer:
    mode = {"adamw_mode": adamw} if cls is CPUAdam else {"adam_w_mode": adamw}
    return cls(params, **HYPER, **mode)


def _saved(opt: torch.optim.Optimizer) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _reference(adamw: bool) -> list[torch.Tensor]:
    params = _start(torch.float64)
    _run((torch.optim.AdamW if adamw else torch.optim.Adam)(params, **HYPER), params, range(N + M))
    return [p.detach() for p in params]


def _assert_close(params: list[torch.nn.Parameter], reference: list[torch.Tensor]) -> None:
    for p, r in zip(params, reference, strict=True):
        err = ((p.detach().double() - r).norm() / r.norm()).item()
        assert err < 1e-5, f"relative error {err:.3g} against the float64 reference"


@pytest.mark.parametrize("cls", [CPUAdam, FusedAdam])
def test_state_dict_gives_every_parameter_its_own_step_tensor(cls: type) -> None:
    params = _start(torch.float32)
    opt = _ours(cls, params, True)
    _run(opt, params, range(N))
    state = opt.state_dict()["state"]
    steps = [state[i]["step"] for i in range(len(SIZES))]
    assert len({id(s) for s in steps}) == len(SIZES)
    for s in steps:
        assert s.shape == () and s.dtype == torch.float32 and s.device == torch.device("cpu") and float(s) == N
    steps[0].add_(1)  # the state dict's tensors are not the optimizer's counter
    assert float(opt.state[params[0]]["step"]) == N


@pytest.mark.parametrize("adamw", [True, False])
@pytest.mark.parametrize("cls", [CPUAdam, FusedAdam])
def test_our_checkpoint_continues_identically_in_torch(cls: type, adamw: bool) -> None:
    params = _start(torch.float32)
    opt = _ours(cls, params, adamw)
    _run(opt, params, range(N))
    saved = _saved(opt)
    torch_opt = (torch.optim.AdamW if adamw else torch.optim.Adam)(params, **HYPER)
    torch_opt.load_state_dict(saved)
    _run(torch_opt, params, range(N, N + M))
    _assert_close(params, _reference(adamw))
    assert [float(torch_opt.state[p]["step"]) for p in params] == [N + M] * len(SIZES)


@pytest.mark.parametrize("adamw", [True, False])
@pytest.mark.parametrize("cls", [CPUAdam, FusedAdam])
def test_a_torch_checkpoint_continues_identically_here(cls: type, adamw: bool) -> None:
    params = _start(torch.float32)
    torch_opt = (torch.optim.AdamW if adamw else torch.optim.Adam)(params, **HYPER)
    _run(torch_opt, params, range(N))
    opt = _ours(cls, params, adamw)
    opt.load_state_dict(_saved(torch_opt))
    _run(opt, params, range(N, N + M))
    assert [float(opt.state[p]["step"]) for p in params] == [N + M] * len(SIZES)
    _assert_close(params, _reference(adamw))


def test_an_old_checkpoint_with_one_shared_step_still_loads() -> None:
    """Checkpoints written before ``step`` was per parameter hold one tensor for all; its value is read."""
    params = _start(torch.float32)
    opt = CPUAdam(params, **HYPER)
    _run(opt, params, range(N))
    old = opt.state_dict()
    shared = torch.tensor(float(N))
    for entry in old["state"].values():
        entry["step"] = shared
    fresh = CPUAdam(params, **HYPER)
    fresh.load_state_dict(old)
    _run(fresh, params, range(N, N + M))
    assert [float(fresh.state[p]["step"]) for p in params] == [N + M] * len(SIZES)
    assert float(shared) == N
    _assert_close(params, _reference(True))


def _meta_or_fake(kind: str, like: torch.Tensor) -> torch.Tensor:
    if kind == "meta":
        return torch.empty(like.shape, dtype=like.dtype, device="meta")
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return torch.empty(like.shape, dtype=like.dtype)


@pytest.mark.parametrize("kind", ["meta", "fake"])
@pytest.mark.parametrize(("cls", "key"), [("CPUAdam", "exp_avg"), ("CPUAdam", "exp_avg_sq"),
                                          ("FusedAdam", "exp_avg"), ("CPULion", "exp_avg"),
                                          ("CPULamb", "exp_avg_sq"), ("CPUAdagrad", "exp_avg_sq")])
def test_a_state_tensor_without_values_is_refused_before_any_change(cls: str, key: str, kind: str) -> None:
    """A meta or fake state tensor is refused by name; a meta ``exp_avg`` gave torch's "Cannot copy out of meta
    tensor; no data!"."""
    from anyaccel.ops.adagrad.cpu import CPUAdagrad
    from anyaccel.ops.lamb.fused import CPULamb
    from anyaccel.ops.lion.cpu import CPULion

    make = {"CPUAdam": CPUAdam, "FusedAdam": FusedAdam, "CPULion": CPULion, "CPULamb": CPULamb,
            "CPUAdagrad": CPUAdagrad}[cls]
    params = [torch.nn.Parameter(torch.randn(7)), torch.nn.Parameter(torch.randn(3, 5))]
    saved = make(params)
    for p in params:
        p.grad = torch.randn_like(p)
    saved.step()
    sd = saved.state_dict()
    sd["state"][1][key] = _meta_or_fake(kind, sd["state"][1][key])
    target = make(params)
    before = target.state_dict()
    with pytest.raises(ValueError, match=rf"\['params'\]\[1\] {key!r} is a {kind} tensor, which holds no values"):
        target.load_state_dict(sd)
    assert target.state_dict()["state"] == before["state"] == {}
