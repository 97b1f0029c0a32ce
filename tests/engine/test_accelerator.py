"""The ``Accelerator`` component: which device a local rank gets, binding, moving models, collectives."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from anyaccel.accelerator.cpu import CPU_Accelerator
from anyaccel.accelerator.mps import MPS_Accelerator
from anyaccel.engine import Accelerator, LocalRankOutOfRangeError, detect_launch

from .fakes import FakeGPU

SetEnv = Callable[..., None]


def _torchrun(set_env: SetEnv, local_rank: int, local_world: int) -> None:
    set_env(RANK=local_rank, WORLD_SIZE=local_world, LOCAL_RANK=local_rank, LOCAL_WORLD_SIZE=local_world,
            TORCHELASTIC_RUN_ID="r", MASTER_ADDR="127.0.0.1", MASTER_PORT=29500)


@pytest.mark.parametrize("local_rank,count", [(0, 1), (1, 2), (3, 8)])
def test_local_rank_indexes_the_visible_devices(launcher_env: SetEnv, local_rank: int, count: int) -> None:
    _torchrun(launcher_env, local_rank, max(count, local_rank + 1))
    gpu = FakeGPU(count)
    component = Accelerator(gpu)
    assert component.local_rank == local_rank
    assert component.device == torch.device("cuda", local_rank)
    assert component.device_ids == [local_rank]
    assert component.device_count == component.auto_device_count() == count


def test_one_visible_device_per_process_is_used_whatever_the_local_rank(launcher_env: SetEnv) -> None:
    _torchrun(launcher_env, 3, 4)
    launcher_env(CUDA_VISIBLE_DEVICES="3")  # srun --gpus-per-task=1 gives each task its own GPU
    gpu = FakeGPU(1)
    component = Accelerator(gpu)
    assert component.bind() == torch.device("cuda", 0)
    assert gpu.set_device_calls == [0]


@pytest.mark.parametrize("count,visible", [(2, None), (0, None), (2, "0,1")])
def test_more_local_ranks_than_devices_is_an_error(launcher_env: SetEnv, count: int, visible: str | None) -> None:
    _torchrun(launcher_env, 2, 4)
    if visible is not None:
        launcher_env(CUDA_VISIBLE_DEVICES=visible)
    component = Accelerator(FakeGPU(count))
    with pytest.raises(LocalRankOutOfRangeError) as caught:
        component.bind()
    message = str(caught.value)
    assert "LOCAL_RANK='2'" in message and f"this process sees {count}" in message
    assert (f"CUDA_VISIBLE_DEVICES={visible!r}" if visible else "no visible-devices variable set") in message
    assert f"--nproc_per_node {max(count, 1)}" in message


def test_bind_is_idempotent(launcher_env: SetEnv) -> None:
    _torchrun(launcher_env, 1, 2)
    gpu = FakeGPU(2)
    component = Accelerator(gpu)
    assert component.bind() == component.bind() == torch.device("cuda", 1)
    assert gpu.set_device_calls == [1]


@pytest.mark.parametrize("accelerator", [CPU_Accelerator, MPS_Accelerator])
def test_shared_devices_ignore_the_local_rank(launcher_env: SetEnv, accelerator: type) -> None:
    _torchrun(launcher_env, 5, 8)  # 8 local processes share the host (or the one Apple GPU)
    component = Accelerator(accelerator(), launch=detect_launch())
    assert component.device_index is None and component.device_ids is None
    assert component.device == torch.device(accelerator._name)


def test_collectives_follow_torch_backend_capabilities() -> None:
    assert Accelerator(CPU_Accelerator()).supports_collectives  # gloo on CPU tensors
    assert not Accelerator(MPS_Accelerator()).supports_collectives  # gloo takes no MPS tensors
    assert Accelerator(FakeGPU(1, backend="gloo")).supports_collectives  # gloo on CUDA tensors
    assert not Accelerator(FakeGPU(1, backend="no-such-backend")).supports_collectives
    expected_nccl = torch.distributed.is_available() and torch.distributed.is_nccl_available()
    assert Accelerator(FakeGPU(1, backend="nccl")).supports_collectives == expected_nccl


def test_configure_model_leaves_a_placed_model_alone(launcher_env: SetEnv) -> None:
    component = Accelerator(CPU_Accelerator())
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    before = [t.data_ptr() for t in [*model.parameters(), *model.buffers()]]

    def no_move(*args: object, **kwargs: object) -> torch.nn.Module:
        raise AssertionError("a model already on the device was moved")

    model.to = no_move  # type: ignore[method-assign]
    assert component.configure_model(model) is model
    assert component.configure_model(model) is model
    assert [t.data_ptr() for t in [*model.parameters(), *model.buffers()]] == before


def test_configure_model_binds_and_moves_once(launcher_env: SetEnv) -> None:
    _torchrun(launcher_env, 1, 2)
    gpu = FakeGPU(2)
    component = Accelerator(gpu)
    model = torch.nn.Linear(2, 2)
    moves: list[torch.device] = []

    def record(device: torch.device) -> torch.nn.Module:
        moves.append(device)
        return model

    model.to = record  # type: ignore[method-assign,assignment]
    assert component.configure_model(model) is model
    assert moves == [torch.device("cuda", 1)] and gpu.set_device_calls == [1]


def test_construction_reads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "not a number")
    monkeypatch.setenv("WORLD_SIZE", "2")
    component = Accelerator(CPU_Accelerator())  # no error until the environment is needed
    assert "not read yet" in repr(component)
    with pytest.raises(ValueError):
        _ = component.local_rank
