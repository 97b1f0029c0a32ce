"""Benchmark: CPU Adam at 1..N threads against torch's fused AdamW and DeepSpeedCPUAdam, with the host's
memory bandwidth measured by a STREAM-style probe (``benchmarks/native/stream_probe.cpp``) at each thread count.

ZeRO-Offload runs the optimizer step on hosts of 16-128 cores, where thread scaling and memory bandwidth
decide the step time. For each thread count (``torch.set_num_threads``; DeepSpeed's OpenMP kernel follows the
same setting) the probe reports copy, triad and an Adam-pattern kernel (4 arrays read, 3 written in place:
the bytes of an fp32 Adam step) in GB/s, and anyaccel's CPUAdam, torch's fused AdamW and DeepSpeedCPUAdam
are timed on the same parameters, interleaved,
median of ``--repeats``. The table's percentage is of the probe's Adam-pattern bandwidth at that thread
count; the ratio column is each row's time over anyaccel's with the same state dtype.

The probe is compiled with the host C++ compiler and OpenMP on first use (or pass ``--probe`` with a binary
built elsewhere: ``g++ -O3 -fopenmp benchmarks/native/stream_probe.cpp -o stream_probe``).

Usage (from the repository root)::

    python benchmarks/cpu_adam_scaling.py --threads 1,2,4,8,16 --sizes 100M --dtypes fp32,bf16
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from _common import REPO_ROOT, TABLE_HEADERS, format_table, parse_count, run_case
from cpu_adam import bytes_per_element, implementations

PROBE_SOURCE = Path(__file__).resolve().parent / "native" / "stream_probe.cpp"


def build_probe(cxx: str | None = None) -> Path:
    """Compiles the probe into a temporary directory and returns the binary's path.

    Raises:
        RuntimeError: no C++ compiler, or the compile failed (the message has the compiler's output).
    """
    compiler = cxx or os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no C++ compiler (set CXX, or pass --probe with a prebuilt stream_probe binary)")
    out = Path(tempfile.mkdtemp(prefix="anyaccel_probe_")) / "stream_probe"
    proc = subprocess.run([compiler, "-O3", "-fopenmp", "-march=native", str(PROBE_SOURCE), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling the probe failed:\n{proc.stderr[-2000:]}")
    return out


def run_probe(binary: Path, threads: int, elements: int, reps: int = 5) -> dict[str, float]:
    """Runs the probe with ``threads`` threads bound to cores; returns its JSON (GB/s figures)."""
    env = {**os.environ, "OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
    proc = subprocess.run([str(binary), str(elements), str(threads), str(reps)], capture_output=True, text=True,
                          env=env, timeout=600, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Runs the scaling benchmark; prints the probe table and the optimizer table; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,2,4,8,16", help="comma-separated thread counts (clipped to the CPUs)")
    parser.add_argument("--sizes", default="100M", help="comma-separated element counts")
    parser.add_argument("--dtypes", default="fp32,bf16", help="comma-separated param dtypes (fp32, bf16, fp16)")
    parser.add_argument("--repeats", type=int, default=7, help="timed interleaved rounds (median reported)")
    parser.add_argument("--probe-elements", default="200M", help="elements per probe array (4 arrays, fp32)")
    parser.add_argument("--probe", type=Path, help="a prebuilt stream_probe binary")
    parser.add_argument("--no-deepspeed", action="store_true", help="leave DeepSpeedCPUAdam out")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    counts = sorted({min(int(t), cpus) for t in args.threads.split(",")})
    sizes = [parse_count(s) for s in args.sizes.split(",")]
    dtypes = [d.strip() for d in args.dtypes.split(",")]
    probe = args.probe or build_probe()
    print(f"torch {torch.__version__}, {cpus} CPUs in the affinity mask, cpu capability "
          f"{torch.backends.cpu.get_cpu_capability()}; repository {REPO_ROOT}")
    impls = functools.partial(implementations, use_deepspeed=not args.no_deepspeed)
    probe_rows, rows, results = [], [], []
    for threads in counts:
        torch.set_num_threads(threads)
        bw = run_probe(probe, threads, parse_count(args.probe_elements))
        probe_rows.append([str(threads), f"{bw['copy_gbs']:.1f}", f"{bw['triad_gbs']:.1f}", f"{bw['adam_gbs']:.1f}"])
        for total in sizes:
            for dtype in dtypes:
                chosen = [i for i in impls(_dtype(dtype)) if "for-loop" not in i.name and "foreach" not in i.name]
                case = run_case(total, 1, dtype, args.repeats, bw["adam_gbs"], chosen, bytes_per_element)
                rows += [[str(threads), *r] for r in case]
                results.append({"threads": threads, "probe": bw, "rows": case})
        print(f"... {threads} thread(s) done", file=sys.stderr, flush=True)
    print("\nSTREAM-style probe (GB/s, best of 5):")
    print(format_table(["threads", "copy", "triad", "adam pattern (4R+3W)"], probe_rows))
    print("\nCPU Adam (% of the probe's adam-pattern bandwidth at the same thread count):")
    print(format_table(["threads", *TABLE_HEADERS[:-1], "% of probe"], rows))
    if args.json:
        args.json.write_text(json.dumps({"headers": TABLE_HEADERS, "results": results}, indent=1))
    return 0


def _dtype(label: str) -> torch.dtype:
    from _common import DTYPES

    return DTYPES[label]


if __name__ == "__main__":
    sys.exit(main())
