"""``anyaccel._compat.torch_optim``: the step protocol through torch.optim's private registries, and through
torch's public ``profile_hook_step`` when they are missing; the same hooks, order and results either way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from anyaccel._compat import torch_optim
from anyaccel.ops.adam.cpu import CPUAdam


@pytest.fixture(params=["private", "fallback"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "fallback":
        # torch's own wrapper reads the registries, so they stay; anyaccel's lookup is what finds nothing
        monkeypatch.setattr(torch_optim, "_PRE", "_no_such_registry")
        assert torch_optim.global_step_hooks() is None
    else:
        assert torch_optim.global_step_hooks() is not None, f"torch {torch.__version__} lacks the registries"
    yield request.param


def _run(opt_cls: Any) -> tuple[list[str], torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    p = torch.nn.Parameter(torch.randn(37, generator=gen, dtype=torch.float64).float())
    p.grad = torch.randn(37, generator=gen)
    opt = opt_cls([p], lr=1e-2)
    calls: list[str] = []
    handles = [register_optimizer_step_pre_hook(lambda o, a, k: calls.append("global pre")),
               opt.register_step_pre_hook(lambda o, a, k: calls.append("pre")),
               opt.register_step_post_hook(lambda o, a, k: calls.append("post")),
               register_optimizer_step_post_hook(lambda o, a, k: calls.append("global post"))]
    try:
        opt.step()
        opt.step()
    finally:
        for h in handles:
            h.remove()
    return calls, p.detach().clone()


def test_hooks_run_once_per_step_in_torchs_order_on_either_path(path: str) -> None:
    calls, p = _run(CPUAdam)
    ref_calls, ref = _run(lambda ps, lr: torch.optim.Adam(ps, lr=lr))
    assert calls == ref_calls == ["global pre", "pre", "post", "global post"] * 2
    torch.testing.assert_close(p, ref, rtol=1e-6, atol=1e-6)


def test_the_profiler_range_is_torchs_on_either_path(path: str) -> None:
    p = torch.nn.Parameter(torch.randn(5))
    p.grad = torch.randn(5)
    opt = CPUAdam([p], lr=1e-3)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        opt.step()
    assert "Optimizer.step#CPUAdam.step" in [e.name for e in prof.events()]


def test_profiler_enabled_falls_back_to_always(monkeypatch: pytest.MonkeyPatch) -> None:
    assert torch_optim.profiler_enabled() is False
    monkeypatch.setattr(torch_optim, "_PROFILER_QUERY", "_no_such_query")
    assert torch_optim.profiler_enabled() is True


def test_load_state_dict_hooks_private_and_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    p = torch.nn.Parameter(torch.randn(3))
    opt = CPUAdam([p], lr=1e-3)
    seen: list[str] = []
    opt.register_load_state_dict_pre_hook(lambda o, sd: seen.append("pre"))
    opt.register_load_state_dict_post_hook(lambda o: seen.append("post"))
    opt.load_state_dict(opt.state_dict())
    assert seen == ["pre", "post"]
    pre, post = torch_optim.load_state_dict_hooks(opt)
    assert len(pre) == len(post) == 1
    monkeypatch.delattr(opt, "_optimizer_load_state_dict_pre_hooks")
    assert torch_optim.load_state_dict_hooks(opt)[0] == []
