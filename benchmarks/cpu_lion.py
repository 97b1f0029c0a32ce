"""Benchmark: anyaccel CPULion vs Lion written with torch foreach ops (and a per-tensor for-loop).

torch has no Lion optimizer, so the reference is what a user writes without a kernel: Lion (Chen et al.
2023, Algorithm 2) as ``torch._foreach_*`` calls over a parameter group, state in the parameter dtype.
Everything is measured in ONE run, interleaved round-robin, and summarised by the median, because the
machines are shared and their bandwidth drifts minute to minute. For every (size, layout, dtype) the table
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
import logging
import sys
import time
from collections.abc import Iterable
from typing import Any

import torch
from _common import Impl, add_plan_arguments, dtype_label, measure_ceiling, parse_plan, print_environment, run_table

logger = logging.getLogger("benchmarks.cpu_lion")

LR = 1e-4
BETAS = (0.9, 0.99)
WEIGHT_DECAY = 0.01


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
                for p, g, m in zip(ps, gs, ms, strict=True):
                    p.mul_(1 - lr * wd)
                    p.add_(torch.lerp(g, m, beta1).sign_(), alpha=-lr)
                    m.lerp_(g, 1 - beta2)


def bytes_per_element(param_dtype: torch.dtype, state: str) -> int:
    """Bytes one Lion step must move per element: read p, g, m and write p, m."""
    p = torch.finfo(param_dtype).bits // 8
    s = 4 if state == "fp32" else p
    return 3 * p + 2 * s


def implementations(param_dtype: torch.dtype) -> list[Impl]:
    """The implementations to compare for ``param_dtype`` (first row of each state dtype is anyaccel)."""
    from anyaccel.ops.lion import CPULion

    native = dtype_label(param_dtype)
    kw: dict[str, Any] = {"lr": LR, "betas": BETAS, "weight_decay": WEIGHT_DECAY}
    impls = [Impl("anyaccel CPULion", "fp32", lambda ps: CPULion(ps, **kw))]
    if native != "fp32":
        impls.append(Impl("anyaccel CPULion", native, lambda ps: CPULion(ps, fp32_optimizer_states=False, **kw)))
    impls.append(Impl("torch Lion foreach", native, lambda ps: TorchLion(ps, foreach=True, **kw)))
    impls.append(Impl("torch Lion for-loop", native, lambda ps: TorchLion(ps, foreach=False, **kw)))
    return impls


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark on ``argv`` (default ``sys.argv[1:]``) and returns the exit status, 0.

    Prints the kernel load time, the bandwidth ceiling and the comparison table. Side effects: builds or
    loads the ``cpu_lion`` kernel (default cache), allocates up to ~1.5 GiB for the ceiling plus the
    benchmarked tensors.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_plan_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    plan = parse_plan(parser, args)

    print_environment()
    from anyaccel.op_builder import CPULionBuilder

    start = time.perf_counter()
    module = CPULionBuilder().load()
    print(f"cpu_lion kernel ({module.isa}): build or load {time.perf_counter() - start:.2f} s")
    ceiling = measure_ceiling(plan.quick)
    print(run_table(plan, ceiling, implementations, bytes_per_element))
    return 0


if __name__ == "__main__":
    sys.exit(main())
