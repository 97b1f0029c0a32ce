"""Host (process and machine) memory figures for accelerators without a device allocator: CPU and MPS.

Uses psutil when it is installed (as DeepSpeed's CPU accelerator does) and otherwise the POSIX interfaces
(``/proc/self/statm``, ``/proc/meminfo``, ``os.sysconf``, ``resource.getrusage``). All sizes are in bytes.
"""

from __future__ import annotations

import importlib.util
import os
import sys

__all__ = ["process_rss_bytes", "total_host_memory_bytes", "available_host_memory_bytes", "memlock_limit_bytes",
           "PeakGauge"]

_HAS_PSUTIL = importlib.util.find_spec("psutil") is not None


def process_rss_bytes() -> int:
    """Resident set size of this process in bytes."""
    if _HAS_PSUTIL:
        import psutil

        return int(psutil.Process().memory_info().rss)
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS reports bytes, Linux KiB


def total_host_memory_bytes() -> int:
    """Physical memory of the machine in bytes."""
    if _HAS_PSUTIL:
        import psutil

        return int(psutil.virtual_memory().total)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def available_host_memory_bytes() -> int:
    """Memory available to new allocations without swapping, in bytes (``MemAvailable`` on Linux)."""
    if _HAS_PSUTIL:
        import psutil

        return int(psutil.virtual_memory().available)
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def memlock_limit_bytes() -> int | None:
    """The soft ``RLIMIT_MEMLOCK`` of this process in bytes (how much it may lock with ``mlock``); None when
    unlimited or where the limit cannot be read (not POSIX)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    return None if soft == resource.RLIM_INFINITY else int(soft)


class PeakGauge:
    """Peaks of memory figures that have no peak counter of their own, sampled at each query.

    The peak is the largest value observed by ``observe`` since the last ``reset``: an honest lower bound
    of the true peak, exact when the figure is queried at its high points (DeepSpeed's memory reports are).
    """

    def __init__(self) -> None:
        self._peaks: dict[str, int] = {}

    def observe(self, key: str, value: int) -> int:
        """Record ``value`` for ``key`` and return it."""
        self._peaks[key] = max(self._peaks.get(key, value), value)
        return value

    def peak(self, key: str, current: int) -> int:
        """The peak of ``key`` including the ``current`` value."""
        return max(self._peaks.get(key, current), current)

    def reset(self, key: str | None = None, current: dict[str, int] | None = None) -> None:
        """Forget the peak of ``key`` (all keys when None), restarting from ``current`` values if given."""
        if key is None:
            self._peaks = dict(current or {})
        else:
            self._peaks.pop(key, None)
            if current and key in current:
                self._peaks[key] = current[key]
