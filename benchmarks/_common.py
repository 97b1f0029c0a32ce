"""Shared helpers for anyaccel's benchmarks: interleaved timing, a measured bandwidth ceiling, tables, and the
plumbing of the host-optimizer benchmarks (``cpu_adam.py``, ``cpu_lion.py``): command line, parameter
layouts, one interleaved case per (size, layout, dtype), and the comparison table.

Machines we benchmark on are shared and their bandwidth drifts by up to ~1.5x minute to minute, so
implementations are compared only within one run, interleaved
round-robin (every repeat runs each implementation once, in turn), and summarised by the median.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

GIB = 1024**3

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # the benchmarks run from a checkout without installing anyaccel
    sys.path.insert(0, str(REPO_ROOT))

#: Parameter dtypes the host-optimizer benchmarks accept, by their command-line label.
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

#: Columns of the host-optimizer comparison table (rows from :func:`run_case`).
TABLE_HEADERS: tuple[str, ...] = ("elements", "tensors", "params", "implementation", "state", "ms/step",
                                  "time vs anyaccel", "GB/s", "% of a+=b")

Factory = Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]


def backward_of(fn: Callable[[], Any], inputs: Sequence[Any]) -> Callable[[], None]:
    """Forward and backward of ``fn``, as inside a model: ``torch.autograd.grad`` of its outputs with a fixed
    random output gradient (made on the first, untimed call) into the ``inputs`` that require grad. No loss
    kernels are timed, and no ``.grad`` accumulates (which would time an extra add per input, and favour a
    backward that overwrites its saved inputs in place: Liger's swiglu leaves ``a.grad`` aliasing ``a``)."""
    leaves = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    grads: list[torch.Tensor] = []

    def run() -> None:
        out = fn()
        outs = [o for o in (out if isinstance(out, tuple) else (out,))
                if isinstance(o, torch.Tensor) and o.requires_grad]
        if not grads:
            grads.extend(torch.randn_like(o) for o in outs)
        torch.autograd.grad(outs, leaves, grad_outputs=grads)

    return run


def cuda_graph(body: Callable[[], Any], warmup: Callable[[], Any] | None = None) -> torch.cuda.CUDAGraph:
    """``body`` captured in a CUDA graph, after two runs of ``warmup`` (default: ``body``) on a side stream, as
    torch's CUDA-graph notes prescribe (lazy initialisation and first allocations happen outside the capture).

    Raises:
        RuntimeError: what torch raises when ``body`` cannot be captured (a synchronisation, a CPU tensor).
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            (warmup or body)()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return graph


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


def have(module: str) -> bool:
    """Whether ``module`` is importable (a peer such as ``flag_gems`` or ``liger_kernel``), without importing
    it."""
    return importlib.util.find_spec(module) is not None


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
        "| " + " | ".join(str(h).ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += ["| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
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


# ---- host-optimizer benchmarks ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Impl:
    """One implementation under test for one parameter dtype.

    Attributes:
        name: Row label; anyaccel's rows start with ``"anyaccel"`` and are the reference of the
            "time vs anyaccel" column for their state dtype.
        state: State dtype label (``"fp32"`` or the param dtype's label), which fixes the bytes per element.
        factory: Builds the optimizer over the given parameters.
    """

    name: str
    state: str
    factory: Factory


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a host-optimizer benchmark run covers (from :func:`parse_plan`).

    Attributes:
        sizes: Element counts, all parameters together.
        layouts: Tensor counts each size is split into.
        dtypes: Parameter dtype labels (keys of :data:`DTYPES`).
        repeats: Timed interleaved rounds per case.
        quick: A smoke run (small sizes, small ceiling working set).
    """

    sizes: list[int]
    layouts: list[int]
    dtypes: list[str]
    repeats: int
    quick: bool


def dtype_label(dtype: torch.dtype) -> str:
    """The :data:`DTYPES` label of ``dtype`` (``torch.bfloat16`` -> ``"bf16"``).

    Raises:
        KeyError: ``dtype`` is not one of :data:`DTYPES`.
    """
    return {v: k for k, v in DTYPES.items()}[dtype]


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``--sizes``, ``--dtypes``, ``--layouts``, ``--repeats`` and ``--quick`` to ``parser``."""
    parser.add_argument("--sizes", default="1M,10M,100M", help="comma-separated element counts (1M, 1e7, ...)")
    parser.add_argument("--dtypes", default="fp32,bf16", help=f"comma-separated param dtypes from {sorted(DTYPES)}")
    parser.add_argument("--layouts", default="1,200", help="comma-separated tensor counts each size is split into")
    parser.add_argument("--repeats", type=int, default=11, help="timed interleaved rounds (median reported)")
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats: a smoke run")


def parse_plan(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Plan:
    """The :class:`Plan` of arguments added by :func:`add_plan_arguments`.

    ``--quick`` means sizes 1M and 4M (``--sizes`` ignored) and at most 3 repeats.

    Raises:
        SystemExit: through ``parser.error`` for an unknown dtype label (the message lists the accepted).
        ValueError: a size is not an element count (from :func:`parse_count`).
    """
    if args.quick:
        sizes, repeats = [parse_count("1M"), parse_count("4M")], min(args.repeats, 3)
    else:
        sizes, repeats = [parse_count(s) for s in args.sizes.split(",")], args.repeats
    dtypes = [d.strip() for d in args.dtypes.split(",")]
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        parser.error(f"unknown dtype(s) {unknown}; accepted: {sorted(DTYPES)}")
    return Plan(sizes, [int(x) for x in args.layouts.split(",")], dtypes, repeats, args.quick)


def print_environment() -> None:
    """Prints torch's version, thread count and CPU capability (stdout: the benchmark's report)."""
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}")


def measure_ceiling(quick: bool) -> float:
    """Measures and prints the in-place ``a += b`` ceiling (GB/s), over 0.25 GiB when ``quick`` else 1.5 GiB."""
    working_set = int(0.25 * GIB) if quick else int(1.5 * GIB)
    ceiling = inplace_add_bandwidth(working_set)
    print(f"in-place a += b ceiling: {ceiling:.1f} GB/s ({working_set / GIB:.2f} GiB working set)")
    return ceiling


def split_sizes(total: int, pieces: int, generator: torch.Generator) -> list[int]:
    """Splits ``total`` elements into ``pieces`` tensors of random, uneven sizes (like a model's layers)."""
    if pieces <= 1:
        return [total]
    weights = torch.rand(pieces, generator=generator) + 0.05
    sizes = (weights / weights.sum() * total).long().tolist()
    sizes[-1] += total - sum(sizes)
    return sizes


def run_case(total: int, pieces: int, dtype_name: str, repeats: int, ceiling: float, impls: Sequence[Impl],
             bytes_per_element: Callable[[torch.dtype, str], int]) -> list[list[str]]:
    """Benchmarks every implementation on one (size, layout, dtype) and returns table rows.

    Every implementation steps the same parameter and gradient tensors (random normal; an optimizer step
    moves each element by about ``lr``, so values stay finite); only optimizer state is per implementation.

    Args:
        total: Elements in all parameters together.
        pieces: Number of tensors ``total`` is split into (uneven random sizes).
        dtype_name: Parameter dtype key of :data:`DTYPES`.
        repeats: Timed interleaved rounds.
        ceiling: The in-place ``a += b`` bandwidth ceiling in GB/s, for the percentage column.
        impls: The implementations, with at least one anyaccel row per state dtype present.
        bytes_per_element: ``(param dtype, state label) -> bytes`` one step must move per element.

    Returns:
        One row of strings per implementation, in the order of :data:`TABLE_HEADERS`.
    """
    dtype = DTYPES[dtype_name]
    gen = torch.Generator().manual_seed(total + pieces)
    sizes = split_sizes(total, pieces, gen)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in sizes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(dtype)
    optimizers = {f"{i.name} [{i.state} state]": (i, i.factory(params)) for i in impls}
    times = interleaved_times({key: opt.step for key, (_, opt) in optimizers.items()}, repeats=repeats, warmup=1)
    medians = {key: median(t) for key, t in times.items()}
    ours = {i.state: medians[key] for key, (i, _) in optimizers.items() if i.name.startswith("anyaccel")}
    rows = []
    for key, (impl, _) in optimizers.items():
        t = medians[key]
        gbs = bytes_per_element(dtype, impl.state) * total / t / 1e9
        rows.append([
            f"{total / 1e6:g}M", str(len(sizes)), dtype_name, impl.name, impl.state, f"{t * 1e3:.2f}",
            f"{t / ours[impl.state]:.2f}x", f"{gbs:.1f}", f"{100 * gbs / ceiling:.0f}%",
        ])
    del optimizers, params
    gc.collect()
    return rows


def run_table(plan: Plan, ceiling: float, implementations: Callable[[torch.dtype], Sequence[Impl]],
              bytes_per_element: Callable[[torch.dtype, str], int]) -> str:
    """Runs :func:`run_case` for every (size, layout, dtype) of ``plan`` and formats the table.

    Args:
        plan: What to run.
        ceiling: The bandwidth ceiling in GB/s (:func:`measure_ceiling`).
        implementations: Param dtype -> the implementations to compare (called once per case).
        bytes_per_element: As for :func:`run_case`.

    Returns:
        The Markdown table (:func:`format_table`).
    """
    rows: list[list[str]] = []
    for total in plan.sizes:
        for pieces in plan.layouts:
            for dtype_name in plan.dtypes:
                rows += run_case(total, pieces, dtype_name, plan.repeats, ceiling,
                                 implementations(DTYPES[dtype_name]), bytes_per_element)
    return format_table(TABLE_HEADERS, rows)


def llama_1b_config() -> Any:
    """The Llama 3.2 1B shape the model benchmarks train (16 layers, hidden 2048, intermediate 8192, 32 heads of
    which 8 key/value, vocab 128256, tied embeddings, rope theta 500000, positions up to 4096): a
    ``transformers.LlamaConfig``. Imports transformers."""
    import transformers

    return transformers.LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                                    num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                                    max_position_embeddings=4096, tie_word_embeddings=True, rope_theta=500000.0)
