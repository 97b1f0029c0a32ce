"""Benchmark: host time per step of the Triton multi-tensor optimizers, unplanned against planned.

The Triton kernels are replaced by no-ops and the tensors are CPU tensors under Triton's interpreter, so
what is timed is only the Python work around one launch: validating the lists and building the work table
on every call (``<family>_step``) against looking a cached plan up (``<family>_step_planned`` after one
``<family>_plan``). Runs on any machine with the ``triton`` wheel; no GPU::

    python benchmarks/triton_host_overhead.py --tensors 1000 --elements 10000

Prints milliseconds per step (mean of ``--repeats`` calls after 3 warm-up calls) and the plan's build time.
On a GPU the planned step also launches the kernel (and LAMB's norm kernels), which this leaves out; the
device figures are ``benchmarks/gpu_optimizers.py``'s "host us" column.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: CPU tensors are accepted

import torch  # noqa: E402


class _NoopKernel:
    """Stands in for a ``@triton.jit`` kernel: ``kernel[grid](...)`` does nothing."""

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def _time_ms(fn: Callable[[], Any], repeats: int) -> float:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensors", type=int, default=1000, help="tensors per list")
    parser.add_argument("--elements", type=int, default=10_000, help="elements per tensor")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls of the unplanned step")
    args = parser.parse_args(argv)

    import anyaccel.ops.adam.triton as adam
    import anyaccel.ops.lamb.triton as lamb
    import anyaccel.ops.lion.triton as lion

    adam._adam_kernel = lion._lion_kernel = _NoopKernel()  # type: ignore[assignment]
    lamb._lamb_update_kernel = lamb._lamb_apply_kernel = _NoopKernel()  # type: ignore[assignment]
    n, t = args.elements, args.tensors
    ps = [torch.randn(n) for _ in range(t)]
    gs = [torch.randn(n) for _ in range(t)]
    ms = [torch.zeros(n) for _ in range(t)]
    vs = [torch.zeros(n) for _ in range(t)]
    coeffs = torch.empty(t)
    cases: list[tuple[str, Any, tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]] = [
        ("adam", adam, (ps, gs, ms, vs, []), (1, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, True), ()),
        ("lion", lion, (ps, gs, ms, []), (1e-3, 0.9, 0.99, 0.01), ()),
        ("lamb", lamb, (ps, gs, ms, vs, []), (1, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1.0, 10.0, 0.01, True, False),
         (coeffs,)),
    ]
    print(f"{t} tensors of {n} elements, no-op kernels, torch {torch.__version__}")
    print(f"{'family':<6} {'unplanned ms':>13} {'planned ms':>11} {'plan build ms':>14}")
    for name, module, lists, scalars, extra in cases:
        step = getattr(module, f"{name}_step")
        unplanned = _time_ms(lambda step=step, lists=lists, extra=extra, scalars=scalars:
                             step(*lists, *extra, *scalars), args.repeats)
        start = time.perf_counter()
        plan = getattr(module, f"{name}_plan")(*lists)
        built = (time.perf_counter() - start) * 1e3
        header = plan[:4].tolist()
        planned_step = getattr(module, f"{name}_step_planned")
        planned = _time_ms(lambda f=planned_step, plan=plan, h=header, extra=extra, scalars=scalars:
                           f(plan, h[1], h[2], h[3], *extra, *scalars), args.repeats * 10)
        print(f"{name:<6} {unplanned:>13.3f} {planned:>11.3f} {built:>14.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
