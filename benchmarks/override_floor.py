"""Benchmark: the aten-override mode's floor, the user's eager call with the mode on against the mode off.

The mode promises that switching it on never makes a benchmarked shape slower than 0.95x aten (the per-shape
policy of :mod:`anyaccel.ops.override.policy`). This checks it the way a user sees it: first
``anyaccel.ops.tune`` measures the policy on the benchmark's shapes in this run, then for each public call
(``F.rms_norm``, ``F.layer_norm``, ``torch.softmax``, ``torch.log_softmax``; forward, and forward + backward)
and each shape (tokens x hidden in {1024, 8192, 32768} x {2048, 4096, 8192}, plus 64x64 and 256x1024; bf16,
inputs requiring grad), loops of back-to-back calls are timed with the mode off and on, taking turns loop by
loop (in an order reversed every round: ``anyaccel.ops.tune.round_robin_times``, the tuner's own timer) for
``--rounds`` rounds, each loop device-synchronised once. Printed per row: the median loop time of each
(microseconds per call), the median of the per-round ratios
``off / on`` and their range, and for comparison the median ratio with ``policy="always"`` (anyaccel's kernel
for every call, what the mode would do without the policy). A ratio below 1 is the mode costing time; the
claim holds where the median ratio is at least 0.95::

    python benchmarks/override_floor.py [--rounds 15] [--ops rms_norm softmax] [--no-tune]

Needs a CUDA GPU. Writes the tuned policy table to the anyaccel cache (as ``anyaccel tune`` does).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import sys
import time
from collections.abc import Callable

import _common  # noqa: F401  (puts the repository on sys.path)
import torch
import torch.nn.functional as F

import anyaccel.ops
from anyaccel.ops import tune

DTYPE = torch.bfloat16
SHAPES = [(t, h) for t in (1024, 8192, 32768) for h in (2048, 4096, 8192)] + [(64, 64), (256, 1024)]

#: Public call -> (make inputs from (rows, cols), the call).
CALLS: dict[str, tuple[Callable[[int, int], tuple[torch.Tensor, ...]], Callable[..., torch.Tensor]]] = {
    "rms_norm": (lambda t, h: (_r(t, h), _r(h)), lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6)),
    "layer_norm": (lambda t, h: (_r(t, h), _r(h), _r(h)),
                   lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)),
    "softmax": (lambda t, h: (_r(t, h),), lambda x: torch.softmax(x, -1)),
    "log_softmax": (lambda t, h: (_r(t, h),), lambda x: torch.log_softmax(x, -1)),
}


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=DTYPE, requires_grad=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="round-robin rounds (default 15)")
    parser.add_argument("--ops", nargs="*", default=list(CALLS), choices=list(CALLS))
    parser.add_argument("--no-tune", action="store_true", help="use the policy table already in the cache")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    if not args.no_tune:
        t0 = time.perf_counter()
        tune.tune(None, SHAPES, ["bfloat16"], reps=10, accelerator=anyaccel.get_accelerator())
        print(f"(policy tuned on {len(SHAPES)} shapes in {time.perf_counter() - t0:.0f} s)")
    replaced = anyaccel.ops.enable()
    anyaccel.ops.disable()
    print(f"the tuned mode replaces: {', '.join(replaced) or 'nothing'}")
    print("op | pass | shape | off us/call | on us/call | off/on median | range | off/always median")
    worst = float("inf")
    for name in args.ops:
        make, fn = CALLS[name]
        for backward in (False, True):
            for t, h in SHAPES:
                inputs = make(t, h)
                # enough calls per loop that a loop takes ~2 ms or more
                calls = 200 if t * h < 1 << 22 else 8

                def call(fn: Callable[..., torch.Tensor] = fn, inputs: tuple[torch.Tensor, ...] = inputs,
                         backward: bool = backward) -> None:
                    out = fn(*inputs)
                    if backward:
                        out.float().sum().backward()

                # mode off, on (tuned), on with policy="always": tune's round-robin timer
                off, on, always_t = tune.round_robin_times(
                    (contextlib.nullcontext, functools.partial(anyaccel.ops.use_ops, policy="tuned"),
                     functools.partial(anyaccel.ops.use_ops, policy="always")),
                    call, torch.cuda.synchronize, args.rounds, batch=calls, warmup=2)
                times = {"off": off, "on": on, "always": always_t}
                ratios = [a / b for a, b in zip(times["off"], times["on"], strict=True)]
                always = statistics.median(a / b for a, b in zip(times["off"], times["always"], strict=True))
                med = statistics.median(ratios)
                worst = min(worst, med)
                print(f"{name} | {'fwd+bwd' if backward else 'fwd'} | {t}x{h} | "
                      f"{1e6 * statistics.median(times['off']):.1f} | "
                      f"{1e6 * statistics.median(times['on']):.1f} | {med:.2f} | "
                      f"{min(ratios):.2f}-{max(ratios):.2f} | {always:.2f}", flush=True)
                for x in inputs:
                    x.grad = None
                del inputs
                torch.cuda.empty_cache()
    print(f"lowest median ratio: {worst:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
