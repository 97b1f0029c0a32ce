"""Tuning experiment: the CUDA multi-tensor Adam kernel under several compile-time settings.

Builds the ``fused_adam`` op once per variant of the ``ANYACCEL_MTA_*`` macros
(``anyaccel/csrc/includes/cuda/multi_tensor_apply.cuh``), in parallel processes, then times each on
fp32 1e9 x 1, bf16 1e9 x 1 and fp32 1e8 in 200 tensors, interleaved with torch's fused AdamW kernel.
Run on the device machine::

    PYTHONUNBUFFERED=1 PYTHONPATH=. python benchmarks/gpu_optimizer_variants.py
"""

from __future__ import annotations

import concurrent.futures
import os
import statistics
import tempfile

import torch

VARIANTS = {
    "default": [],
    "nostream": ["-DANYACCEL_MTA_STREAMING=0"],
    "vec4": ["-DANYACCEL_MTA_VEC=4", "-DANYACCEL_MTA_CHUNK=16384"],
    "unroll2": ["-DANYACCEL_MTA_UNROLL=2"],
    "vec4_unroll2": ["-DANYACCEL_MTA_VEC=4", "-DANYACCEL_MTA_UNROLL=2"],
    "t512_chunk64k": ["-DANYACCEL_MTA_THREADS=512", "-DANYACCEL_MTA_CHUNK=65536"],
    "chunk4k_unroll2": ["-DANYACCEL_MTA_CHUNK=4096", "-DANYACCEL_MTA_UNROLL=2"],
}


def _builder(flags: list[str]):
    from anyaccel.op_builder.fused_adam import FusedAdamBuilder

    class Variant(FusedAdamBuilder):
        def nvcc_args(self) -> list[str]:
            return super().nvcc_args() + flags

    return Variant()


def _build(name: str) -> str:
    from anyaccel.op_builder.cuda import scratch_load

    return scratch_load(_builder(VARIANTS[name])).namespace


def main() -> int:
    os.environ.setdefault("ANYACCEL_CACHE_DIR", tempfile.mkdtemp())
    with concurrent.futures.ProcessPoolExecutor(len(VARIANTS)) as pool:
        list(pool.map(_build, VARIANTS))
    from anyaccel.op_builder.cuda import scratch_load

    ops = {name: scratch_load(_builder(flags)) for name, flags in VARIANTS.items()}
    cases = {"fp32 1e9x1": ([10**9], torch.float32, 28), "bf16 1e9x1": ([10**9], torch.bfloat16, 22),
             "fp32 1e8/200": ([500_000] * 200, torch.float32, 28), "bf16 1e8/200": ([500_000] * 200, torch.bfloat16, 22)}
    for case, (sizes, dtype, bpe) in cases.items():
        ps = [torch.randn(n, device="cuda", dtype=dtype) for n in sizes]
        gs = [torch.randn(n, device="cuda", dtype=dtype) * 1e-2 for n in sizes]
        ms = [torch.randn(n, device="cuda") * 1e-3 for n in sizes]
        vs = [torch.rand(n, device="cuda") * 1e-4 for n in sizes]
        fns = {name: (lambda op=op: op.adam_step(ps, gs, ms, vs, [], 10, 1e-5, 0.9, 0.999, 1e-8, 0.01, True, True))
               for name, op in ops.items()}
        if dtype == torch.float32:
            steps = [torch.tensor(10.0, device="cuda") for _ in sizes]
            fns["torch _fused_adamw_"] = lambda: torch._fused_adamw_(ps, gs, ms, vs, [], steps, lr=1e-5, beta1=0.9,
                                                                    beta2=0.999, weight_decay=0.01, eps=1e-8,
                                                                    amsgrad=False, maximize=False)
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
            print(f"{case:<14}{k:<22}{ms_:8.3f} ms {bpe * numel / ms_ / 1e9:6.2f} TB/s  spread {min(v):.3f}-{max(v):.3f}")
        del ps, gs, ms, vs, fns
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
