"""``init_distributed()`` / ``destroy_distributed()``: the launcher-to-process-group steps every script repeats.

``init_distributed()`` reads the launcher's environment (`anyaccel.engine.launchers`: torchrun, the
deepspeed launcher, MPI, SLURM, in that precedence), binds the local device
([`Accelerator`][anyaccel.engine.distributed.Accelerator]), and
initialises ``torch.distributed`` with the accelerator's ``communication_backend_name()`` (gloo on the CPU)
and a bounded timeout. It is idempotent: a second call returns the same
[`EnvironmentTable`][anyaccel.engine.distributed.EnvironmentTable], and a
process group initialised by someone else (DeepSpeed, a test harness) is adopted, not re-created.

How the processes meet: a one-process group needs no rendezvous (an in-memory ``HashStore``); otherwise
``tcp://MASTER_ADDR:MASTER_PORT`` with the rank and world size passed explicitly, which also works under
torchrun (whose agent already hosts the store there: torch's ``_create_c10d_store`` connects to it) and
under MPI and SLURM (where this module, not the launcher, derived the values). ``os.environ`` is not
modified.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from anyaccel.engine.accelerator import Accelerator
from anyaccel.engine.collectives import EAGER_INIT_BACKENDS, ensure_backend
from anyaccel.engine.environment import EnvironmentTable
from anyaccel.engine.errors import DistributedUnavailableError, ProcessGroupMismatchError
from anyaccel.engine.launchers import SINGLE_PROCESS, LaunchEnvironment, detect_launch

if TYPE_CHECKING:
    from anyaccel.accelerator import DeepSpeedAccelerator

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_TIMEOUT", "ADOPTED", "current_environment", "destroy_distributed", "init_distributed"]

#: How long a collective (and the initial rendezvous) may wait before failing: 10 minutes, torch's NCCL
#: default and DeepSpeed's ``init_distributed`` default. Never unbounded.
DEFAULT_TIMEOUT = datetime.timedelta(minutes=10)
#: The ``source`` of a process group found initialised, with no launcher variables to place it.
ADOPTED = "process-group"

_lock = threading.RLock()
_table: EnvironmentTable | None = None


def _timeout(value: datetime.timedelta | float | None) -> datetime.timedelta:
    if value is None:
        return DEFAULT_TIMEOUT
    timeout = value if isinstance(value, datetime.timedelta) else datetime.timedelta(seconds=float(value))
    if timeout.total_seconds() <= 0:
        raise ValueError(f"timeout={value!r} must be positive (a timedelta or seconds); the default is "
                         f"{DEFAULT_TIMEOUT.total_seconds():.0f} s")
    return timeout


def _tcp_url(host: str, port: int) -> str:
    """``tcp://host:port``, with an IPv6 address in brackets."""
    return f"tcp://[{host}]:{port}" if ":" in host and not host.startswith("[") else f"tcp://{host}:{port}"


def _import_group_default_holders() -> None:
    """Import ``torch.distributed.nn`` while no default group exists (about 3 ms, once per process).

    Its ``functional`` module binds ``group.WORLD`` as default arguments when imported; imported after
    ``init_process_group`` (DDP imports it), it keeps the group alive past ``destroy_process_group()``, and
    with it gloo's worker threads. Those threads drop the last collectives' tensors after the collectives
    return, which takes the GIL, and a process that reaches interpreter finalization first aborts
    ("terminate called without an active exception"; pytorch/pytorch#190489). Imported now, the defaults
    are None, and a destroyed group really is destroyed: its destructor joins the threads.
    """
    import torch.distributed.nn  # noqa: F401


def _adopt(launch: LaunchEnvironment, backend: str | None) -> tuple[LaunchEnvironment, str]:
    """Check an existing default process group against the environment; return the placement to use."""
    rank, world_size, actual = dist.get_rank(), dist.get_world_size(), str(dist.get_backend())
    if backend is not None and backend.lower() != actual.lower():
        raise ProcessGroupMismatchError(
            f"the process group is already initialised with backend {actual!r}, not the {backend!r} asked for",
            ADOPTED, {"backend": actual}, "call destroy_distributed() first, or drop the backend argument",
        )
    if launch.source == SINGLE_PROCESS:  # nothing to check against: one node, as torch.multiprocessing jobs are
        return LaunchEnvironment(ADOPTED, rank, world_size, rank, world_size, None, launch.master_port), actual
    if (launch.rank, launch.world_size) != (rank, world_size):
        raise ProcessGroupMismatchError(
            f"the initialised process group has rank {rank} of {world_size}, the environment says "
            f"{launch.rank} of {launch.world_size}", launch.source, launch.variables("rank", "world_size"),
            "initialise the process group from the same environment, or let init_distributed() do it",
        )
    return launch, actual


