"""Shared helpers for anyaccel's benchmarks: interleaved timing, a measured bandwidth ceiling, tables.

Machines we benchmark on are shared and their bandwidth drifts by up to ~1.5x minute to minute
(../shared/reference/baselines.md), so implementations are compared only within one run, interleaved
round-robin (every repeat runs each implementation once, in turn), and summarised by the median.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

GIB = 1024**3


def interleaved_times(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1) -> dict[str, list[float]]:
    """Times each callable ``repeats`` times, round-robin, after ``warmup`` untimed rounds.

    Args:
        fns: Name -> zero-argument callable doing one unit of work (e.g. one optimizer step).
        repeats: Timed rounds; each round calls every callable once, in insertion order.
        warmup: Untimed rounds run first (first-touch page faults, lazy kernel loads, caches).

    Returns:
        Name -> list of ``repeats`` wall times in seconds (``time.perf_counter``).
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (seconds or any unit)."""
    return statistics.median(values)


def inplace_add_bandwidth(working_set_bytes: int, repeats: int = 7) -> float:
    """Measures the in-place ``a += b`` memory bandwidth ceiling with torch's current thread count.

    ``a += b`` reads two arrays and writes one in place, the access pattern of an in-place optimizer step
    (which reads p, g, m, v and writes p, m, v), so it is the relevant ceiling rather than STREAM's triad.

    Args:
        working_set_bytes: Bytes of ``a`` and ``b`` together (fp32); choose well above the last-level cache.
        repeats: Timed repetitions; the median is used.

    Returns:
        Bandwidth in GB/s (1e9 bytes per second), counting 12 bytes per fp32 element (2 reads, 1 write).
    """
    numel = max(1, working_set_bytes // 8)
    a = torch.rand(numel)
    b = torch.rand(numel)
    a.add_(b)  # first touch
    times = interleaved_times({"add": lambda: a.add_(b)}, repeats=repeats, warmup=1)["add"]
    return 12 * numel / median(times) / 1e9


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Formats ``rows`` under ``headers`` as a Markdown table with padded columns."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    lines = [
        "| " + " | ".join(str(h).ljust(w) for h, w in zip(headers, widths)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += ["| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    return "\n".join(lines)


def parse_count(text: str) -> int:
    """Parses an element count such as ``"1M"``, ``"100m"``, ``"250k"``, ``"1e6"`` or ``"4096"``.

    Raises:
        ValueError: ``text`` is not a count (the message names it and the accepted forms).
    """
    suffixes = {"k": 10**3, "m": 10**6, "g": 10**9}
    value = text.strip().lower()
    try:
        if value and value[-1] in suffixes:
            return int(float(value[:-1]) * suffixes[value[-1]])
        return int(float(value))
    except ValueError:
        raise ValueError(f"bad element count {text!r}; accepted: an integer, 1e6, or a number with k/M/G") from None
