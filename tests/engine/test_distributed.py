"""``init_distributed()`` in this process: one-process groups, idempotency, adoption, errors, teardown.

Multi-process jobs run in ``tests/examples/test_train_ddp.py`` (torchrun, two processes).
"""

from __future__ import annotations

import datetime
import os
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist

from anyaccel.accelerator.cpu import CPU_Accelerator
from anyaccel.engine import (
    DEFAULT_TIMEOUT,
    EnvironmentTable,
    IncompleteLaunchEnvironmentError,
    MissingMasterAddressError,
    ProcessGroupMismatchError,
    RankOutOfRangeError,
    current_environment,
    destroy_distributed,
    init_distributed,
)

from .fakes import FakeGPU

SetEnv = Callable[..., None]


def test_single_process_group_on_cpu(launcher_env: SetEnv) -> None:
    table = init_distributed(accelerator=CPU_Accelerator(), timeout=30)
    assert table == EnvironmentTable(0, 1, 0, 1, torch.device("cpu"), "gloo", "cpu", "single")
    assert dist.is_initialized() and dist.get_backend() == "gloo" and dist.get_world_size() == 1
    assert table.is_main_process and not table.is_distributed
    assert table.to_dict()["device"] == "cpu"
    summed = torch.ones(3)
    dist.all_reduce(summed)
    assert summed.tolist() == [1.0, 1.0, 1.0]


def test_second_call_returns_the_same_record(launcher_env: SetEnv) -> None:
    first = init_distributed(accelerator=CPU_Accelerator())
    assert init_distributed() is first
    assert init_distributed(backend="gloo") is first
    assert current_environment() is first


def test_second_call_with_another_backend_is_an_error(launcher_env: SetEnv) -> None:
    init_distributed(accelerator=CPU_Accelerator())
    with pytest.raises(ProcessGroupMismatchError) as caught:
        init_distributed(backend="nccl")
    assert "'gloo'" in str(caught.value) and "destroy_distributed()" in str(caught.value)


def test_torchrun_world_of_one_binds_the_gpu_first(launcher_env: SetEnv) -> None:
    launcher_env(RANK=0, WORLD_SIZE=1, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, TORCHELASTIC_RUN_ID="r")
    gpu = FakeGPU(1, backend="gloo")  # gloo so that no GPU is needed; the device is only bound
    table = init_distributed(accelerator=gpu)
    assert gpu.set_device_calls == [0]
    assert (table.source, table.device, table.backend, table.accelerator) == ("torchrun", torch.device("cuda", 0),
                                                                              "gloo", "cuda")


def test_an_existing_process_group_is_adopted(launcher_env: SetEnv) -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    table = init_distributed(accelerator=CPU_Accelerator())
    assert (table.source, table.rank, table.world_size, table.backend) == ("process-group", 0, 1, "gloo")
    assert init_distributed() is table


def test_adopted_group_must_match_the_launcher(launcher_env: SetEnv) -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    launcher_env(RANK=1, WORLD_SIZE=2, TORCHELASTIC_RUN_ID="r", MASTER_ADDR="127.0.0.1")
    with pytest.raises(ProcessGroupMismatchError) as caught:
        init_distributed(accelerator=CPU_Accelerator())
    assert "rank 0 of 1" in str(caught.value) and "RANK='1'" in str(caught.value)


def test_adopted_group_must_have_the_backend_asked_for(launcher_env: SetEnv) -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    with pytest.raises(ProcessGroupMismatchError):
        init_distributed(accelerator=CPU_Accelerator(), backend="nccl")


def test_several_processes_without_master_addr_fail_before_connecting(launcher_env: SetEnv) -> None:
    launcher_env(PMI_RANK=0, PMI_SIZE=2)
    gpu = FakeGPU(1)
    with pytest.raises(MissingMasterAddressError) as caught:
        init_distributed(accelerator=gpu)
    assert "PMI_SIZE='2'" in str(caught.value)
    assert gpu.set_device_calls == [] and not dist.is_initialized()


