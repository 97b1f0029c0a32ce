"""Benchmark: anyaccel FusedAdam / FusedLamb (CUDA C++ and Triton) against torch.optim.AdamW(fused=True)
(and DeepSpeed's FusedAdam / FusedLamb when ``deepspeed`` imports) on one GPU.

Run on the device machine from the repository root::

    PYTHONUNBUFFERED=1 PYTHONPATH=. python benchmarks/gpu_optimizers.py [--family adam|lamb] [--quick]

Per shape (1e9 x 1, 1e9 in 400 tensors, 1e8 in 200 tensors, 1e7 in 1000 tensors: the small-tensor regime
where the host limits the step) and mode it prints ms/step, TB/s at the bytes
the mode must move, % of the device-to-device copy ceiling measured in the same run, and the ratio
torch-fused-time / our-time (> 1: ours is faster). Modes, like with like:

* ``fp32``: fp32 params, grads and state; 28 B/element (read p, g, m, v; write p, m, v) for both.
* ``bf16``: bf16 params and grads with state in bf16 (ours: ``fp32_optimizer_states=False``), as torch's
  fused AdamW keeps it: 14 B/element for both.
* ``bf16+fp32state``: ours with fp32 moments (the default, more accurate mode): 22 B/element; the torch
  row of this mode is torch's bf16 (14 B/element) run again, so the ratio compares times, not modes.

Timing: CUDA events around K consecutive steps, recorded after one step is already queued (so the host
runs ahead as in training and a window measures the steady state), median of R windows, contenders
interleaved window by window (A/B/C/A/B/C...) because the machine's bandwidth drifts.
"op" times call the op on prepared lists; "optim" times call ``optimizer.step()`` (Python bucketing
included); ``host us`` is the host time per call (when it exceeds the GPU time, the host limits the step).
"cuda graph" replays one captured ``FusedAdam(capturable=True).step()`` (the host cost of a step gone).
LAMB (``--family lamb``): no torch counterpart; bytes are what our kernels move (fp32: 28 + 12 for the
apply pass, which re-reads p, m and v); the ceiling percentage is of those bytes.
Also prints the build (or prebuilt load) time of the CUDA op.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import torch
from _common import cuda_graph  # puts the repository on sys.path (benchmarks run from a checkout)

logger = logging.getLogger("gpu_optimizers")

SHAPES = {"1e9 x 1": [10**9], "1e9 in 400": [2_500_000] * 400, "1e8 in 200": [500_000] * 200,
          "1e7 in 1000": [10_000] * 1000}
#: Bytes per element LAMB moves beyond Adam's: pass 3 re-reads p, m, v and writes p (csrc/lamb/fused_lamb_cuda.cu).
LAMB_EXTRA_BYTES = {4: 12, 2: 6}
#: mode -> (param dtype, our fp32_optimizer_states, our bytes/element, torch's bytes/element)
MODES = {
    "fp32": (torch.float32, True, 28, 28),
    "bf16": (torch.bfloat16, False, 14, 14),
    "bf16+fp32state": (torch.bfloat16, True, 22, 14),
}


def time_windows(fns: dict[str, Callable[[], None]], steps: int, windows: int,
                 host: dict[str, float] | None = None) -> dict[str, float]:
    """Median ms per call of each function, interleaved window by window; median host us per call into ``host``."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    host_samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(windows):
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            fn()  # one step queued before the start event: the window sees the steady state, not the first
            start.record()  # step's host time on an idle GPU
            t0 = time.perf_counter()
            for _ in range(steps):
                fn()
            host_samples[name].append((time.perf_counter() - t0) * 1e6 / steps)
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) / steps)
    if host is not None:
        host.update({k: statistics.median(v) for k, v in host_samples.items()})
    return {k: statistics.median(v) for k, v in samples.items()}


