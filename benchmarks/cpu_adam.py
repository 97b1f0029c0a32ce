"""Benchmark: anyaccel CPUAdam vs torch AdamW (for-loop, foreach, fused) and DeepSpeedCPUAdam.

Everything is measured in ONE run, interleaved round-robin, and summarised by the median, because the
machines are shared and drift (../shared/reference/baselines.md). For every (size, layout, dtype) the table
gives ms/step, each implementation's time relative to anyaccel's with the same state dtype, achieved
bandwidth and the percentage of the in-place ``a += b`` bandwidth ceiling measured in this run with the same
thread count. Bytes per element an Adam step must move: fp32 28 (read p, g, m, v; write p, m, v); 16-bit
params with fp32 state 22; 16-bit params and state 14.

The kernel's cold build (fresh empty cache, in a subprocess) and warm load (fresh process, cache populated)
times are printed first.

Usage (from the repository root)::

    python benchmarks/cpu_adam.py --quick
    python benchmarks/cpu_adam.py --sizes 1M,10M,100M --dtypes fp32,bf16 --repeats 15
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # allow running from a checkout without installing
    sys.path.insert(0, str(REPO_ROOT))

from _common import GIB, format_table, inplace_add_bandwidth, interleaved_times, median, parse_count  # noqa: E402

logger = logging.getLogger("benchmarks.cpu_adam")

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
LR = 1e-3
WEIGHT_DECAY = 0.01

Factory = Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]


@dataclasses.dataclass(frozen=True)
class Impl:
    """One implementation under test for one parameter dtype.

    Attributes:
        name: Row label.
        state: State dtype label (``"fp32"`` or the param dtype), which fixes the bytes per element.
        factory: Builds the optimizer over the given parameters.
    """

    name: str
    state: str
    factory: Factory


def bytes_per_element(param_dtype: torch.dtype, state: str) -> int:
    """Bytes one Adam step moves per element: read p, g, m, v and write p, m, v."""
    p = torch.finfo(param_dtype).bits // 8
    s = 4 if state == "fp32" else p
    return 3 * p + 4 * s  # p read + write and g read: 3p; m and v read + write: 4s


def _deepspeed_cpu_adam() -> type | None:
    """DeepSpeedCPUAdam when deepspeed imports, else None (the reason is logged)."""
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
    except ImportError as exc:
        logger.warning("deepspeed not importable (%s): DeepSpeedCPUAdam left out", exc)
        return None
    return DeepSpeedCPUAdam


def implementations(param_dtype: torch.dtype, use_deepspeed: bool) -> list[Impl]:
    """The implementations to compare for ``param_dtype`` (first row of each state dtype is anyaccel)."""
    from anyaccel.ops import CPUAdam

    native = "fp32" if param_dtype == torch.float32 else {torch.bfloat16: "bf16", torch.float16: "fp16"}[param_dtype]
    kw = {"lr": LR, "weight_decay": WEIGHT_DECAY}
    impls = [Impl("anyaccel CPUAdam", "fp32", lambda ps: CPUAdam(ps, **kw))]
    if native != "fp32":
        impls.append(Impl("anyaccel CPUAdam", native, lambda ps: CPUAdam(ps, fp32_optimizer_states=False, **kw)))
    # torch keeps the state in the parameter dtype; it has no fp32-state path for 16-bit parameters.
    if native == "fp32":
        impls.append(Impl("torch AdamW for-loop", native, lambda ps: torch.optim.AdamW(ps, foreach=False, **kw)))
    impls.append(Impl("torch AdamW foreach", native, lambda ps: torch.optim.AdamW(ps, foreach=True, **kw)))
    impls.append(Impl("torch AdamW fused", native, lambda ps: torch.optim.AdamW(ps, fused=True, **kw)))
    ds = _deepspeed_cpu_adam() if use_deepspeed else None
    if ds is not None:
        impls.append(Impl("DeepSpeedCPUAdam", "fp32", lambda ps: ds(ps, **kw)))
        if native != "fp32":
            impls.append(Impl("DeepSpeedCPUAdam", native, lambda ps: ds(ps, fp32_optimizer_states=False, **kw)))
    return impls


def split_sizes(total: int, pieces: int, generator: torch.Generator) -> list[int]:
    """Splits ``total`` elements into ``pieces`` tensors of random, uneven sizes (like a model's layers)."""
    if pieces <= 1:
        return [total]
    weights = torch.rand(pieces, generator=generator) + 0.05
    sizes = (weights / weights.sum() * total).long().tolist()
    sizes[-1] += total - sum(sizes)
    return sizes


def run_case(
    total: int, pieces: int, dtype_name: str, repeats: int, ceiling: float, use_deepspeed: bool
) -> list[list[str]]:
    """Benchmarks every implementation on one (size, layout, dtype) and returns table rows.

    Args:
        total: Elements in all parameters together.
        pieces: Number of tensors ``total`` is split into (uneven random sizes).
        dtype_name: Parameter dtype key of :data:`DTYPES`.
        repeats: Timed interleaved rounds.
        ceiling: The in-place ``a += b`` bandwidth ceiling in GB/s, for the percentage column.
        use_deepspeed: Include DeepSpeedCPUAdam when it imports.

    Returns:
        One row of strings per implementation, in the table's column order.
    """
    dtype = DTYPES[dtype_name]
    gen = torch.Generator().manual_seed(total + pieces)
    sizes = split_sizes(total, pieces, gen)
    # Every implementation steps the same parameter/gradient tensors (values stay finite: Adam steps are
    # bounded by lr), so only optimizer state is duplicated per implementation.
    params = [torch.nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in sizes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(dtype)
    impls = implementations(dtype, use_deepspeed)
    optimizers = {f"{i.name} [{i.state} state]": (i, i.factory(params)) for i in impls}
    times = interleaved_times({key: opt.step for key, (_, opt) in optimizers.items()}, repeats=repeats, warmup=1)
    medians = {key: median(t) for key, t in times.items()}
    ours = {i.state: medians[key] for key, (i, _) in optimizers.items() if i.name.startswith("anyaccel")}
    rows = []
    for key, (impl, _) in optimizers.items():
        t = medians[key]
        nbytes = bytes_per_element(dtype, impl.state) * total
        gbs = nbytes / t / 1e9
        rows.append([
            f"{total / 1e6:g}M", str(len(sizes)), dtype_name, impl.name, impl.state, f"{t * 1e3:.2f}",
            f"{t / ours[impl.state]:.2f}x", f"{gbs:.1f}", f"{100 * gbs / ceiling:.0f}%",
        ])
    del optimizers, params
    gc.collect()
    return rows


_CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
import torch
start = time.perf_counter()
from anyaccel.op_builder import CPUAdamBuilder
imported = time.perf_counter()
module = CPUAdamBuilder().load()
done = time.perf_counter()
print(json.dumps({{"import_s": imported - start, "load_s": done - imported, "isa": module.isa}}))
"""


def build_and_load_times() -> dict[str, float | str]:
    """Cold build (empty cache) and warm load (populated cache) of the kernel, each in a fresh process.

    Returns:
        ``cold_s``/``warm_s``: seconds of ``CPUAdamBuilder().load()`` inside the child (torch and
        ``anyaccel.op_builder`` already imported); ``cold_import_s``/``warm_import_s``: importing
        ``anyaccel.op_builder`` after torch; ``cold_wall_s``/``warm_wall_s``: the child's whole wall time
        (including ``import torch``); ``isa``.
    """
    out: dict[str, float | str] = {}
    with tempfile.TemporaryDirectory(prefix="anyaccel_bench_cache_") as cache:
        env = {**os.environ, "ANYACCEL_CACHE_DIR": cache}
        for label in ("cold", "warm"):
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(REPO_ROOT))], env=env,
                                  capture_output=True, text=True, check=True)
            out[f"{label}_wall_s"] = time.perf_counter() - start
            answer = json.loads(proc.stdout.strip().splitlines()[-1])
            out[f"{label}_s"] = answer["load_s"]
            out[f"{label}_import_s"] = answer["import_s"]
            out["isa"] = answer["isa"]
    return out


def main(argv: list[str] | None = None) -> int:
    """Parses arguments, prints build/load times, the bandwidth ceiling and the comparison table.

    Args:
        argv: Command-line arguments (default: ``sys.argv[1:]``).

    Returns:
        The process exit status (0).

    Side effects:
        Builds the kernel in a temporary cache (subprocess), loads it into this process from the default
        cache, may build DeepSpeed's op, allocates up to ~1.5 GiB plus the benchmarked tensors.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1M,10M,100M", help="comma-separated element counts (1M, 1e7, ...)")
    parser.add_argument("--dtypes", default="fp32,bf16", help=f"comma-separated param dtypes from {sorted(DTYPES)}")
    parser.add_argument("--layouts", default="1,200", help="comma-separated tensor counts each size is split into")
    parser.add_argument("--repeats", type=int, default=11, help="timed interleaved rounds (median reported)")
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats: a smoke run")
    parser.add_argument("--no-deepspeed", action="store_true", help="leave DeepSpeedCPUAdam out")
    parser.add_argument("--no-build-timing", action="store_true", help="skip the cold build / warm load timing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    if args.quick:
        sizes, repeats = [parse_count("1M"), parse_count("4M")], min(args.repeats, 3)
    else:
        sizes, repeats = [parse_count(s) for s in args.sizes.split(",")], args.repeats
    dtypes = [d.strip() for d in args.dtypes.split(",")]
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        parser.error(f"unknown dtype(s) {unknown}; accepted: {sorted(DTYPES)}")
    layouts = [int(x) for x in args.layouts.split(",")]

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}")
    if not args.no_build_timing:
        t = build_and_load_times()
        print(f"cpu_adam kernel ({t['isa']}): cold build+load {t['cold_s']:.2f} s, "
              f"warm load {t['warm_s'] * 1e3:.1f} ms "
              f"(fresh processes; import anyaccel.op_builder after torch {t['warm_import_s'] * 1e3:.0f} ms; "
              f"whole process cold {t['cold_wall_s']:.2f} s, warm {t['warm_wall_s']:.2f} s)")
    working_set = int(0.25 * GIB) if args.quick else int(1.5 * GIB)
    ceiling = inplace_add_bandwidth(working_set)
    print(f"in-place a += b ceiling: {ceiling:.1f} GB/s ({working_set / GIB:.2f} GiB working set)")

    use_ds = not args.no_deepspeed
    if use_ds and _deepspeed_cpu_adam() is not None:
        # Build/load DeepSpeed's op outside the timed region and report how long its first construction takes.
        start = time.perf_counter()
        _deepspeed_cpu_adam()([torch.nn.Parameter(torch.randn(4))])
        print(f"DeepSpeedCPUAdam first construction (build or load of its op): {time.perf_counter() - start:.2f} s")

    headers = ["elements", "tensors", "params", "implementation", "state", "ms/step", "time vs anyaccel",
               "GB/s", "% of a+=b"]
    rows: list[list[str]] = []
    for total in sizes:
        for pieces in layouts:
            for dtype_name in dtypes:
                rows += run_case(total, pieces, dtype_name, repeats, ceiling, use_ds)
    print(format_table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
