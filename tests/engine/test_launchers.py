"""Reading each launcher's environment, the precedence between them, and each inconsistent environment."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anyaccel.engine import (
    LAUNCHERS,
    DistributedEnvironmentError,
    IncompleteLaunchEnvironmentError,
    InvalidEnvironmentValueError,
    LocalRankOutOfRangeError,
    MissingMasterAddressError,
    RankOutOfRangeError,
    detect_launch,
)
from anyaccel.engine.launchers import DEFAULT_MASTER_PORT

SetEnv = Callable[..., None]

# (id, variables, expected (source, rank, world, local_rank, local_world, master_addr, master_port))
FLAVOURS = [
    ("torchrun", dict(RANK=3, WORLD_SIZE=4, LOCAL_RANK=1, LOCAL_WORLD_SIZE=2, GROUP_RANK=1, TORCHELASTIC_RUN_ID="j",
                      MASTER_ADDR="10.0.0.1", MASTER_PORT=29400),
     ("torchrun", 3, 4, 1, 2, "10.0.0.1", 29400)),
    ("deepspeed", dict(RANK=5, WORLD_SIZE=8, LOCAL_RANK=1, LOCAL_SIZE=4, CROSS_RANK=1, CROSS_SIZE=2,
                       MASTER_ADDR="host0", MASTER_PORT=29500),
     ("deepspeed", 5, 8, 1, 4, "host0", 29500)),
    ("env-by-hand", dict(RANK=1, WORLD_SIZE=2, MASTER_ADDR="localhost"),
     ("env", 1, 2, 1, 2, "localhost", DEFAULT_MASTER_PORT)),
    ("env-local-size", dict(RANK=5, WORLD_SIZE=8, LOCAL_WORLD_SIZE=4, MASTER_ADDR="h"),
     ("env", 5, 8, 1, 4, "h", DEFAULT_MASTER_PORT)),
    ("openmpi", dict(OMPI_COMM_WORLD_RANK=2, OMPI_COMM_WORLD_SIZE=4, OMPI_COMM_WORLD_LOCAL_RANK=0,
                     OMPI_COMM_WORLD_LOCAL_SIZE=2, MASTER_ADDR="n1"),
     ("openmpi", 2, 4, 0, 2, "n1", DEFAULT_MASTER_PORT)),
    ("mvapich", dict(MV2_COMM_WORLD_RANK=1, MV2_COMM_WORLD_SIZE=2, MV2_COMM_WORLD_LOCAL_RANK=1,
                     MV2_COMM_WORLD_LOCAL_SIZE=2),
     ("mvapich", 1, 2, 1, 2, None, DEFAULT_MASTER_PORT)),
    ("pmi-intel-mpi", dict(PMI_RANK=3, PMI_SIZE=4, MPI_LOCALRANKID=1, MPI_LOCALNRANKS=2, MASTER_ADDR="n0"),
     ("pmi", 3, 4, 1, 2, "n0", DEFAULT_MASTER_PORT)),
    ("slurm-srun", dict(SLURM_PROCID=5, SLURM_NTASKS=6, SLURM_LOCALID=1, SLURM_STEP_ID=0, SLURM_NODEID=2,
                        SLURM_STEP_TASKS_PER_NODE="2(x3)", SLURM_JOB_NODELIST="gpu[007-009]", SLURM_JOB_ID=123456),
     ("slurm", 5, 6, 1, 2, "gpu007", 15000 + 3456)),
    ("slurm-step-tasks", dict(SLURM_PROCID=1, SLURM_NTASKS=8, SLURM_STEP_NUM_TASKS=2, SLURM_LOCALID=1,
                              SLURM_STEP_ID=3, SLURM_TASKS_PER_NODE="2", SLURM_STEP_NODELIST="a1,a2",
                              MASTER_ADDR="override", MASTER_PORT=1234),
     ("slurm", 1, 2, 1, 2, "override", 1234)),
    ("single", dict(), ("single", 0, 1, 0, 1, None, DEFAULT_MASTER_PORT)),
]


@pytest.mark.parametrize("variables,expected", [f[1:] for f in FLAVOURS], ids=[f[0] for f in FLAVOURS])
def test_each_launcher(launcher_env: SetEnv, variables: dict[str, object], expected: tuple[object, ...]) -> None:
    launcher_env(**variables)
    launch = detect_launch()
    assert (launch.source, launch.rank, launch.world_size, launch.local_rank, launch.local_world_size,
            launch.master_addr, launch.master_port) == expected


def test_explicit_mapping_is_read_instead_of_os_environ(launcher_env: SetEnv) -> None:
    launcher_env(RANK=0, WORLD_SIZE=2, TORCHELASTIC_RUN_ID="x")
    launch = detect_launch({"PMI_RANK": "1", "PMI_SIZE": "3"})
    assert (launch.source, launch.rank, launch.world_size) == ("pmi", 1, 3)


# (id, variables of two launchers at once, the source that must win)
PRECEDENCE = [
    ("torchrun-in-srun", dict(RANK=3, WORLD_SIZE=4, TORCHELASTIC_RUN_ID="r", SLURM_PROCID=0, SLURM_NTASKS=2,
                              SLURM_STEP_ID=0), "torchrun"),
    ("deepspeed-in-srun", dict(RANK=1, WORLD_SIZE=2, CROSS_RANK=0, SLURM_PROCID=0, SLURM_NTASKS=1,
                               SLURM_STEP_ID=0), "deepspeed"),
    ("mpirun-in-allocation", dict(OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=2, SLURM_PROCID=0,
                                  SLURM_NTASKS=2, SLURM_STEP_ID=0), "openmpi"),
    ("torchrun-over-env-markers", dict(RANK=0, WORLD_SIZE=1, TORCHELASTIC_RUN_ID="r", PMI_RANK=0, PMI_SIZE=1),
     "torchrun"),
    ("batch-script-is-not-a-step", dict(SLURM_PROCID=0, SLURM_NTASKS=4, SLURM_LOCALID=0), "single"),
]


@pytest.mark.parametrize("variables,source", [p[1:] for p in PRECEDENCE], ids=[p[0] for p in PRECEDENCE])
def test_precedence(launcher_env: SetEnv, variables: dict[str, object], source: str) -> None:
    launcher_env(**variables)
    assert detect_launch().source == source


# (id, variables, error type, text the message must contain)
INCONSISTENT = [
    ("rank-not-integer", dict(RANK="one", WORLD_SIZE=2), InvalidEnvironmentValueError, "RANK='one'"),
    ("world-size-empty", dict(RANK=0, WORLD_SIZE=""), InvalidEnvironmentValueError, "WORLD_SIZE=''"),
    ("world-size-zero", dict(RANK=0, WORLD_SIZE=0), InvalidEnvironmentValueError, "must be >= 1"),
    ("rank-negative", dict(RANK=-1, WORLD_SIZE=2), InvalidEnvironmentValueError, "RANK='-1'"),
    ("rank-beyond-world", dict(RANK=2, WORLD_SIZE=2, TORCHELASTIC_RUN_ID="r"), RankOutOfRangeError,
     "rank 2 is not below the world size 2"),
    ("mpi-rank-beyond-world", dict(OMPI_COMM_WORLD_RANK=4, OMPI_COMM_WORLD_SIZE=4), RankOutOfRangeError,
     "OMPI_COMM_WORLD_RANK='4'"),
    ("local-rank-beyond-local-world", dict(RANK=3, WORLD_SIZE=4, LOCAL_RANK=2, LOCAL_WORLD_SIZE=2),
     LocalRankOutOfRangeError, "LOCAL_RANK='2'"),
    ("local-world-beyond-world", dict(RANK=0, WORLD_SIZE=2, LOCAL_RANK=0, LOCAL_WORLD_SIZE=4),
     InvalidEnvironmentValueError, "LOCAL_WORLD_SIZE='4'"),
    ("port-not-integer", dict(RANK=0, WORLD_SIZE=2, MASTER_PORT="http"), InvalidEnvironmentValueError,
     "MASTER_PORT='http'"),
    ("port-out-of-range", dict(RANK=0, WORLD_SIZE=2, MASTER_PORT=70000), InvalidEnvironmentValueError,
     "is not a TCP port"),
    ("slurm-bad-nodelist", dict(SLURM_PROCID=0, SLURM_NTASKS=2, SLURM_STEP_ID=0, SLURM_JOB_NODELIST="n[1-"),
     InvalidEnvironmentValueError, "SLURM_JOB_NODELIST='n[1-'"),
    ("slurm-bad-tasks-per-node", dict(SLURM_PROCID=0, SLURM_NTASKS=2, SLURM_STEP_ID=0, SLURM_TASKS_PER_NODE="x"),
     InvalidEnvironmentValueError, "SLURM_TASKS_PER_NODE='x'"),
]


@pytest.mark.parametrize("variables,error,text", [c[1:] for c in INCONSISTENT], ids=[c[0] for c in INCONSISTENT])
def test_inconsistent_environment(launcher_env: SetEnv, variables: dict[str, object],
                                  error: type[DistributedEnvironmentError], text: str) -> None:
    launcher_env(**variables)
    with pytest.raises(error) as caught:
        detect_launch()
    message = str(caught.value)
    assert text in message and "Fix: " in message
    assert caught.value.fix and caught.value.variables
    again = pickle.loads(pickle.dumps(caught.value))
    assert type(again) is error and str(again) == message


@pytest.mark.parametrize("variables,missing", [(dict(RANK=1), "WORLD_SIZE"), (dict(WORLD_SIZE=4), "RANK"),
                                               (dict(RANK=0, LOCAL_RANK=0, MASTER_ADDR="h"), "WORLD_SIZE")],
                         ids=["rank-alone", "world-size-alone", "rank-with-local-rank"])
def test_half_of_rank_and_world_size_is_an_error(launcher_env: SetEnv, variables: dict[str, object],
                                                 missing: str) -> None:
    launcher_env(**variables)
    with pytest.raises(IncompleteLaunchEnvironmentError) as caught:
        detect_launch()
    message = str(caught.value)
    assert f"{missing} is not set" in message and "RANK and WORLD_SIZE" in message and "Fix: " in message
    again = pickle.loads(pickle.dumps(caught.value))
    assert type(again) is IncompleteLaunchEnvironmentError and str(again) == message


def test_rank_alone_under_another_launcher_is_that_launchers_job(launcher_env: SetEnv) -> None:
    launcher_env(RANK=0, OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=2)
    assert detect_launch().source == "openmpi"


def test_missing_master_addr_names_the_fix(launcher_env: SetEnv) -> None:
    launcher_env(OMPI_COMM_WORLD_RANK=0, OMPI_COMM_WORLD_SIZE=2)
    launch = detect_launch()
    with pytest.raises(MissingMasterAddressError) as caught:
        launch.require_rendezvous()
    message = str(caught.value)
    assert "OMPI_COMM_WORLD_SIZE='2'" in message and "MASTER_ADDR" in message and "mpirun -x MASTER_ADDR" in message


def test_single_process_needs_no_rendezvous_address(launcher_env: SetEnv) -> None:
    assert detect_launch().master_addr is None


@st.composite
def _job(draw: st.DrawFn) -> tuple[int, int, int, int]:
    world = draw(st.integers(1, 512))
    rank = draw(st.integers(0, world - 1))
    local_world = draw(st.integers(1, world))
    local_rank = draw(st.integers(0, local_world - 1))
    return rank, world, local_rank, local_world


@given(job=_job(), which=st.sampled_from([spec.name for spec in LAUNCHERS]))
def test_every_launcher_reads_back_what_it_wrote(job: tuple[int, int, int, int], which: str) -> None:
    spec = next(s for s in LAUNCHERS if s.name == which)
    rank, world, local_rank, local_world = job
    env = {name: "x" for name in spec.markers}
    env.update({spec.rank[0]: str(rank), spec.world_size[0]: str(world), spec.local_rank[0]: str(local_rank)})
    if spec.local_world_size:
        env[spec.local_world_size[0]] = str(local_world)
    else:  # SLURM: tasks per node, this node first
        env.update(SLURM_TASKS_PER_NODE=str(local_world), SLURM_NODEID="0")
    launch = detect_launch(env)
    assert (launch.source, launch.rank, launch.world_size, launch.local_rank, launch.local_world_size) == (
        which, rank, world, local_rank, local_world)
