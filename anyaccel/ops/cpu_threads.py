"""How many threads anyaccel's CPU kernels use, and keeping ranks that share a host from oversubscribing it.

The host kernels (``csrc/includes/host_optimizer.h``) run on torch's intra-op thread pool
(``torch_parallel_for``): a step uses ``min(torch.get_num_threads(), ceil(elements / 16384))`` workers, and the
pool's threads run where the process's CPU affinity mask allows (what ``numactl``, ``taskset`` or
DeepSpeed's ``--bind_cores_to_rank`` set). torch sizes its pool from the mask at start-up, so a bound rank is
right by itself. Ranks launched without binding each see every CPU of the host, and ``L`` of them with ``T``
threads each run ``L * T`` busy threads on the host's CPUs: the optimizer step then slows down many-fold
(PyTorch #108491 discusses ZeRO-Offload's CPU step as the bottleneck).

[`thread_plan`][anyaccel.ops.cpu_threads.thread_plan] describes the situation (``anyaccel report`` prints it);
[`apply_thread_policy`][anyaccel.ops.cpu_threads.apply_thread_policy],
called once per process by the CPU optimizers before their first step, lowers torch's thread count to the
rank's share when it would oversubscribe, unless ``ANYACCEL_CPU_THREADS`` says otherwise:

* unset or ``auto``: share the CPUs of the mask among the ranks of this host that are not bound;
* an integer ``N >= 1``: ``torch.set_num_threads(min(N, M))``, ``M`` the CPUs of the affinity mask; an ``N``
  above ``M`` is clamped with one warning, not refused: a thread beyond the mask's CPUs only waits for a CPU
  another thread of the pool holds, so it can never speed a step up, and one job script (one value) runs on
  hosts and bindings of every size, where an error would stop a training run over a tuning knob;
* ``torch``: leave torch's setting alone.

Local rank counts come from the launchers' environment: ``LOCAL_WORLD_SIZE`` (torchrun, DeepSpeed),
``OMPI_COMM_WORLD_LOCAL_SIZE`` (Open MPI), ``MPI_LOCALNRANKS`` (MPICH), ``SLURM_NTASKS_PER_NODE``.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import torch

from anyaccel import settings

__all__ = ["ENV", "apply_thread_policy", "thread_plan"]

logger = logging.getLogger(__name__)

#: The environment variable of the thread policy.
ENV = settings.CPU_THREADS.name
#: Environment variables giving the number of ranks on this host, in the order they are read.
LOCAL_SIZE_ENVS = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE")
#: Elements per worker below which the kernels wake no further thread (host_optimizer.h kGrainElements).
GRAIN_ELEMENTS = 16384

_applied = False
_lock = threading.Lock()


class ThreadPolicyError(settings.SettingError):
    """``ANYACCEL_CPU_THREADS`` holds a value that is not ``auto``, ``torch`` or a positive integer."""


def _local_ranks() -> tuple[int, str | None]:
    for name in LOCAL_SIZE_ENVS:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) >= 1:
            return int(value), name
    return 1, None


def _affinity() -> tuple[int, int]:
    """(CPUs in this process's affinity mask, CPUs of the host)."""
    host = os.cpu_count() or 1
    getter = getattr(os, "sched_getaffinity", None)
    mask = len(getter(0)) if getter is not None else host
    return mask, host


def thread_plan() -> dict[str, Any]:
    """What the CPU kernels will use here, and whether the ranks of this host oversubscribe it.

    Returns:
        ``torch_threads`` (torch's intra-op threads: the most workers a kernel call uses), ``affinity_cpus``
        and ``host_cpus``, ``bound`` (the mask is smaller than the host), ``local_ranks`` and the variable it
        came from, ``busy_threads`` (threads the host's ranks run in a step, counting unbound ranks as
        sharing all CPUs), ``oversubscribed``, ``recommended_threads``, ``policy`` (the value of
        ``ANYACCEL_CPU_THREADS``) and ``grain_elements``.

    Side effects: reads the environment and the affinity mask; changes nothing.
    """
    threads = torch.get_num_threads()
    mask, host = _affinity()
    ranks, source = _local_ranks()
    bound = mask < host
    sharing = 1 if bound else ranks  # bound ranks own their mask; unbound ranks all share it
    busy = threads * sharing
    recommended = max(1, mask // sharing)
    return {
        "torch_threads": threads,
        "affinity_cpus": mask,
        "host_cpus": host,
        "bound": bound,
        "local_ranks": ranks,
        "local_ranks_from": source,
        "busy_threads": busy,
        "oversubscribed": busy > mask,
        "recommended_threads": recommended,
        "policy": settings.CPU_THREADS.raw() or settings.CPU_THREADS.default_choice,
        "grain_elements": GRAIN_ELEMENTS,
    }


def apply_thread_policy() -> int:
    """Applies ``ANYACCEL_CPU_THREADS`` once per process; returns torch's thread count afterwards.

    Raises:
        ThreadPolicyError: the variable is not ``auto``, ``torch`` or an integer ``>= 1``.

    Side effects: may call ``torch.set_num_threads`` (process-wide); logs one warning when it lowers the count
    because the host's ranks would oversubscribe it, or because an explicit count exceeds the CPUs of the
    affinity mask (``os.sched_getaffinity``; ``os.cpu_count()`` where there is none) and is clamped to them.
    """
    global _applied
    with _lock:
        if _applied:
            return torch.get_num_threads()
        policy = settings.CPU_THREADS.get(error=ThreadPolicyError)
        if policy == "torch":
            pass
        elif policy == "auto":
            plan = thread_plan()
            if plan["oversubscribed"] and plan["recommended_threads"] < plan["torch_threads"]:
                logger.warning(
                    "anyaccel: %d rank(s) on this host (%s) each run %d threads on %d CPUs; lowering torch's "
                    "threads to %d for the CPU optimizer (set %s=torch to keep torch's count, or bind ranks to "
                    "cores, e.g. deepspeed --bind_cores_to_rank)", plan["local_ranks"], plan["local_ranks_from"],
                    plan["torch_threads"], plan["affinity_cpus"], plan["recommended_threads"], ENV)
                torch.set_num_threads(plan["recommended_threads"])
        elif isinstance(policy, int):
            mask, _ = _affinity()
            if policy > mask:
                logger.warning(
                    "anyaccel: %s=%d asks for more threads than the %d CPU(s) this process may run on (its affinity "
                    "mask); using %d (extra threads would only wait for a CPU; set %s to at most %d to silence this)",
                    ENV, policy, mask, mask, ENV, mask)
                policy = mask
            torch.set_num_threads(policy)
        _applied = True
        return torch.get_num_threads()


def _reset_for_tests() -> None:
    """Forget that the policy was applied (tests only)."""
    global _applied
    with _lock:
        _applied = False
