"""A/B of the CPU-side private-internal shortcuts (``anyaccel/_compat``) against their public fallbacks.

A shortcut through a private torch internal is kept only where an end-to-end measurement shows at least a 3%
gain. This measures, in one process and interleaved round-robin (median of per-round ratios), the one kept
CPU-side shortcut forced to its public fallback:

* ``step hooks``: torch.optim's step protocol re-run with its private hook registries
  (:func:`anyaccel._compat.torch_optim.step_entry`) vs torch's public ``Optimizer.profile_hook_step``.

(The host store into the step counter and the batched ``data_ptr`` comparison were measured the same way and
dropped: ``docs/cpu_adam.md``, "Host cost per step".)

on two workloads: CPUAdam over one 1M-element fp32 parameter (the 1M row of ``benchmarks/cpu_adam.py``:
``opt.step()`` only), and a full training step of ``examples/train_charlm.py``'s default model (forward,
backward, ``zero_grad``, ``step``; reported as steps/s).

Usage (from the repository root)::

    python benchmarks/private_shortcuts.py --rounds 200 --charlm-rounds 30
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from _common import REPO_ROOT

from anyaccel._compat import torch_optim
from anyaccel.ops.adam import CPUAdam

logger = logging.getLogger("benchmarks.private_shortcuts")


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


Patch = Callable[[torch.optim.Optimizer], contextlib.AbstractContextManager[None]]


def public_hooks(opt: torch.optim.Optimizer) -> contextlib.AbstractContextManager[None]:
    """Step hooks through torch's own ``profile_hook_step`` (the registries look absent)."""
    return _patched(torch_optim, "global_step_hooks", lambda: None)


VARIANTS: dict[str, tuple[Patch, ...]] = {
    "private (all shortcuts)": (),
    "public step hooks": (public_hooks,),
}


def adam_1m() -> tuple[torch.optim.Optimizer, Callable[[], None]]:
    """One CPUAdam step over one 1M-element fp32 parameter (the same tensors for every variant)."""
    gen = torch.Generator().manual_seed(0)
    p = torch.nn.Parameter(torch.randn(1 << 20, generator=gen))
    p.grad = torch.randn(1 << 20, generator=gen) * 1e-3
    opt = CPUAdam([p], lr=1e-3, weight_decay=0.01, adamw_mode=True)
    return opt, opt.step


def charlm() -> tuple[torch.optim.Optimizer, Callable[[], None]]:
    """One training step of ``examples/train_charlm.py``'s default model with CPUAdam."""
    spec = importlib.util.spec_from_file_location("train_charlm", REPO_ROOT / "examples" / "train_charlm.py")
    assert spec is not None and spec.loader is not None
    ex = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("train_charlm", ex)
    spec.loader.exec_module(ex)
    args = ex.parse_args([])
    torch.manual_seed(args.seed)
    model = ex.CharTransformer(args.context, args.d_model, args.layers, args.heads)
    opt = ex.make_optimizer("cpuadam", model.parameters(), args)
    data = torch.randint(0, 256, (1 << 20,), dtype=torch.uint8)
    it = ex.batches(data, args.batch_size, args.context, torch.Generator().manual_seed(args.seed))

    def one() -> None:
        x, y = next(it)
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return opt, one


def measure(make: Callable[[], tuple[torch.optim.Optimizer, Callable[[], None]]], steps: int,
            rounds: int, clock: Callable[[], float] = time.perf_counter) -> dict[str, tuple[float, float]]:
    """Per variant: (median seconds per step, median over rounds of its time / the private variant's time in the
    same round). One workload serves every variant (the same model, optimizer and tensors, so memory and cache
    state are shared); every round times ``steps`` steps of each variant back to back, in an order reversed
    every other round, so a burst of load on the shared machine hits a round's variants alike and the per-round
    ratio cancels it. ``clock`` is wall time, or ``time.process_time`` (this process's CPU time over all its
    threads: what the step costs the machine, unaffected by other processes taking turns on the cores)."""
    opt, step = make()
    step()  # builds the plans
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for r in range(rounds + 1):
        order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            with contextlib.ExitStack() as stack:
                for patch in VARIANTS[name]:
                    stack.enter_context(patch(opt))
                t0 = clock()
                for _ in range(steps):
                    step()
                elapsed = clock() - t0
            if r:  # the first round warms up
                times[name].append(elapsed / steps)
    base = times["private (all shortcuts)"]
    return {name: (statistics.median(ts), statistics.median(t / b for t, b in zip(ts, base, strict=True)))
            for name, ts in times.items()}


def report(title: str, result: dict[str, tuple[float, float]], unit: str) -> None:
    logger.info("%s", title)
    for name, (s, ratio) in result.items():
        value = s * 1e3 if unit == "ms/step" else 1.0 / s
        logger.info("  %-26s %9.3f %s (median)   per-round time vs private: %+6.2f%% (median)", name, value, unit,
                    (ratio - 1.0) * 100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--adam-steps", type=int, default=2, help="steps per timed block of the 1M row")
    parser.add_argument("--charlm-steps", type=int, default=1, help="steps per timed block of train_charlm")
    parser.add_argument("--charlm-rounds", type=int, default=30)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="wall: time.perf_counter; cpu: time.process_time (immune to other processes' load)")
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    logger.info("torch %s, %d threads", torch.__version__, torch.get_num_threads())
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    logger.info("clock: %s", "process CPU time" if args.clock == "cpu" else "wall time")
    report("CPUAdam, 1M fp32 elements, one tensor (opt.step only)",
           measure(adam_1m, args.adam_steps, args.rounds, clock), "ms/step")
    report("examples/train_charlm.py default model, full training step",
           measure(charlm, args.charlm_steps, args.charlm_rounds, clock), "steps/s")
    logging.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
