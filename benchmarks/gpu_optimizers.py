"""Benchmark: anyaccel FusedAdam (CUDA C++ and Triton) against torch.optim.AdamW(fused=True) on one GPU.

Run on the device machine from the repository root::

    PYTHONUNBUFFERED=1 PYTHONPATH=. python benchmarks/gpu_optimizers.py [--quick] [--json out.json]

Per shape (1e9 x 1, 1e9 in 400 tensors, 1e8 in 200 tensors) and dtype (fp32; bf16 params+grads with fp32
state) it prints ms/step, TB/s at the bytes each mode must move (fp32: 28 B/element: read p, g, m, v,
write p, m, v; bf16 params with fp32 state: 22 B/element), % of the device-to-device copy ceiling measured
in the same run, and the ratio torch-fused-time / our-time (> 1: ours is faster). torch's fused AdamW keeps
bf16 state for bf16 params (14 B/element), so its bf16 rows move fewer bytes than ours.

Timing: CUDA events around K consecutive steps (so the host runs ahead as in training), median of R
windows, contenders interleaved window by window (A/B/C/A/B/C...) because the machine's bandwidth drifts.
"op" times call the op on prepared lists; "optim" times call ``optimizer.step()`` (Python bucketing
included). Also prints the cold build time of the CUDA op.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import statistics
import tempfile
import time
from typing import Callable

import torch

logger = logging.getLogger("gpu_optimizers")

SHAPES = {"1e9 x 1": [10**9], "1e9 in 400": [2_500_000] * 400, "1e8 in 200": [500_000] * 200}
BYTES = {"fp32": 28, "bf16": 22}
TORCH_BYTES = {"fp32": 28, "bf16": 14}


def time_windows(fns: dict[str, Callable[[], None]], steps: int, windows: int) -> dict[str, float]:
    """Median ms per call of each function, interleaved window by window."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(windows):
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(steps):
                fn()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) / steps)
    return {k: statistics.median(v) for k, v in samples.items()}


def copy_ceiling(nbytes: int = 4 << 30) -> float:
    """Device-to-device copy bandwidth in TB/s (bytes read + written), median of 20."""
    src = torch.empty(nbytes // 4, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = time_windows({"copy": lambda: dst.copy_(src)}, 5, 20)["copy"]
    del src, dst
    return 2 * nbytes / (ms * 1e-3) / 1e12


def make_params(sizes: list[int], dtype: torch.dtype) -> list[torch.nn.Parameter]:
    params = []
    for n in sizes:
        p = torch.nn.Parameter(torch.randn(n, device="cuda", dtype=dtype))
        p.grad = torch.randn(n, device="cuda", dtype=dtype) * 1e-2
        params.append(p)
    return params


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer windows")
    parser.add_argument("--json", default=None, help="write all numbers to this file")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset of the shapes")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from anyaccel.op_builder import implementations
    from anyaccel.ops.fused_adam import FusedAdam

    impls = ["cuda"] + (["triton"] if importlib.util.find_spec("triton") else [])
    os.environ.setdefault("ANYACCEL_CACHE_DIR", tempfile.mkdtemp(prefix="anyaccel_bench_"))
    t0 = time.perf_counter()
    implementations.load("fused_adam", "cuda", "cuda")
    build_s = time.perf_counter() - t0
    print(f"cold CUDA build + load of fused_adam: {build_s:.1f} s", flush=True)
    torch.cuda.synchronize()
    ceiling = copy_ceiling()
    print(f"copy ceiling: {ceiling:.2f} TB/s  ({torch.cuda.get_device_name()})", flush=True)
    steps, windows = (3, 5) if args.quick else (5, 11)
    rows = []
    for shape in args.shapes.split(","):
        sizes = SHAPES[shape]
        numel = sum(sizes)
        for mode, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            ref = make_params(sizes, dtype)
            ours = make_params(sizes, dtype)
            topt = torch.optim.AdamW(ref, lr=1e-4, weight_decay=0.01, fused=True)
            fns: dict[str, Callable[[], None]] = {"torch fused": topt.step}
            opts = {}
            for impl in impls:
                opts[impl] = FusedAdam(ours, lr=1e-4, weight_decay=0.01, impl=impl)
                fns[f"{impl} optim"] = opts[impl].step
            for fn in fns.values():  # warm up, create state, compile Triton
                fn()
            # op-level: the same lists every call (the state the optimizers created)
            st = opts[impls[0]].state
            plist = [p.data for p in ours]
            glist = [p.grad for p in ours]
            mlist = [st[p]["exp_avg"] for p in ours]
            vlist = [st[p]["exp_avg_sq"] for p in ours]
            for impl in impls:
                op = implementations.load("fused_adam", "cuda", impl)
                fns[f"{impl} op"] = (lambda op=op: op.adam_step(plist, glist, mlist, vlist, [], 10, 1e-4, 0.9, 0.999,
                                                                 1e-8, 0.01, True, True))
                fns[f"{impl} op"]()
            torch.cuda.synchronize()
            times = time_windows(fns, steps, windows)
            for name, ms in times.items():
                nbytes = (TORCH_BYTES if name == "torch fused" else BYTES)[mode] * numel
                tbs = nbytes / (ms * 1e-3) / 1e12
                rows.append(dict(shape=shape, mode=mode, contender=name, ms=ms, tbs=tbs, pct=100 * tbs / ceiling,
                                 vs_torch=times["torch fused"] / ms))
            del ref, ours, topt, opts, fns, plist, glist, mlist, vlist, st
            torch.cuda.empty_cache()
            print(f"done {shape} {mode}", flush=True)
    print(f"\ncopy ceiling {ceiling:.2f} TB/s; bytes/element: fp32 28, bf16 (fp32 state) 22, torch bf16 14")
    print(f"{'shape':<12}{'dtype':<6}{'contender':<15}{'ms/step':>9}{'TB/s':>7}{'% copy':>8}{'torch/ours':>11}")
    for r in rows:
        print(f"{r['shape']:<12}{r['mode']:<6}{r['contender']:<15}{r['ms']:>9.3f}{r['tbs']:>7.2f}{r['pct']:>7.1f}%"
              f"{r['vs_torch']:>11.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(ceiling_tbs=ceiling, build_s=build_s, rows=rows), fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
