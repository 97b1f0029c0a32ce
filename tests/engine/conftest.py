"""Fixtures of the engine tests: a launcher-free environment and no process group."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from anyaccel.engine import LAUNCHERS, destroy_distributed

#: Every variable the engine reads, so a test starts from an environment no launcher touched.
READ_VARIABLES = sorted(
    {name for spec in LAUNCHERS for group in (spec.markers, spec.rank, spec.world_size, spec.local_rank,
                                               spec.local_world_size) for name in group}
    | {"MASTER_ADDR", "MASTER_PORT", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NODEID",
       "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_ID", "LOCAL_SIZE",
       "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
       "ASCEND_RT_VISIBLE_DEVICES"}
)


@pytest.fixture
def launcher_env(monkeypatch: pytest.MonkeyPatch):
    """Clear every launcher variable; return ``set(**variables)`` to fake one launcher's environment."""
    for name in READ_VARIABLES:
        monkeypatch.delenv(name, raising=False)

    def set_env(**variables: object) -> None:
        for name, value in variables.items():
            monkeypatch.setenv(name, str(value))

    return set_env


@pytest.fixture(autouse=True)
def no_process_group() -> Iterator[None]:
    """Every test starts and ends without a default process group."""
    destroy_distributed()
    yield
    destroy_distributed()
