"""Tuning experiment: the CUDA multi-tensor Adam kernel under several compile-time settings.

Builds the ``fused_adam`` op once per variant of the ``ANYACCEL_MTA_*`` macros
(``anyaccel/csrc/includes/cuda/multi_tensor_apply.cuh``) through the op-builder core (each variant's flags
are part of its cache key, so each gets its own namespace), in parallel processes, then times each on
fp32 1e9 x 1, bf16 (bf16 state) 1e9 x 1 and fp32 1e8 in 200 tensors, interleaved with torch's fused AdamW
kernel.
Run on the device machine::

    PYTHONUNBUFFERED=1 PYTHONPATH=. python benchmarks/gpu_optimizer_variants.py
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import statistics
import tempfile
import time

import torch

VARIANTS = {
    "default": [],
    "minblocks6": ["-DANYACCEL_MTA_MIN_BLOCKS=6"],
    "minblocks8": ["-DANYACCEL_MTA_MIN_BLOCKS=8"],
    "minblocks6_chunk64k": ["-DANYACCEL_MTA_MIN_BLOCKS=6", "-DANYACCEL_MTA_CHUNK=65536"],
    "minblocks6_unroll2": ["-DANYACCEL_MTA_MIN_BLOCKS=6", "-DANYACCEL_MTA_UNROLL=2"],
}


def _builder(flags: list[str]):
    """A FusedAdamBuilder whose nvcc flags carry ``flags``: another cache key, namespace and library."""
    from anyaccel.op_builder import FusedAdamBuilder

    class Variant(FusedAdamBuilder):
        def nvcc_args(self) -> list[str]:
            return super().nvcc_args() + flags

    return Variant()


def _build(name: str) -> str:
    return _builder(VARIANTS[name]).load().namespace


def main() -> int:
    os.environ.setdefault("ANYACCEL_CACHE_DIR", tempfile.mkdtemp())
    t0 = time.perf_counter()
    spawn = multiprocessing.get_context("spawn")  # each builder process starts clean (no inherited CUDA state)
    with concurrent.futures.ProcessPoolExecutor(len(VARIANTS), mp_context=spawn) as pool:
        list(pool.map(_build, VARIANTS))
    print(f"built {len(VARIANTS)} variants in parallel in {time.perf_counter() - t0:.1f} s", flush=True)
    ops = {name: _builder(flags).load() for name, flags in VARIANTS.items()}
    src = torch.empty(1 << 30, device="cuda").uniform_()
    dst = torch.empty_like(src)
    copy = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        copy.append(2 * src.numel() * 4 / (a.elapsed_time(b) * 1e-3) / 1e12)
    ceiling = statistics.median(copy)
    print(f"copy ceiling {ceiling:.2f} TB/s", flush=True)
    del src, dst
    cases = {"fp32 1e9x1": ([10**9], torch.float32, torch.float32, 28),
             "bf16/bf16 state 1e9x1": ([10**9], torch.bfloat16, torch.bfloat16, 14),
             "fp32 1e8/200": ([500_000] * 200, torch.float32, torch.float32, 28)}
    for case, (sizes, dtype, sdtype, bpe) in cases.items():
        ps = [torch.randn(n, device="cuda", dtype=dtype) for n in sizes]
        gs = [torch.randn(n, device="cuda", dtype=dtype) * 1e-2 for n in sizes]
        ms = [(torch.randn(n, device="cuda") * 1e-3).to(sdtype) for n in sizes]
        vs = [(torch.rand(n, device="cuda") * 1e-4).to(sdtype) for n in sizes]
        args = (ps, gs, ms, vs)
        fns = {name: (lambda op=op, a=args: op.adam_step(*a, [], 10, 1e-5, 0.9, 0.999, 1e-8, 0.01, True, True))
               for name, op in ops.items()}
        if dtype == sdtype:
            steps = [torch.tensor(10.0, device="cuda") for _ in sizes]
            fns["torch _fused_adamw_"] = lambda a=args, steps=steps: torch._fused_adamw_(
                *a, [], steps, lr=1e-5, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False,
                maximize=False)
        samples = {k: [] for k in fns}
        for fn in fns.values():
            fn()
        for _ in range(9):
            for k, fn in fns.items():
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(5):
                    fn()
                b.record()
                b.synchronize()
                samples[k].append(a.elapsed_time(b) / 5)
        numel = sum(sizes)
        for k, v in samples.items():
            ms_ = statistics.median(v)
            tbs = bpe * numel / ms_ / 1e9
            print(f"{case:<24}{k:<22}{ms_:8.3f} ms {tbs:6.2f} TB/s {100 * tbs / ceiling:5.1f}%  "
                  f"spread {min(v):.3f}-{max(v):.3f}")
        del ps, gs, ms, vs, fns
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
