"""A/B of the CPU-side private-internal shortcuts (``anyaccel/_compat``) against their public fallbacks.

A shortcut through a private torch internal is kept only where an end-to-end measurement shows at least a 3%
gain. This measures, in one process and interleaved round-robin (median of the rounds), with each shortcut
forced to its public fallback in turn and all of them together:

* ``step hooks``: torch.optim's step protocol re-run with its private hook registries
  (:func:`anyaccel._compat.torch_optim.step_entry`) vs torch's public ``Optimizer.profile_hook_step``;
* ``step counter``: the 0-dim step tensor written by a 4-byte host store vs ``Tensor.fill_``;
* ``data_ptrs``: many data pointers compared in one private C++ call vs ``Tensor.data_ptr`` in Python;

on two workloads: CPUAdam over one 1M-element fp32 parameter (the 1M row of ``benchmarks/cpu_adam.py``:
``opt.step()`` only), and a full training step of ``examples/train_charlm.py``'s default model (forward,
backward, ``zero_grad``, ``step``; reported as steps/s).

Usage (from the repository root)::

    python benchmarks/private_shortcuts.py --rounds 30
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import logging
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from _common import REPO_ROOT

from anyaccel._compat import tensor_data, torch_optim
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


def public_hooks() -> contextlib.AbstractContextManager[None]:
    """Step hooks through torch's own ``profile_hook_step`` (the registries look absent)."""
    return _patched(torch_optim, "global_step_hooks", lambda: None)


def public_counter() -> contextlib.AbstractContextManager[None]:
    """Step counters written with ``fill_`` (applies to plans built inside)."""
    return _patched(tensor_data, "float_setter", lambda t: functools.partial(tensor_data._fill, t))


def public_data_ptrs() -> contextlib.AbstractContextManager[None]:
    """Data pointers compared in Python, whatever the count."""
    return _patched(tensor_data, "_MIN_BATCH", 1 << 62)


VARIANTS: dict[str, tuple[Callable[[], contextlib.AbstractContextManager[None]], ...]] = {
    "private (all shortcuts)": (),
    "public step hooks": (public_hooks,),
    "public step counter": (public_counter,),
    "public data_ptrs": (public_data_ptrs,),
    "all public": (public_hooks, public_counter, public_data_ptrs),
}


def _within(patches: tuple[Callable[[], contextlib.AbstractContextManager[None]], ...],
            fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with contextlib.ExitStack() as stack:
            for p in patches:
                stack.enter_context(p())
            return fn()
    return run


def adam_1m(patches: tuple[Callable[[], contextlib.AbstractContextManager[None]], ...],
            steps: int) -> Callable[[], None]:
    """``steps`` CPUAdam steps over one 1M-element fp32 parameter (plan built under ``patches``)."""
    gen = torch.Generator().manual_seed(0)
    p = torch.nn.Parameter(torch.randn(1 << 20, generator=gen))
    p.grad = torch.randn(1 << 20, generator=gen) * 1e-3
    opt = CPUAdam([p], lr=1e-3, weight_decay=0.01, adamw_mode=True)
    _within(patches, opt.step)()  # builds the plan (and the step counter's writer) under the patches

    def run() -> None:
        for _ in range(steps):
            opt.step()
    return _within(patches, run)


def charlm(patches: tuple[Callable[[], contextlib.AbstractContextManager[None]], ...],
           steps: int) -> Callable[[], None]:
    """``steps`` training steps of ``examples/train_charlm.py``'s default model with CPUAdam."""
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

    _within(patches, one)()

    def run() -> None:
        for _ in range(steps):
            one()
    return _within(patches, run)


def measure(make: Callable[..., Callable[[], None]], steps: int, rounds: int) -> dict[str, float]:
    """Seconds per step of each variant: median over ``rounds`` round-robin rounds of ``steps`` steps."""
    fns = {name: make(patches, steps) for name, patches in VARIANTS.items()}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():  # warm-up round
        fn()
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))
        for name in order:
            t0 = time.perf_counter()
            fns[name]()
            times[name].append((time.perf_counter() - t0) / steps)
    return {name: statistics.median(ts) for name, ts in times.items()}


def report(title: str, result: dict[str, float], unit: str) -> None:
    base = result["private (all shortcuts)"]
    logger.info("%s", title)
    for name, s in result.items():
        value = s * 1e3 if unit == "ms/step" else 1.0 / s
        logger.info("  %-26s %9.3f %s   time vs private %+6.2f%%", name, value, unit, (s / base - 1.0) * 100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--adam-steps", type=int, default=20, help="steps per timed block of the 1M row")
    parser.add_argument("--charlm-steps", type=int, default=3, help="steps per timed block of train_charlm")
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    logger.info("torch %s, %d threads", torch.__version__, torch.get_num_threads())
    report("CPUAdam, 1M fp32 elements, one tensor (opt.step only)",
           measure(adam_1m, args.adam_steps, args.rounds), "ms/step")
    report("examples/train_charlm.py default model, full training step",
           measure(charlm, args.charlm_steps, args.rounds), "steps/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
