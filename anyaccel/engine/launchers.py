"""Who started this process, and where it stands in the job: the launchers' environment variables as data.

Each launcher writes the same four facts (global rank, world size, local rank, local world size) under its
own names; [`LAUNCHERS`][anyaccel.engine.launchers.LAUNCHERS] lists them, in precedence order, and
[`detect_launch`][anyaccel.engine.launchers.detect_launch] reads the first
launcher whose marker variables are all set. Precedence follows nesting: a launcher started *inside*
another (torchrun or the deepspeed launcher in a SLURM job step, ``mpirun`` in a SLURM allocation) sets its
own variables for each process it starts, while the outer one's describe the outer task, so the innermost
launcher must win:

=====  ===========  ================================================================================
order  source       marker variables (all set)
=====  ===========  ================================================================================
1      torchrun     ``RANK``, ``WORLD_SIZE``, ``TORCHELASTIC_RUN_ID`` (torch.distributed.run)
2      deepspeed    ``RANK``, ``WORLD_SIZE``, ``CROSS_RANK`` (deepspeed/launcher/launch.py)
3      env          ``RANK``, ``WORLD_SIZE`` (accelerate, Kubernetes PyTorchJob, set by hand)
4      openmpi      ``OMPI_COMM_WORLD_RANK``, ``OMPI_COMM_WORLD_SIZE``
5      mvapich      ``MV2_COMM_WORLD_RANK``, ``MV2_COMM_WORLD_SIZE``
6      pmi          ``PMI_RANK``, ``PMI_SIZE`` (MPICH and Intel MPI's Hydra)
7      slurm        ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_STEP_ID`` (a task of an ``srun`` job step)
8      single       none: one process, rank 0 of 1
=====  ===========  ================================================================================

SLURM counts only inside a job step: a batch script itself has ``SLURM_PROCID=0`` and ``SLURM_NTASKS`` of
the whole allocation but no ``SLURM_STEP_ID``, and treating it as rank 0 of N would wait for N-1 peers that
were never started. The rendezvous address is ``MASTER_ADDR``/``MASTER_PORT`` for every launcher; under
SLURM, when unset, the first host of the step's node list and a port derived from the job id (as Lightning's
``SLURMEnvironment`` does) are used. ``docs/engine.md`` has the full table.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping

from anyaccel.engine.errors import (
    IncompleteLaunchEnvironmentError,
    InvalidEnvironmentValueError,
    LocalRankOutOfRangeError,
    MissingMasterAddressError,
    RankOutOfRangeError,
)
from anyaccel.engine.slurm import SlurmFormatError, first_host, tasks_on_node

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MASTER_PORT",
    "LAUNCHERS",
    "SINGLE_PROCESS",
    "LaunchEnvironment",
    "LauncherSpec",
    "detect_launch",
]

#: The rendezvous port torchrun and DeepSpeed use when none is given.
DEFAULT_MASTER_PORT = 29500
#: Rendezvous variables, read for every launcher.
MASTER_ADDR, MASTER_PORT = "MASTER_ADDR", "MASTER_PORT"
#: The ``source`` of a process no launcher started.
SINGLE_PROCESS = "single"
#: Variables that mean nothing one without the other: one of them set alone is an
#: [`IncompleteLaunchEnvironmentError`][anyaccel.engine.launchers.IncompleteLaunchEnvironmentError], never a one-process
#: job (torch's ``env://`` refuses it too).
PAIRED_VARIABLES = (("RANK", "WORLD_SIZE"),)

#: A fallback reader: environment -> (value, variable read, that variable's value), or None when it has
#: nothing to say (``("node001", "SLURM_JOB_NODELIST", "node[001-004]")``).
Fallback = Callable[[Mapping[str, str]], "tuple[str, str, str] | None"]


@dataclasses.dataclass(frozen=True)
class LauncherSpec:
    """The variables one launcher writes, first set name wins in each tuple.

    Attributes:
        name: the ``source`` reported for it (``"torchrun"``).
        description: one line for docs and logs.
        markers: variables that are all set exactly when this launcher started the process.
        rank: names of the global rank.
        world_size: names of the number of processes in the job.
        local_rank: names of the rank among the processes of this node.
        local_world_size: names of the number of processes on this node.
        local_world_size_fallback: reads the local world size when no name of ``local_world_size`` is set.
        master_addr_fallback: reads the rendezvous host when ``MASTER_ADDR`` is unset.
        master_port_fallback: reads the rendezvous port when ``MASTER_PORT`` is unset.
    """

    name: str
    description: str
    markers: tuple[str, ...]
    rank: tuple[str, ...]
    world_size: tuple[str, ...]
    local_rank: tuple[str, ...]
    local_world_size: tuple[str, ...]
    local_world_size_fallback: Fallback | None = None
    master_addr_fallback: Fallback | None = None
    master_port_fallback: Fallback | None = None


def _first_set(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    for name in names:
        if name in env:
            return env[name], name
    return None


def _slurm_local_world_size(env: Mapping[str, str]) -> tuple[str, str, str] | None:
    """Tasks on this node from ``SLURM_STEP_TASKS_PER_NODE`` (else ``SLURM_TASKS_PER_NODE``) and ``SLURM_NODEID``."""
    counts = _first_set(env, ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"))
    node = env.get("SLURM_NODEID", "0").strip()
    if counts is None or not node.isdigit():
        return None
    try:
        return str(tasks_on_node(counts[0], int(node))), counts[1], counts[0]
    except SlurmFormatError as exc:
        raise InvalidEnvironmentValueError(
            str(exc), "slurm", {counts[1]: counts[0], "SLURM_NODEID": node},
            "unset it or let srun set it; it should read like '2(x3),1'",
        ) from exc


def _slurm_master_addr(env: Mapping[str, str]) -> tuple[str, str, str] | None:
    """The first host of the step's node list (``SLURM_STEP_NODELIST``, ``SLURM_JOB_NODELIST``, ``SLURM_NODELIST``)."""
    nodelist = _first_set(env, ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"))
    if nodelist is None:
        return None
    try:
        return first_host(nodelist[0]), nodelist[1], nodelist[0]
    except SlurmFormatError as exc:
        raise InvalidEnvironmentValueError(
            str(exc), "slurm", {nodelist[1]: nodelist[0]}, f"set {MASTER_ADDR} to the first node's host name"
        ) from exc


def _slurm_master_port(env: Mapping[str, str]) -> tuple[str, str, str] | None:
    """``15000 + SLURM_JOB_ID % 10000``: jobs sharing a node get different ports (Lightning's rule)."""
    job = env.get("SLURM_JOB_ID", "").strip()
    if not job.isdigit():
        return None
    return str(15000 + int(job) % 10000), "SLURM_JOB_ID", job


#: Every launcher anyaccel reads, in precedence order (module docstring).
LAUNCHERS: tuple[LauncherSpec, ...] = (
    LauncherSpec("torchrun", "torchrun (torch.distributed.run)", ("RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"),
                 ("RANK",), ("WORLD_SIZE",), ("LOCAL_RANK",), ("LOCAL_WORLD_SIZE",)),
    LauncherSpec("deepspeed", "the deepspeed launcher", ("RANK", "WORLD_SIZE", "CROSS_RANK"),
                 ("RANK",), ("WORLD_SIZE",), ("LOCAL_RANK",), ("LOCAL_SIZE", "LOCAL_WORLD_SIZE")),
    LauncherSpec("env", "RANK and WORLD_SIZE from another launcher or set by hand", ("RANK", "WORLD_SIZE"),
                 ("RANK",), ("WORLD_SIZE",), ("LOCAL_RANK",), ("LOCAL_WORLD_SIZE", "LOCAL_SIZE")),
    LauncherSpec("openmpi", "Open MPI's mpirun", ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                 ("OMPI_COMM_WORLD_RANK",), ("OMPI_COMM_WORLD_SIZE",), ("OMPI_COMM_WORLD_LOCAL_RANK",),
                 ("OMPI_COMM_WORLD_LOCAL_SIZE",)),
    LauncherSpec("mvapich", "MVAPICH2's mpirun_rsh / mpiexec", ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"),
                 ("MV2_COMM_WORLD_RANK",), ("MV2_COMM_WORLD_SIZE",), ("MV2_COMM_WORLD_LOCAL_RANK",),
                 ("MV2_COMM_WORLD_LOCAL_SIZE",)),
    LauncherSpec("pmi", "MPICH / Intel MPI (Hydra's PMI)", ("PMI_RANK", "PMI_SIZE"),
                 ("PMI_RANK",), ("PMI_SIZE",), ("MPI_LOCALRANKID",), ("MPI_LOCALNRANKS",)),
    LauncherSpec("slurm", "a task of a SLURM job step (srun)", ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_ID"),
                 ("SLURM_PROCID",), ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"), ("SLURM_LOCALID",), (),
                 local_world_size_fallback=_slurm_local_world_size, master_addr_fallback=_slurm_master_addr,
                 master_port_fallback=_slurm_master_port),
)


@dataclasses.dataclass(frozen=True)
class LaunchEnvironment:
    """This process's place in the job, as its launcher described it.

    Attributes:
        source: the launcher (a `LauncherSpec.name`, or ``"single"``).
        rank: global rank, ``0 <= rank < world_size``.
        world_size: number of processes in the job, >= 1.
        local_rank: rank among the processes of this node, ``0 <= local_rank < local_world_size``.
        local_world_size: number of processes on this node, ``<= world_size``.
        master_addr: rendezvous host, or None when nothing gave one.
        master_port: rendezvous TCP port (1-65535).
        origin: ``(field, variable, value)`` triples saying which variable each field was read from (for a
            derived field, the variable it was derived from), for messages.
    """

    source: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str | None
    master_port: int
    origin: tuple[tuple[str, str, str], ...] = ()

    def variable_of(self, field: str) -> str | None:
        """The variable ``field`` was read from (``"LOCAL_RANK"``), or None when it took its default."""
        return next((variable for name, variable, _ in self.origin if name == field), None)

    def variables(self, *fields: str) -> dict[str, str]:
        """``{variable: value}`` behind ``fields``, for an error's ``variables``; ``{field: "<n> (default)"}``
        for a field no variable gave."""
        read = {name: (variable, value) for name, variable, value in self.origin}
        shown: dict[str, str] = {}
        for field in fields:
            if field in read:
                shown[read[field][0]] = read[field][1]
            else:
                shown[field] = f"{getattr(self, field)} (default)"
        return shown

    def require_rendezvous(self) -> tuple[str, int]:
        """The ``(host, port)`` to meet the other processes at.

        Raises:
            MissingMasterAddressError: ``world_size > 1`` and no ``MASTER_ADDR`` (nor a launcher fallback).
        """
        if self.master_addr is None:
            raise MissingMasterAddressError(
                f"{self.world_size} processes must meet at one address, and {MASTER_ADDR} is not set",
                self.source, self.variables("rank", "world_size"),
                f"export {MASTER_ADDR}=<host name or IP of the rank-0 node> (and {MASTER_PORT}, default "
                f"{DEFAULT_MASTER_PORT}) to every process, e.g. 'mpirun -x {MASTER_ADDR}=node1 -x {MASTER_PORT}=29500'",
            )
        return self.master_addr, self.master_port


def _integer(source: str, name: str, value: str, minimum: int) -> int:
    text = value.strip()
    if not (text.isdigit() or (text.startswith("-") and text[1:].isdigit())):
        raise InvalidEnvironmentValueError(
            "is not an integer", source, {name: value},
            f"set {name} to a whole number >= {minimum}, or unset it and let the launcher set it",
        )
    number = int(text)
    if number < minimum:
        raise InvalidEnvironmentValueError(
            f"must be >= {minimum}", source, {name: value}, f"set {name} to a whole number >= {minimum}"
        )
    return number


def _read(spec: LauncherSpec, env: Mapping[str, str]) -> LaunchEnvironment:
    origin: list[tuple[str, str, str]] = []

    def field(key: str, names: tuple[str, ...], minimum: int, fallback: Fallback | None = None) -> int | None:
        found = _first_set(env, names)
        if found is None and fallback is not None:
            fallen = fallback(env)
            if fallen is not None:
                origin.append((key, fallen[1], fallen[2]))
                return _integer(spec.name, fallen[1], fallen[0], minimum)
        if found is None:
            return None
        origin.append((key, found[1], found[0]))
        return _integer(spec.name, found[1], found[0], minimum)

    rank = field("rank", spec.rank, 0)
    world_size = field("world_size", spec.world_size, 1)
    assert rank is not None and world_size is not None  # markers guarantee one name of each is set
    local_world_size = field("local_world_size", spec.local_world_size, 1, spec.local_world_size_fallback)
    local_rank = field("local_rank", spec.local_rank, 0)
    if local_rank is None:  # one node: the local rank is the global one
        local_rank = rank if local_world_size is None else rank % local_world_size
    if local_world_size is None:  # one node: every process is local
        local_world_size = world_size
    port = field("master_port", (MASTER_PORT,), 1, spec.master_port_fallback)
    master_port = DEFAULT_MASTER_PORT if port is None else port
    addr = env.get(MASTER_ADDR, "").strip() or None
    if addr is not None:
        origin.append(("master_addr", MASTER_ADDR, addr))
    elif spec.master_addr_fallback is not None:
        fallen = spec.master_addr_fallback(env)
        if fallen is not None:
            addr = fallen[0]
            origin.append(("master_addr", fallen[1], fallen[2]))
    launch = LaunchEnvironment(spec.name, rank, world_size, local_rank, local_world_size, addr, master_port,
                               tuple(origin))
    _check(launch)
    return launch


def _check(launch: LaunchEnvironment) -> None:
    """Raise the typed error for the first inconsistency among the four numbers and the port."""
    if launch.rank >= launch.world_size:
        raise RankOutOfRangeError(
            f"rank {launch.rank} is not below the world size {launch.world_size} (ranks run from 0 to "
            f"{launch.world_size - 1})", launch.source, launch.variables("rank", "world_size"),
            "give every process of the job the same world size and a distinct rank below it; with a launcher, "
            "check its process and node counts (torchrun --nnodes/--nproc_per_node, srun -n, mpirun -np)",
        )
    if launch.local_world_size > launch.world_size:
        raise InvalidEnvironmentValueError(
            f"{launch.local_world_size} processes on this node is more than the {launch.world_size} of the job",
            launch.source, launch.variables("local_world_size", "world_size"),
            "give the local world size the number of processes started on this node",
        )
    if launch.local_rank >= launch.local_world_size:
        raise LocalRankOutOfRangeError(
            f"local rank {launch.local_rank} is not below the {launch.local_world_size} processes of this node",
            launch.source, launch.variables("local_rank", "local_world_size"),
            "give each process on a node a distinct local rank from 0 to the node's process count - 1",
        )
    if not 1 <= launch.master_port <= 65535:
        raise InvalidEnvironmentValueError(
            "is not a TCP port", launch.source, launch.variables("master_port"),
            f"set {MASTER_PORT} to a free port between 1 and 65535 (torchrun's default is {DEFAULT_MASTER_PORT})",
        )


def _check_pairs(env: Mapping[str, str]) -> None:
    """Raise [`IncompleteLaunchEnvironmentError`][anyaccel.engine.launchers.IncompleteLaunchEnvironmentError] when one
    variable of a `PAIRED_VARIABLES` pair is set
    without the other (called when no launcher's markers are all set)."""
    for pair in PAIRED_VARIABLES:
        have = [name for name in pair if name in env]
        if have and len(have) < len(pair):
            missing = [name for name in pair if name not in env]
            raise IncompleteLaunchEnvironmentError(
                f"{' and '.join(missing)} is not set, so the job's size is unknown; {' and '.join(have)} alone "
                f"would make this process a one-process job", "env", {name: env[name] for name in have},
                f"set both {' and '.join(pair)} (e.g. RANK=0 WORLD_SIZE=2, and MASTER_ADDR/MASTER_PORT) or unset "
                f"{' and '.join(have)} to run a single process; or start the job with a launcher (torchrun)",
            )


def detect_launch(environ: Mapping[str, str] | None = None) -> LaunchEnvironment:
    """Read this process's launcher environment (module docstring: which launchers, which precedence).

    Args:
        environ: the environment to read; ``os.environ`` when None.

    Returns:
        A [`LaunchEnvironment`][anyaccel.engine.launchers.LaunchEnvironment]; ``source == "single"`` (rank 0 of 1) when
        no launcher's markers are set.

    Raises:
        InvalidEnvironmentValueError: a variable is not an integer, is negative or zero where a count is
            expected, the port is outside 1-65535, a SLURM list is malformed, or the local world size
            exceeds the world size.
        RankOutOfRangeError: rank >= world size.
        LocalRankOutOfRangeError: local rank >= local world size.
        IncompleteLaunchEnvironmentError: no launcher's markers are all set and ``RANK`` is set without
            ``WORLD_SIZE`` or the reverse (`PAIRED_VARIABLES`).

    Side effects: reads the environment (nothing else); logs at DEBUG which launcher was chosen and which
    lower-precedence launchers' variables were also present.
    """
    env = os.environ if environ is None else environ
    present = [spec for spec in LAUNCHERS if all(name in env for name in spec.markers)]
    if not present:
        _check_pairs(env)
        logger.debug("no launcher variables set: a single process")
        return LaunchEnvironment(SINGLE_PROCESS, 0, 1, 0, 1, env.get(MASTER_ADDR) or None, DEFAULT_MASTER_PORT)
    chosen = present[0]
    if len(present) > 1:
        logger.debug("launcher %s takes precedence over %s, whose variables are also set", chosen.name,
                     ", ".join(spec.name for spec in present[1:]))
    return _read(chosen, env)