def init_distributed(
    *,
    backend: str | None = None,
    timeout: datetime.timedelta | float | None = None,
    accelerator: DeepSpeedAccelerator | None = None,
    environ: Mapping[str, str] | None = None,
) -> EnvironmentTable:
    """Set up this process for distributed training and say where it stands.

    Args:
        backend: the ``torch.distributed`` backend; ``accelerator.communication_backend_name()`` when None
            (nccl on CUDA/ROCm, xccl or ccl on XPU, hccl on NPU, gloo on CPU and MPS).
        timeout: how long the rendezvous and each collective may wait, as a ``timedelta`` or seconds;
            [`DEFAULT_TIMEOUT`][anyaccel.engine.distributed.DEFAULT_TIMEOUT] (10 min) when None.
        accelerator: the anyaccel accelerator; ``get_accelerator()`` when None.
        environ: the environment to read the launcher's variables from; ``os.environ`` when None.

    Returns:
        The [`EnvironmentTable`][anyaccel.engine.distributed.EnvironmentTable]; the same object on every later call
        while the group lives.

    Raises:
        InvalidEnvironmentValueError: a launcher variable is not an integer or out of range.
        IncompleteLaunchEnvironmentError: ``RANK`` is set without ``WORLD_SIZE``, or the reverse (checked
            before anything is initialised; torch's ``env://`` refuses the same environment).
        RankOutOfRangeError: the rank is not below the world size.
        LocalRankOutOfRangeError: the local rank is not below the local world size, or (GPU-like devices)
            not below the number of devices this process sees.
        MissingMasterAddressError: several processes and no ``MASTER_ADDR`` (nor a SLURM node list).
        ProcessGroupMismatchError: an existing process group disagrees with the environment, or was
            initialised with another backend than ``backend``.
        DistributedUnavailableError: torch is built without ``torch.distributed``.
        ImportError: ``backend`` needs a provider package that is not installed (``ccl``).
        ValueError: ``timeout`` is not positive.
        RuntimeError, DistStoreError: torch's own errors from ``init_process_group``, e.g. the peers did not
            arrive within ``timeout``.

    Side effects: reads the environment; may select the accelerator (``get_accelerator()``); sets the
    current device (``accelerator.set_device``); initialises the default process group, which for a
    multi-process job connects to the rendezvous store and waits (at most ``timeout``) for every peer; logs
    the result at INFO. Never writes ``os.environ``.
    """
    global _table
    if not dist.is_available():
        raise DistributedUnavailableError(torch.__version__)
    with _lock:
        if _table is not None and dist.is_initialized():
            if backend is not None and backend.lower() != _table.backend.lower():
                raise ProcessGroupMismatchError(
                    f"init_distributed() already set up backend {_table.backend!r}, not the {backend!r} asked for",
                    _table.source, {"backend": _table.backend},
                    "call destroy_distributed() first, or drop the backend argument",
                )
            return _table
        limit = _timeout(timeout)
        launch = detect_launch(environ)
        rendezvous: tuple[str, int] | None = None
        if dist.is_initialized():
            launch, chosen = _adopt(launch, backend)
            component = Accelerator(accelerator, launch=launch)
            device = component.bind()
        else:
            component = Accelerator(accelerator, launch=launch)
            chosen = backend or component.backend
            if launch.world_size > 1:
                rendezvous = launch.require_rendezvous()
            device = component.bind()  # before the group exists: NCCL communicators belong to the current device
            ensure_backend(chosen)
            options: dict[str, object] = {"backend": chosen, "rank": launch.rank, "world_size": launch.world_size,
                                          "timeout": limit}
            if rendezvous is None:
                options["store"] = dist.HashStore()
            else:
                options["init_method"] = _tcp_url(*rendezvous)
            if chosen.lower() in EAGER_INIT_BACKENDS and component.device_index is not None:
                options["device_id"] = device
            _import_group_default_holders()
            logger.debug("init_process_group(%s)", options)
            dist.init_process_group(**options)  # type: ignore[arg-type]
            chosen = str(dist.get_backend())
        _table = EnvironmentTable(
            rank=launch.rank, world_size=launch.world_size, local_rank=launch.local_rank,
            local_world_size=launch.local_world_size, device=device, backend=chosen, accelerator=component.name,
            source=launch.source, master_addr=rendezvous[0] if rendezvous else None,
            master_port=rendezvous[1] if rendezvous else None,
        )
        logger.info("distributed: rank %d/%d (local %d/%d) on %s, backend %s, from %s", _table.rank,
                    _table.world_size, _table.local_rank, _table.local_world_size, _table.device, _table.backend,
                    _table.source)
        if not component.supports_collectives:
            logger.warning("the %s backend cannot run collectives on %s tensors; keep tensors you reduce on "
                           "the CPU", chosen, component.device_type)
        return _table


def current_environment() -> EnvironmentTable | None:
    """The record of the last [`init_distributed`][anyaccel.engine.distributed.init_distributed], or None when none is
    live (never set up, destroyed)."""
    with _lock:
        return _table if _table is not None and dist.is_available() and dist.is_initialized() else None


def destroy_distributed() -> None:
    """Tear down the default process group, if one is initialised, and forget the record.

    Safe to call twice, or when nothing was set up. A later
    [`init_distributed`][anyaccel.engine.distributed.init_distributed] sets up afresh.

    Side effects: ``torch.distributed.destroy_process_group()`` (also for a group that was adopted, since
    it is the default group either way); does not reset the current device.

    Drop the objects that hold the group first (a ``DistributedDataParallel`` module does): the group is
    only freed, and its backend's threads joined, when the last reference goes. A gloo group that outlives
    this call keeps worker threads that can abort the process at exit (pytorch/pytorch#190489).
    """
    global _table
    with _lock:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        _table = None
