"""Benchmark: anyaccel CPULion vs Lion written with torch foreach ops (and a per-tensor for-loop).

torch has no Lion optimizer, so the reference is what a user writes without a kernel: Lion (Chen et al.
2023, Algorithm 2) as ``torch._foreach_*`` calls over a parameter group, state in the parameter dtype.
Everything is measured in ONE run, interleaved round-robin, and summarised by the median, because the
machines are shared and drift (../shared/reference/baselines.md). For every (size, layout, dtype) the table
gives ms/step, each implementation's time relative to anyaccel's with the same state dtype, achieved
bandwidth and the percentage of the in-place ``a += b`` bandwidth ceiling measured in this run with the same
thread count. Bytes per element a Lion step must move: read p, g, m and write p, m, i.e. fp32 20; 16-bit
params with fp32 state 14; 16-bit params and state 10 (the foreach version moves more: it materialises c).

Usage (from the repository root)::

    python benchmarks/cpu_lion.py --quick
    python benchmarks/cpu_lion.py --sizes 1M,10M,100M --dtypes fp32,bf16 --repeats 15
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # allow running from a checkout without installing
    sys.path.insert(0, str(REPO_ROOT))

from _common import GIB, format_table, inplace_add_bandwidth, interleaved_times, median, parse_count  # noqa: E402

logger = logging.getLogger("benchmarks.cpu_lion")

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
LR = 1e-4
BETAS = (0.9, 0.99)
WEIGHT_DECAY = 0.01

Factory = Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]


class TorchLion(torch.optim.Optimizer):
    """Lion in plain torch ops (the baseline): foreach over the group, or a per-tensor loop.

    Per element: ``p *= 1 - lr*wd; p -= lr * sign(beta1*m + (1-beta1)*g); m = beta2*m + (1-beta2)*g``,
    in the tensors' dtype (state in the parameter dtype).

    Args:
        params: CPU parameters (any float dtype).
        lr, betas, weight_decay: Lion's hyper-parameters.
        foreach: True for ``torch._foreach_*`` over all tensors, False for one tensor at a time.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, betas: tuple[float, float],
                 weight_decay: float, foreach: bool) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})
        self.foreach = foreach

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        """One Lion step over every parameter with a gradient."""
        for group in self.param_groups:
            lr, (beta1, beta2), wd = group["lr"], group["betas"], group["weight_decay"]
            ps = [p for p in group["params"] if p.grad is not None]
            gs = [p.grad for p in ps]
            ms = []
            for p in ps:
                if "exp_avg" not in self.state[p]:
                    self.state[p]["exp_avg"] = torch.zeros_like(p)
                ms.append(self.state[p]["exp_avg"])
            if self.foreach:
                torch._foreach_mul_(ps, 1 - lr * wd)
                cs = torch._foreach_mul(ms, beta1)
                torch._foreach_add_(cs, gs, alpha=1 - beta1)
                torch._foreach_sign_(cs)
                torch._foreach_add_(ps, cs, alpha=-lr)
                torch._foreach_lerp_(ms, gs, 1 - beta2)
            else:
                for p, g, m in zip(ps, gs, ms):
                    p.mul_(1 - lr * wd)
                    p.add_(torch.lerp(g, m, beta1).sign_(), alpha=-lr)
                    m.lerp_(g, 1 - beta2)


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
    """Bytes one Lion step must move per element: read p, g, m and write p, m."""
    p = torch.finfo(param_dtype).bits // 8
    s = 4 if state == "fp32" else p
    return 3 * p + 2 * s


def implementations(param_dtype: torch.dtype) -> list[Impl]:
    """The implementations to compare for ``param_dtype`` (first row of each state dtype is anyaccel)."""
    from anyaccel.ops.cpu_lion import CPULion

    native = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[param_dtype]
    kw: dict[str, Any] = {"lr": LR, "betas": BETAS, "weight_decay": WEIGHT_DECAY}
    impls = [Impl("anyaccel CPULion", "fp32", lambda ps: CPULion(ps, **kw))]
    if native != "fp32":
        impls.append(Impl("anyaccel CPULion", native, lambda ps: CPULion(ps, fp32_optimizer_states=False, **kw)))
    impls.append(Impl("torch Lion foreach", native, lambda ps: TorchLion(ps, foreach=True, **kw)))
    impls.append(Impl("torch Lion for-loop", native, lambda ps: TorchLion(ps, foreach=False, **kw)))
    return impls


def split_sizes(total: int, pieces: int, generator: torch.Generator) -> list[int]:
    """Splits ``total`` elements into ``pieces`` tensors of random, uneven sizes (like a model's layers)."""
    if pieces <= 1:
        return [total]
    weights = torch.rand(pieces, generator=generator) + 0.05
    sizes = (weights / weights.sum() * total).long().tolist()
    sizes[-1] += total - sum(sizes)
    return sizes


def run_case(total: int, pieces: int, dtype_name: str, repeats: int, ceiling: float) -> list[list[str]]:
    """Benchmarks every implementation on one (size, layout, dtype) and returns table rows.

    Args:
        total: Elements in all parameters together.
        pieces: Number of tensors ``total`` is split into (uneven random sizes).
        dtype_name: Parameter dtype key of :data:`DTYPES`.
        repeats: Timed interleaved rounds.
        ceiling: The in-place ``a += b`` bandwidth ceiling in GB/s, for the percentage column.

    Returns:
        One row of strings per implementation, in the table's column order.
    """
    dtype = DTYPES[dtype_name]
    gen = torch.Generator().manual_seed(total + pieces)
    sizes = split_sizes(total, pieces, gen)
    # Every implementation steps the same parameter/gradient tensors (Lion moves each element by lr per step,
    # so values stay finite); only optimizer state is duplicated per implementation.
    params = [torch.nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in sizes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(dtype)
    optimizers = {f"{i.name} [{i.state} state]": (i, i.factory(params)) for i in implementations(dtype)}
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


def main(argv: list[str] | None = None) -> int:
    """Parses arguments, prints the kernel load time, the bandwidth ceiling and the comparison table.

    Args:
        argv: Command-line arguments (default: ``sys.argv[1:]``).

    Returns:
        The process exit status (0).

    Side effects:
        Builds or loads the ``cpu_lion`` kernel (default cache), allocates up to ~1.5 GiB for the ceiling
        plus the benchmarked tensors.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1M,10M,100M", help="comma-separated element counts (1M, 1e7, ...)")
    parser.add_argument("--dtypes", default="fp32,bf16", help=f"comma-separated param dtypes from {sorted(DTYPES)}")
    parser.add_argument("--layouts", default="1,200", help="comma-separated tensor counts each size is split into")
    parser.add_argument("--repeats", type=int, default=11, help="timed interleaved rounds (median reported)")
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats: a smoke run")
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
    from anyaccel.ops.cpu_lion import CPULion

    start = time.perf_counter()
    module = CPULion._kernel()
    print(f"cpu_lion kernel ({module.isa}): build or load {time.perf_counter() - start:.2f} s")
    working_set = int(0.25 * GIB) if args.quick else int(1.5 * GIB)
    ceiling = inplace_add_bandwidth(working_set)
    print(f"in-place a += b ceiling: {ceiling:.1f} GB/s ({working_set / GIB:.2f} GiB working set)")

    headers = ["elements", "tensors", "params", "implementation", "state", "ms/step", "time vs anyaccel",
               "GB/s", "% of a+=b"]
    rows: list[list[str]] = []
    for total in sizes:
        for pieces in layouts:
            for dtype_name in dtypes:
                rows += run_case(total, pieces, dtype_name, repeats, ceiling)
    print(format_table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
