"""``step_entry``: anyaccel's optimizers keep torch.optim's step protocol (hooks, profiler range, no-grad).

torch wraps every optimizer's ``step`` in ``Optimizer.profile_hook_step``; anyaccel's optimizers replace that
wrapper by a cheaper one (:func:`anyaccel.ops.optimizer.hooks.step_entry`, falling back to torch's where its
private registries are missing). Each behaviour of torch's wrapper is checked here against a ``torch.optim.AdamW``
run side by side, so a difference from torch fails a test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from anyaccel.ops.adagrad.cpu import CPUAdagrad
from anyaccel.ops.adam.cpu import CPUAdam
from anyaccel.ops.lamb.fused import FusedLamb
from anyaccel.ops.lion.cpu import CPULion
from anyaccel.ops.optimizer.hooks import step_entry


def _model(seed: int) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    ps = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in (7, 33)]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=gen)
    return ps


def _builders() -> list[Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]]:
    return [lambda ps: CPUAdam(ps, lr=1e-3), lambda ps: CPULion(ps, lr=1e-3), lambda ps: CPUAdagrad(ps, lr=1e-2),
            lambda ps: FusedLamb(ps, lr=1e-3), lambda ps: torch.optim.AdamW(ps, lr=1e-3)]


@pytest.fixture(params=range(5), ids=["CPUAdam", "CPULion", "CPUAdagrad", "FusedLamb", "torch.AdamW"])
def make(request: pytest.FixtureRequest) -> Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]:
    build = _builders()[request.param]
    if request.param == 3 and not _lamb_runs_here():
        pytest.skip("FusedLamb has no CPU implementation here")
    return build


def _lamb_runs_here() -> bool:
    try:
        FusedLamb(_model(0), lr=1e-3).step()
    except (RuntimeError, ValueError):
        return False
    return True


def test_each_hook_runs_once_per_step_in_torch_order(make: Callable[..., torch.optim.Optimizer]) -> None:
    opt = make(_model(1))
    calls: list[str] = []
    handles = [
        register_optimizer_step_pre_hook(lambda o, a, k: calls.append("global pre")),
        opt.register_step_pre_hook(lambda o, a, k: calls.append("pre")),
        opt.register_step_post_hook(lambda o, a, k: calls.append("post")),
        register_optimizer_step_post_hook(lambda o, a, k: calls.append("global post")),
    ]
    try:
        opt.step()
        opt.step()
    finally:
        for h in handles:
            h.remove()
    assert calls == ["global pre", "pre", "post", "global post"] * 2
    opt.step()
    assert len(calls) == 8  # removed hooks stay removed


def test_a_pre_hook_can_replace_the_arguments(make: Callable[..., torch.optim.Optimizer]) -> None:
    opt = make(_model(2))
    seen: list[Any] = []

    def closure() -> torch.Tensor:
        seen.append("closure")
        return torch.tensor(3.0)

    opt.register_step_pre_hook(lambda o, args, kwargs: ((args[0],), {"closure": closure}))
    opt.register_step_post_hook(lambda o, args, kwargs: seen.append(sorted(kwargs)))
    assert float(opt.step()) == 3.0
    assert seen == ["closure", ["closure"]]


def test_a_pre_hook_returning_something_else_raises(make: Callable[..., torch.optim.Optimizer]) -> None:
    opt = make(_model(3))
    opt.register_step_pre_hook(lambda o, a, k: "nonsense")
    with pytest.raises(RuntimeError, match="must return None or a tuple"):
        opt.step()


def test_the_step_runs_without_grad_and_the_closure_with(make: Callable[..., torch.optim.Optimizer]) -> None:
    opt = make(_model(4))
    modes: list[bool] = []
    opt.register_step_pre_hook(lambda o, a, k: modes.append(torch.is_grad_enabled()))

    def closure() -> None:
        modes.append(torch.is_grad_enabled())

    opt.step(closure)
    assert modes == [True, True]
    assert torch.is_grad_enabled()


def test_the_profiler_sees_the_step_under_torchs_name(make: Callable[..., torch.optim.Optimizer]) -> None:
    opt = make(_model(5))
    opt.step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        opt.step()
    names = [e.name for e in prof.events()]
    assert f"Optimizer.step#{type(opt).__name__}.step" in names, sorted(set(names))[:20]


def test_torch_does_not_wrap_anyaccels_step_again() -> None:
    opt = CPUAdam(_model(6), lr=1e-3)
    assert getattr(type(opt).step, "hooked", False)
    assert type(opt).step is CPUAdam.step  # torch's _patch_step_function replaced nothing (no second wrapper)


class _UserAdam(CPUAdam):
    """A user's subclass overriding step without step_entry: torch wraps it, its super() call runs the body."""

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        self.user_calls = getattr(self, "user_calls", 0) + 1
        return super().step(closure)


