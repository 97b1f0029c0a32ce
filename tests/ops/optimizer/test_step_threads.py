"""Two threads calling ``step()`` on one optimizer: the steps run one after the other (a per-optimizer lock), so
every call counts once, runs torch.optim's step hooks once, and the result is that of as many sequential steps.

Real threads, started together at a barrier; every wait is bounded (a deadlock fails the test instead of hanging
it). The gradients are the same every step, so the sequential result does not depend on the order.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from anyaccel.ops.adagrad.cpu import CPUAdagrad
from anyaccel.ops.adam.cpu import CPUAdam
from anyaccel.ops.adam.fused import FusedAdam
from anyaccel.ops.lion.cpu import CPULion

THREADS, STEPS = 2, 20
WAIT_S = 120.0


def _params(seed: int) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in (4099, 17, 1 << 14)]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    return params


@pytest.mark.parametrize("cls", [CPUAdam, FusedAdam, CPULion, CPUAdagrad])
def test_concurrent_steps_are_serialised(cls: type) -> None:
    params = _params(0)
    opt = cls([{"params": params[:2]}, {"params": params[2:]}], lr=1e-3)
    opt.step()  # plans cached, op loaded
    inside = 0
    overlaps = 0
    calls = 0
    guard = threading.Lock()

    def pre_hook(*_: object) -> None:
        nonlocal inside, overlaps, calls
        with guard:
            calls += 1
            inside += 1
            overlaps += inside > 1
        time.sleep(0.001)  # a step in progress: another thread gets the interpreter here

    def post_hook(*_: object) -> None:
        nonlocal inside
        with guard:
            inside -= 1

    opt.register_step_pre_hook(pre_hook)
    opt.register_step_post_hook(post_hook)
    barrier = threading.Barrier(THREADS, timeout=WAIT_S)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait()
            for _ in range(STEPS):
                opt.step()
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert not any(t.is_alive() for t in threads), "a step() call did not return (deadlock?)"
    assert not errors, errors
    assert calls == THREADS * STEPS and overlaps == 0
    for p in params:
        assert float(opt.state[p]["step"]) == 1 + THREADS * STEPS

    sequential = _params(0)
    ref = cls([{"params": sequential[:2]}, {"params": sequential[2:]}], lr=1e-3)
    for _ in range(1 + THREADS * STEPS):
        ref.step()
    for p, q in zip(params, sequential, strict=True):
        assert torch.equal(p.detach(), q.detach())
        for key, value in ref.state[q].items():
            assert torch.equal(opt.state[p][key], value), key


def test_state_dict_waits_for_a_step_in_progress() -> None:
    """``state_dict()`` taken while another thread steps sees a whole step: every count equal."""
    params = _params(1)
    opt = CPUAdam([{"params": params[:2]}, {"params": params[2:]}], lr=1e-3)
    opt.step()
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            opt.step()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        for _ in range(50):
            steps = {float(entry["step"]) for entry in opt.state_dict()["state"].values()}
            assert len(steps) == 1, steps
    finally:
        stop.set()
        thread.join(WAIT_S)
    assert not thread.is_alive()


def test_a_closure_may_call_step_again_on_its_thread() -> None:
    """The lock is re-entrant: a closure (or a hook) that steps the same optimizer does not deadlock."""
    params = _params(2)
    opt = CPUAdam(params, lr=1e-3)
    done = threading.Event()

    def closure() -> float:
        if not done.is_set():
            done.set()
            opt.step()
        return 0.0

    thread = threading.Thread(target=lambda: opt.step(closure), daemon=True)
    thread.start()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert float(opt.state[params[0]]["step"]) == 2
