"""Benchmark: anyaccel CPUAdam vs torch AdamW (for-loop, foreach, fused) and DeepSpeedCPUAdam.

Everything is measured in ONE run, interleaved round-robin, and summarised by the median, because the
machines are shared and their bandwidth drifts minute to minute. For every (size, layout, dtype) the table
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
import functools
import json
import logging
import os
import subprocess
import sys
import tempfile
import time

import torch
from _common import (
    REPO_ROOT,
    Impl,
    add_plan_arguments,
    dtype_label,
    measure_ceiling,
    parse_plan,
    print_environment,
    run_table,
)

logger = logging.getLogger("benchmarks.cpu_adam")

LR = 1e-3
WEIGHT_DECAY = 0.01


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

    native = dtype_label(param_dtype)
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
    """Runs the benchmark on ``argv`` (default ``sys.argv[1:]``) and returns the exit status, 0.

    Prints build/load times, the bandwidth ceiling and the comparison table. Side effects: builds the kernel
    in a temporary cache (subprocess), loads it into this process from the default cache, may build
    DeepSpeed's op, allocates up to ~1.5 GiB plus the benchmarked tensors.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_plan_arguments(parser)
    parser.add_argument("--no-deepspeed", action="store_true", help="leave DeepSpeedCPUAdam out")
    parser.add_argument("--no-build-timing", action="store_true", help="skip the cold build / warm load timing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    plan = parse_plan(parser, args)

    print_environment()
    if not args.no_build_timing:
        t = build_and_load_times()
        print(f"cpu_adam kernel ({t['isa']}): cold build+load {t['cold_s']:.2f} s, "
              f"warm load {t['warm_s'] * 1e3:.1f} ms "
              f"(fresh processes; import anyaccel.op_builder after torch {t['warm_import_s'] * 1e3:.0f} ms; "
              f"whole process cold {t['cold_wall_s']:.2f} s, warm {t['warm_wall_s']:.2f} s)")
    ceiling = measure_ceiling(plan.quick)

    use_ds = not args.no_deepspeed
    if use_ds and _deepspeed_cpu_adam() is not None:
        # Build/load DeepSpeed's op outside the timed region and report how long its first construction takes.
        start = time.perf_counter()
        _deepspeed_cpu_adam()([torch.nn.Parameter(torch.randn(4))])
        print(f"DeepSpeedCPUAdam first construction (build or load of its op): {time.perf_counter() - start:.2f} s")

    impls = functools.partial(implementations, use_deepspeed=use_ds)
    print(run_table(plan, ceiling, impls, bytes_per_element))
    return 0


if __name__ == "__main__":
    sys.exit(main())