def copy_ceiling(nbytes: int = 4 << 30) -> float:
    """Device-to-device copy bandwidth in TB/s (bytes read + written), median of 20."""
    src = torch.empty(nbytes // 4, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = time_windows({"copy": functools.partial(dst.copy_, src)}, 5, 20)["copy"]
    return 2 * nbytes / (ms * 1e-3) / 1e12


def make_params(sizes: list[int], dtype: torch.dtype) -> list[torch.nn.Parameter]:
    params = []
    for n in sizes:
        p = torch.nn.Parameter(torch.randn(n, device="cuda", dtype=dtype))
        p.grad = torch.randn(n, device="cuda", dtype=dtype) * 1e-2
        params.append(p)
    return params


def _deepspeed(family: str) -> type | None:
    """DeepSpeed's FusedAdam / FusedLamb when deepspeed imports (its op builds JIT), else None."""
    try:
        if family == "adam":
            from deepspeed.ops.adam import FusedAdam as DSFused
        else:
            from deepspeed.ops.lamb import FusedLamb as DSFused
    except Exception as exc:  # noqa: BLE001 - any import failure leaves the row out, with the reason
        logger.info("DeepSpeed's fused %s left out: %s", family, exc)
        return None
    return DSFused


def _graph_step(opt: torch.optim.Optimizer) -> Callable[[], None]:
    """One captured ``opt.step()`` (capturable), returned as a replay function."""
    return cuda_graph(opt.step).replay


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="adam", choices=("adam", "lamb"), help="optimizer family")
    parser.add_argument("--quick", action="store_true", help="fewer windows")
    parser.add_argument("--json", default=None, help="write all numbers to this file")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset of the shapes")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of the modes")
    parser.add_argument("--no-deepspeed", action="store_true", help="leave DeepSpeed's optimizer out")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from anyaccel.ops import dispatch as implementations
    from anyaccel.ops.adam import FusedAdam
    from anyaccel.ops.lamb import FusedLamb

    family = args.family
    ours_cls = FusedAdam if family == "adam" else FusedLamb
    ds_cls = None if args.no_deepspeed else _deepspeed(family)
    impls = ["cuda"] + (["triton"] if importlib.util.find_spec("triton") else [])
    os.environ.setdefault("ANYACCEL_CACHE_DIR", tempfile.mkdtemp(prefix="anyaccel_bench_"))
    t0 = time.perf_counter()
    module = implementations.load(family, "cuda", "cuda")
    build_s = time.perf_counter() - t0
    print(f"build or load of the CUDA {family} op: {build_s:.1f} s (source: {getattr(module, 'source', '?')})",
          flush=True)
    torch.cuda.synchronize()
    ceiling = copy_ceiling()
    print(f"copy ceiling: {ceiling:.2f} TB/s  ({torch.cuda.get_device_name()})", flush=True)
    steps, windows = (3, 5) if args.quick else (5, 11)
    rows = []
    for shape in args.shapes.split(","):
        sizes = SHAPES[shape]
        numel = sum(sizes)
        for mode in args.modes.split(","):
            dtype, fp32_states, our_bpe, torch_bpe = MODES[mode]
            if family == "lamb":
                our_bpe += LAMB_EXTRA_BYTES[4 if fp32_states or dtype == torch.float32 else 2]
            ours = make_params(sizes, dtype)
            fns: dict[str, Callable[[], None]] = {}
            keep: list[object] = []
            if family == "adam":
                ref = make_params(sizes, dtype)
                topt = torch.optim.AdamW(ref, lr=1e-4, weight_decay=0.01, fused=True)
                fns["torch fused"] = topt.step
                keep += [ref, topt]
            if ds_cls is not None:
                theirs = make_params(sizes, dtype)
                dsopt = ds_cls(theirs, lr=1e-4, weight_decay=0.01)
                fns["deepspeed"] = dsopt.step
                keep += [theirs, dsopt]
            opts = {}
            for impl in impls:
                opts[impl] = ours_cls(ours, lr=1e-4, weight_decay=0.01, impl=impl, fp32_optimizer_states=fp32_states)
                fns[f"{impl} optim"] = opts[impl].step
            if family == "adam" and shape == "1e7 in 1000":
                graphed = make_params(sizes, dtype)
                gopt = FusedAdam(graphed, lr=torch.tensor(1e-4, device="cuda"), weight_decay=0.01, impl="cuda",
                                 fp32_optimizer_states=fp32_states, capturable=True, set_grad_none=False)
                fns["cuda graph"] = _graph_step(gopt)
                keep += [graphed, gopt]
            for fn in fns.values():  # warm up, create state, compile Triton
                fn()
            if family == "adam":  # op-level: the same lists every call (the state the optimizers created)
                st = opts[impls[0]].state
                lists = ([p.data for p in ours], [p.grad for p in ours], [st[p]["exp_avg"] for p in ours],
                         [st[p]["exp_avg_sq"] for p in ours])
                for impl in impls:
                    op = implementations.load("adam", "cuda", impl)
                    fns[f"{impl} op"] = functools.partial(op.adam_step, *lists, [], 10, 1e-4, 0.9, 0.999, 1e-8,
                                                          0.01, True, True)
                    fns[f"{impl} op"]()
            torch.cuda.synchronize()
            host: dict[str, float] = {}
            times = time_windows(fns, steps, windows, host)
            base = times.get("torch fused", times.get("deepspeed", times["cuda optim"]))
            for name, ms in times.items():
                bpe = torch_bpe if name in ("torch fused", "deepspeed") and family == "adam" else our_bpe
                tbs = bpe * numel / (ms * 1e-3) / 1e12
                rows.append(dict(family=family, shape=shape, mode=mode, contender=name, ms=ms, tbs=tbs,
                                 pct=100 * tbs / ceiling, vs_base=base / ms, host_us=host[name], bytes_per_element=bpe))
            del ours, opts, fns, keep
            torch.cuda.empty_cache()
            print(f"done {shape} {mode}", flush=True)
    base_name = "torch fused" if family == "adam" else ("deepspeed" if ds_cls is not None else "cuda optim")
    print(f"\n{family}: copy ceiling {ceiling:.2f} TB/s; ratio column = {base_name} ms / row ms (> 1: faster)")
    print(f"{'shape':<12}{'mode':<16}{'contender':<15}{'B/el':>5}{'ms/step':>9}{'TB/s':>7}{'% copy':>8}"
          f"{'ratio':>8}{'host us':>9}")
    for r in rows:
        print(f"{r['shape']:<12}{r['mode']:<16}{r['contender']:<15}{r['bytes_per_element']:>5}{r['ms']:>9.3f}"
              f"{r['tbs']:>7.2f}{r['pct']:>7.1f}%{r['vs_base']:>8.2f}{r['host_us']:>9.0f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(ceiling_tbs=ceiling, build_s=build_s, rows=rows), fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
