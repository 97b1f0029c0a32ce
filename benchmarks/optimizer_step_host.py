"""Benchmark: the host cost of a warm optimizer step on many small CPU tensors (where Python decides the time).

``G`` parameter groups of ``N`` fp32 parameters of 64 elements each, one thread (``torch.set_num_threads(1)``:
the kernel runs on the calling thread, so the thread's CPU time is the whole step). Two ways of giving
gradients: ``kept`` (the same gradient objects every step, as with ``zero_grad(set_to_none=False)``) and
``new`` (the gradient objects alternate between two sets, as after ``zero_grad()`` and a backward; the
assignment loop is inside the timed loop). Prints the best of ``--rounds`` rounds of 10 steps, in microseconds
of the thread's CPU time per step (CPU time and the best round, because the machines are shared).

Compare two trees by running the script with each on ``PYTHONPATH``, alternately, several times::

    PYTHONPATH=<tree> python benchmarks/optimizer_step_host.py --groups 2 --params 500
"""

from __future__ import annotations

import argparse
import time

import torch

from anyaccel.ops.adam.cpu import CPUAdam
from anyaccel.ops.lion.cpu import CPULion


def best_step_us(cls: type, groups: int, params: int, mode: str, rounds: int) -> float:
    """The best round's thread CPU time per step, in microseconds."""
    ps = [torch.nn.Parameter(torch.randn(64)) for _ in range(groups * params)]
    opt = cls([{"params": ps[i * params:(i + 1) * params]} for i in range(groups)], lr=1e-4)
    sets = [[torch.randn(64) for _ in ps] for _ in range(2)]
    for p, g in zip(ps, sets[0], strict=True):
        p.grad = g
    opt.step()
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        for i in range(10):
            if mode == "new":
                for p, g in zip(ps, sets[i % 2], strict=True):
                    p.grad = g
            opt.step()
        best = min(best, (time.thread_time() - start) / 10 * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--params", type=int, default=500, help="parameters per group")
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for cls in (CPUAdam, CPULion):
        for mode in ("kept", "new"):
            us = best_step_us(cls, args.groups, args.params, mode, args.rounds)
            print(f"{cls.__name__:8s} {mode:4s} grads {args.groups}x{args.params} params: {us:8.1f} us/step")


if __name__ == "__main__":
    main()