class _UserAdamEntry(CPUAdam):
    """A user's subclass overriding step with step_entry."""

    @step_entry
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        self.user_calls = getattr(self, "user_calls", 0) + 1
        return super().step(closure)


@pytest.mark.parametrize("cls", [_UserAdam, _UserAdamEntry])
def test_an_override_calling_super_runs_each_hook_once_and_steps(cls: type[CPUAdam]) -> None:
    ps, ref = _model(7), _model(7)
    opt, base = cls(ps, lr=1e-3), CPUAdam(ref, lr=1e-3)
    calls: list[str] = []
    opt.register_step_pre_hook(lambda o, a, k: calls.append("pre"))
    opt.register_step_post_hook(lambda o, a, k: calls.append("post"))
    opt.step()
    base.step()
    assert calls == ["pre", "post"] and opt.user_calls == 1
    for p, r in zip(ps, ref, strict=True):
        torch.testing.assert_close(p, r, rtol=0, atol=0)
    assert float(opt.state[ps[0]]["step"]) == 1.0


def test_the_step_count_in_state_advances_with_every_step() -> None:
    ps = _model(8)
    opt = CPUAdam(ps, lr=1e-3)
    for n in range(1, 4):
        opt.step()
        assert opt.state[ps[0]]["step"].item() == float(n)
        assert opt.state_dict()["state"][1]["step"].item() == float(n)


def _passthrough(func: Callable[..., Any]) -> Callable[..., Any]:
    """A third party's wrapper installed over ``step`` with functools.wraps."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        wrapper.calls += 1  # type: ignore[attr-defined]
        return func(*args, **kwargs)

    wrapper.calls = 0  # type: ignore[attr-defined]
    return wrapper


def test_a_class_level_wrapper_over_step_keeps_the_hooks() -> None:
    class Patched(CPUAdam):
        pass

    Patched.step = _passthrough(CPUAdam.step)  # type: ignore[method-assign]
    opt = Patched(_model(9), lr=1e-3)
    calls: list[str] = []
    opt.register_step_pre_hook(lambda o, a, k: calls.append("pre"))
    opt.register_step_post_hook(lambda o, a, k: calls.append("post"))
    opt.step()
    assert calls == ["pre", "post"] and Patched.step.calls == 1  # type: ignore[attr-defined]


def test_an_lr_scheduler_wrapping_the_instance_keeps_the_hooks() -> None:
    ps = _model(10)
    opt = CPUAdam(ps, lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    calls: list[str] = []
    opt.register_step_pre_hook(lambda o, a, k: calls.append("pre"))
    opt.step()
    sched.step()
    opt.step()
    assert calls == ["pre", "pre"]
    assert opt.param_groups[0]["lr"] == pytest.approx(5e-4)
    assert opt.state[ps[0]]["step"].item() == 2.0


def test_a_failing_pre_hook_changes_nothing_and_the_next_step_runs_hooks() -> None:
    ps = _model(11)
    before = [p.detach().clone() for p in ps]
    opt = CPUAdam(ps, lr=1e-3)
    calls: list[str] = []

    def failing(o: Any, a: Any, k: Any) -> None:
        calls.append("pre")
        if len(calls) == 1:
            raise ValueError("hook failed")

    opt.register_step_pre_hook(failing)
    with pytest.raises(ValueError, match="hook failed"):
        opt.step()
    for p, b in zip(ps, before, strict=True):
        torch.testing.assert_close(p, b, rtol=0, atol=0)
    opt.step()
    assert calls == ["pre", "pre"] and opt.state[ps[0]]["step"].item() == 1.0
