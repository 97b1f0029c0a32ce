"""CPU kernel threads: the plan anyaccel report prints and the oversubscription policy.

The affinity mask and local rank count are faked through ``os.sched_getaffinity``/``os.cpu_count`` and the
launchers' environment variables; torch's thread count is restored after each test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from anyaccel.ops import cpu_threads


@pytest.fixture(autouse=True)
def _restore_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    threads = torch.get_num_threads()
    for name in cpu_threads.LOCAL_SIZE_ENVS + (cpu_threads.ENV,):
        monkeypatch.delenv(name, raising=False)
    cpu_threads._reset_for_tests()
    yield
    torch.set_num_threads(threads)
    cpu_threads._reset_for_tests()


def _host(monkeypatch: pytest.MonkeyPatch, mask: int, host: int) -> None:
    monkeypatch.setattr(cpu_threads.os, "sched_getaffinity", lambda pid: set(range(mask)), raising=False)
    monkeypatch.setattr(cpu_threads.os, "cpu_count", lambda: host)


def test_unbound_ranks_sharing_a_host_are_reported_and_lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    _host(monkeypatch, 16, 16)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    torch.set_num_threads(16)
    plan = cpu_threads.thread_plan()
    assert plan["oversubscribed"] and plan["busy_threads"] == 64 and plan["recommended_threads"] == 4
    assert plan["local_ranks_from"] == "LOCAL_WORLD_SIZE"
    assert cpu_threads.apply_thread_policy() == 4
    assert torch.get_num_threads() == 4


def test_bound_rank_keeps_its_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    _host(monkeypatch, 4, 16)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4")
    torch.set_num_threads(4)
    plan = cpu_threads.thread_plan()
    assert plan["bound"] and not plan["oversubscribed"]
    assert cpu_threads.apply_thread_policy() == 4


def test_more_threads_than_the_mask_is_oversubscription(monkeypatch: pytest.MonkeyPatch) -> None:
    _host(monkeypatch, 2, 16)
    torch.set_num_threads(3)
    assert cpu_threads.thread_plan()["oversubscribed"]
    assert cpu_threads.apply_thread_policy() == 2


@pytest.mark.parametrize(("policy", "expected"), [("torch", 3), ("1", 1), ("2", 2)])
def test_explicit_policy(monkeypatch: pytest.MonkeyPatch, policy: str, expected: int) -> None:
    _host(monkeypatch, 2, 2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv(cpu_threads.ENV, policy)
    torch.set_num_threads(3)
    assert cpu_threads.apply_thread_policy() == expected


@pytest.mark.parametrize("asked", ["3", "300", "100000"])
def test_a_count_above_the_mask_is_clamped_with_one_warning(monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture, asked: str) -> None:
    _host(monkeypatch, 2, 64)  # 2 CPUs in the mask of a 64-CPU host
    monkeypatch.setenv(cpu_threads.ENV, asked)
    with caplog.at_level("WARNING", logger=cpu_threads.__name__):
        assert cpu_threads.apply_thread_policy() == 2
        assert cpu_threads.apply_thread_policy() == 2  # applied once: no second warning
    assert torch.get_num_threads() == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and f"ANYACCEL_CPU_THREADS={asked}" in warnings[0] and "using 2" in warnings[0]


@pytest.mark.parametrize("bad", ["0", "-1", "many", "1.5"])
def test_bad_policy_is_a_typed_error(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(cpu_threads.ENV, bad)
    with pytest.raises(cpu_threads.ThreadPolicyError, match=f"ANYACCEL_CPU_THREADS='{bad}' is not accepted"):
        cpu_threads.apply_thread_policy()


def test_cpu_optimizer_applies_the_policy_before_its_first_step(monkeypatch: pytest.MonkeyPatch) -> None:
    from anyaccel.ops.adam.cpu import CPUAdam

    _host(monkeypatch, 2, 2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    torch.set_num_threads(2)
    p = torch.nn.Parameter(torch.randn(8))
    p.grad = torch.randn(8)
    opt = CPUAdam([p])
    opt.step()
    assert torch.get_num_threads() == 1