def test_inconsistent_environment_initialises_nothing(launcher_env: SetEnv) -> None:
    launcher_env(RANK=2, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1")
    with pytest.raises(RankOutOfRangeError):
        init_distributed(accelerator=CPU_Accelerator())
    assert not dist.is_initialized() and current_environment() is None


@pytest.mark.parametrize("variables", [dict(RANK=1), dict(WORLD_SIZE=2)], ids=["rank-alone", "world-size-alone"])
def test_half_a_launch_environment_initialises_nothing(launcher_env: SetEnv, variables: dict[str, object]) -> None:
    launcher_env(**variables)
    with pytest.raises(IncompleteLaunchEnvironmentError, match="RANK and WORLD_SIZE"):
        init_distributed(accelerator=CPU_Accelerator())
    assert not dist.is_initialized() and current_environment() is None


def test_environ_argument_replaces_os_environ(launcher_env: SetEnv) -> None:
    launcher_env(RANK=2, WORLD_SIZE=2)  # would be an error if it were read
    table = init_distributed(accelerator=CPU_Accelerator(), environ={})
    assert table.source == "single"


@pytest.mark.parametrize("timeout", [0, -1.0, datetime.timedelta(0)])
def test_timeout_must_be_positive(launcher_env: SetEnv, timeout: object) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        init_distributed(accelerator=CPU_Accelerator(), timeout=timeout)  # type: ignore[arg-type]


def test_default_timeout_is_bounded() -> None:
    assert datetime.timedelta(0) < DEFAULT_TIMEOUT <= datetime.timedelta(minutes=30)


def test_destroy_is_safe_twice_and_allows_a_fresh_start(launcher_env: SetEnv) -> None:
    first = init_distributed(accelerator=CPU_Accelerator())
    destroy_distributed()
    destroy_distributed()
    assert current_environment() is None and not dist.is_initialized()
    second = init_distributed(accelerator=CPU_Accelerator())
    assert second == first and second is not first


_GROUP_FREED = textwrap.dedent("""
    import os
    import time
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from anyaccel.accelerator.cpu import CPU_Accelerator
    from anyaccel.engine import destroy_distributed, init_distributed

    def threads():
        names = []
        for t in os.listdir("/proc/self/task"):
            try:
                names.append(open(f"/proc/self/task/{t}/comm").read().strip())
            except FileNotFoundError:  # the thread exited while listed
                pass
        return sorted(names)

    init_distributed(accelerator=CPU_Accelerator())
    ddp = DistributedDataParallel(torch.nn.Linear(4, 4))  # imports torch.distributed.nn, as user code does
    ddp(torch.randn(2, 4)).sum().backward()
    print("with the group:", threads())
    del ddp
    destroy_distributed()
    # a joined thread's /proc entry can outlive pthread_join by a moment: look again for up to 10 s
    deadline = time.monotonic() + 10
    while any(name.startswith(("pt_gloo", "gloo")) for name in threads()) and time.monotonic() < deadline:
        time.sleep(0.01)
    print("after destroy:", threads())
""")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads thread names from /proc (Linux)")
def test_destroy_joins_the_gloo_threads_after_ddp(launcher_env: SetEnv) -> None:
    """A destroyed group is freed (its worker threads joined) once DDP is dropped.

    torch.distributed.nn binds the default group as default arguments when imported; imported after
    init_process_group, it kept the group and its gloo threads alive, which then raced interpreter
    finalization (pytorch/pytorch#190489). A fresh interpreter, since this one may have imported it already.
    """
    proc = subprocess.run([sys.executable, "-c", _GROUP_FREED], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ANYACCEL_ACCELERATOR": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    with_group, after = (line for line in proc.stdout.splitlines() if line.startswith(("with", "after")))
    assert "pt_gloo_runloop" in with_group  # the probe sees gloo's threads at all
    assert "pt_gloo_runloop" not in after and "gloo_tcp_loop" not in after, after


def test_errors_survive_pickling(launcher_env: SetEnv) -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    with pytest.raises(ProcessGroupMismatchError) as caught:
        init_distributed(accelerator=CPU_Accelerator(), backend="nccl")
    again = pickle.loads(pickle.dumps(caught.value))
    assert type(again) is ProcessGroupMismatchError and str(again) == str(caught.value)
