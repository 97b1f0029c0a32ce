"""``anyaccel tune`` (`anyaccel.tune_command`): measure the override mode's per-shape policy.

For each replaced aten op, dtype and shape (``rows x row length``), the op is timed as a user calls it
(``torch.ops.aten.<op>``) with the override mode off (aten's kernel), on with ``policy="always"``
(anyaccel's kernel through the override) and on with ``policy="never"`` (aten's kernel reached through the
mode's Python kernel); the speed-up ``aten / anyaccel`` and the fallback's speed ``aten / fallback`` are
stored under the call's policy key in the device's table (`anyaccel.ops.override.policy`, which registers an
op only where both keep it worth it). The default shapes are the benchmark's (tokens {1024, 8192, 32768} x
hidden {2048, 4096, 8192}, and 64x64, 256x1024).

What is timed is **device time** wherever the accelerator has graphs (CUDA, XPU, NPU: `graph_times`), the
basis this project judges kernels on: each variant's calls are captured in a graph (the mode's Python kernel
runs once, at capture) and the graph's replays are timed with the accelerator's events, so a call costs what
its kernels cost on the stream. A training step under ``torch.compile`` or CUDA graphs pays exactly that; an
eager step also pays the mode's Python kernel on the host (about 10 us a call), which hides behind the device
work of any step large enough to keep the device busy, and is reported by ``benchmarks/nn_ops.py --sections
default``, not tuned for. Where the accelerator has no graphs (the CPU) or a capture fails, the wall clock per
call is timed instead (`round_robin_times`: batches of back-to-back calls, each batch synchronised once), and
the log says which basis each key got.

Either way the variants take turns round by round (round-robin, in an order reversed every round), so a drift
of the machine's speed during the measurement (warm-up, other load, clocks) moves all three alike instead of
biasing their ratios: timed one variant after the other, a drift once recorded the mode's fallback (aten plus
the mode's Python kernel) as faster than aten alone, which it cannot be. ``--emit-default-policy PATH`` also
writes the run's measurements as the device's entry of a default-policy file
(`anyaccel.ops.override.policy.emit_default`), the way the packaged default policy is regenerated.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: (rows, row length) measured by default.
DEFAULT_SHAPES: tuple[tuple[int, int], ...] = tuple((t, h) for t in (1024, 8192, 32768) for h in (2048, 4096, 8192)) \
    + ((64, 64), (256, 1024))


def make_args(op: str, rows: int, cols: int, dtype: Any, device: str) -> tuple[Any, ...]:
    """A typical call of aten ``op`` on ``rows x cols`` (what a training step passes it)."""
    import torch

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, dtype=dtype, device=device)

    x = r(rows, cols)
    w, b = r(cols), r(cols)
    aten = torch.ops.aten
    if op in ("_softmax", "_log_softmax"):
        return (x, -1, False)
    if op == "_softmax_backward_data":
        return (r(rows, cols), aten._softmax(x, -1, False), -1, dtype)
    if op == "_log_softmax_backward_data":
        return (r(rows, cols), aten._log_softmax(x, -1, False), -1, dtype)
    if op == "native_layer_norm":
        return (x, [cols], w, b, 1e-5)
    if op == "native_layer_norm_backward":
        _, mean, rstd = aten.native_layer_norm(x, [cols], w, b, 1e-5)
        return (r(rows, cols), x, [cols], mean, rstd, w, b, [True, True, True])
    if op == "_fused_rms_norm":
        return (x, [cols], w, 1e-6)
    if op == "_fused_rms_norm_backward":
        _, rstd = aten._fused_rms_norm(x, [cols], w, 1e-6)
        return (r(rows, cols), x, [cols], rstd, w, [True, True])
    if op == "silu":
        return (x,)
    if op == "silu_backward":
        return (r(rows, cols), x)
    if op in ("nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward"):
        two_d = op.startswith("nll_loss2d")
        # 2d: [1, cols, rows, 1] (classes in dimension 1, rows spatial positions)
        logp = aten._log_softmax(x.t().reshape(1, cols, rows, 1) if two_d else x, 1 if two_d else -1, False)
        target = torch.randint(0, cols, (1, rows, 1) if two_d else (rows,), device=device)
        forward = aten.nll_loss2d_forward if two_d else aten.nll_loss_forward
        if op.endswith("forward"):
            return (logp, target, None, 1, -100)
        _, total = forward(logp, target, None, 1, -100)
        return (torch.ones((), dtype=dtype, device=device), logp, target, None, 1, -100, total)
    if op == "cross_entropy_loss":
        # the call its accuracy route takes: class targets with label smoothing, mean
        return (x, torch.randint(0, cols, (rows,), device=device), None, 1, -100, 0.1)
    raise ValueError(f"tune: no sample call for aten::{op}")


#: Calls per timed batch: a device synchronisation per call would cost more than a small op and hide the
#: host overhead the policy must see.
BATCH = 10


def round_robin_times(variants: Sequence[Callable[[], contextlib.AbstractContextManager[Any]]],
                      fn: Callable[[], Any], sync: Callable[[], None], reps: int, batch: int = BATCH,
                      warmup: int = 3) -> list[list[float]]:
    """Seconds per call of ``fn()`` under each of ``variants`` (context factories: the mode off, on, ...), one
    figure per round: ``reps`` rounds in which every variant times one batch of ``batch`` back-to-back calls
    (synchronised once), after ``warmup`` calls each. The variants take turns in an order reversed every
    round, so that a drift of the host's speed and any cost of following another variant hit them alike.
    Entering and leaving a variant is not timed, nor is the first call after entering it (a registration
    may leave the dispatcher a cold first call).

    Returns:
        Per variant (in the given order), ``reps`` seconds-per-call figures, round by round.
    """
    for variant in variants:
        with variant():
            for _ in range(warmup):
                fn()
            sync()
    times: list[list[float]] = [[] for _ in variants]
    order = list(range(len(variants)))
    for r in range(reps):
        for i in (order if r % 2 == 0 else order[::-1]):
            with variants[i]():
                fn()
                sync()
                t0 = time.perf_counter()
                for _ in range(batch):
                    fn()
                sync()
                times[i].append((time.perf_counter() - t0) / batch)
    return times


def time_round_robin(variants: Sequence[Callable[[], contextlib.AbstractContextManager[Any]]],
                     fn: Callable[[], Any], sync: Callable[[], None], reps: int, warmup: int = 3) -> list[float]:
    """The median of `round_robin_times` per variant, batches of `BATCH` calls."""
    return [statistics.median(t) for t in round_robin_times(variants, fn, sync, reps, BATCH, warmup)]


#: Calls captured per timed graph (at least; a round of distinct inputs may hold more).
GRAPH_CALLS = 20
#: The distinct inputs captured in one graph cover at least this many times the device's L2 cache, so the
#: timed calls read from memory as a step's do, not from a cache the call before them filled.
L2_MULTIPLE = 2
#: Most distinct input sets per graph (small shapes: the L2 rule would ask for thousands).
MAX_INPUT_SETS = 16
#: The L2 size assumed where the device module does not report one (bytes).
L2_FALLBACK_BYTES = 64 << 20


def _l2_bytes(device_type: str) -> int:
    """The current device's L2 cache in bytes (``get_device_properties().L2_cache_size`` where the device module
    reports it, else `L2_FALLBACK_BYTES`)."""
    import torch

    try:
        module = torch.get_device_module(device_type)
        props = module.get_device_properties(module.current_device())
        return int(getattr(props, "L2_cache_size", 0)) or L2_FALLBACK_BYTES
    except (AttributeError, RuntimeError, AssertionError):
        return L2_FALLBACK_BYTES


def _footprint(args: Sequence[Any]) -> int:
    """Bytes of the tensors among ``args``."""
    import torch

    return sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))


def graph_times(variants: Sequence[Callable[[], contextlib.AbstractContextManager[Any]]],
                make_call: Callable[[], tuple[Callable[[], Any], int]], reps: int,
                accelerator: Any, l2_multiple: int = L2_MULTIPLE,
                max_input_sets: int = MAX_INPUT_SETS) -> list[list[float]] | None:
    """Device seconds per call under each of ``variants``, from graph replays; None where the accelerator has
    no graphs or a capture fails.

    Per variant, with the variant entered: ``k`` calls on distinct inputs (``make_call()`` returns a call bound
    to fresh inputs and their footprint in bytes; ``k`` is the number of input sets that together cover
    ``l2_multiple`` times the L2 cache, at most ``max_input_sets``) run twice on a side stream (the first calls:
    compilation, allocation, lazy initialisation, outside the capture, as torch's CUDA-graph notes prescribe),
    then at least `GRAPH_CALLS` calls, round after round over the ``k`` input sets, are captured in one graph
    with every output of a round alive to its end (so no call writes into lines the call before it left in
    the cache). Then ``reps`` rounds replay each variant's graph once, in an order reversed every round, timed
    with the accelerator's events (DeepSpeed's ``Event``, ``create_graph``, ``capture_to_graph`` and
    ``replay_graph``).

    Args:
        variants: context factories (the mode off, on, ...), entered for the warm-up and the capture only.
        make_call: ``() -> (call, footprint bytes)``.
        reps: timed rounds.
        accelerator: the accelerator whose graphs, streams and events time the calls (DeepSpeed's interface:
            ``create_graph``, ``capture_to_graph``, ``replay_graph``, ``Stream``, ``Event``...), passed in by the
            caller (``anyaccel.get_accelerator()`` above this layer).
        l2_multiple: how many L2 caches the distinct input sets cover together (default `L2_MULTIPLE`).
        max_input_sets: the most input sets (default `MAX_INPUT_SETS`).

    Returns:
        Per variant, ``reps`` seconds-per-call figures; None when the accelerator has no graphs or a capture
        raised (logged; the caller times the wall clock instead).

    Side effects: allocates ``k`` input sets and each graph's outputs on the device, synchronises it.
    """
    if accelerator.create_graph() is None:
        return None
    first, footprint = make_call()
    k = max(1, min(max_input_sets, -(-l2_multiple * _l2_bytes(accelerator.device_name()) // max(1, footprint))))
    calls = [first] + [make_call()[0] for _ in range(k - 1)]
    rounds = -(-GRAPH_CALLS // k)

    def one_round() -> None:
        kept = [call() for call in calls]  # outputs live to the round's end
        del kept

    graphs = []
    try:
        for variant in variants:
            with variant():
                side = accelerator.Stream()
                side.wait_stream(accelerator.current_stream())
                with accelerator.stream(side):
                    for _ in range(2):
                        one_round()
                accelerator.current_stream().wait_stream(side)
                graph = accelerator.create_graph()
                with accelerator.capture_to_graph(graph):
                    for _ in range(rounds):
                        one_round()
            graphs.append(graph)
        for graph in graphs:  # the first replay uploads the graph
            accelerator.replay_graph(graph)
        accelerator.synchronize()
        times: list[list[float]] = [[] for _ in variants]
        order = list(range(len(variants)))
        event = accelerator.Event
        for r in range(reps):
            for i in (order if r % 2 == 0 else order[::-1]):
                start, end = event(enable_timing=True), event(enable_timing=True)
                start.record()
                accelerator.replay_graph(graphs[i])
                end.record()
                end.synchronize()
                times[i].append(start.elapsed_time(end) * 1e-3 / (rounds * k))
        return times
    except RuntimeError as exc:  # a call that cannot be captured (a host synchronisation, a CPU tensor)
        logger.info("tune: graph capture failed (%s: %s); timing the wall clock instead", type(exc).__name__,
                    str(exc).splitlines()[0][:200] if str(exc) else "")
        return None
    finally:
        del graphs
        accelerator.synchronize()


def _caller(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], Any]:
    def call() -> Any:
        return fn(*args)

    return call


def tune(ops: Sequence[str] | None = None, shapes: Sequence[tuple[int, int]] = DEFAULT_SHAPES,
         dtypes: Sequence[str] = ("bfloat16",), reps: int = 20, save: bool = True,
         emit_default: Path | None = None, *, accelerator: Any) -> dict[str, float]:
    """Measure the speed-ups and store them in ``accelerator``'s policy table.

    Args:
        ops: aten op or family names (all the mode replaces when None).
        shapes: (rows, row length) pairs.
        dtypes: dtype names.
        reps: timed runs per measurement.
        save: write the table (merged with what it held).
        emit_default: also write this run's measurements as the current device's entry of a default-policy
            file at this path (`anyaccel.ops.override.policy.emit_default`: the shipped format).

    Returns:
        key -> speed-up of this run.

    Raises:
        anyaccel.ops.override.policy.PolicyFileError: ``emit_default`` names an existing file that breaks the
            default policy's schema.

    Side effects: allocates and runs ops on the current accelerator; writes the table file (and
    ``emit_default``).
    """
    import torch

    from anyaccel.ops.override import aten_ops, mode
    from anyaccel.ops.override.policy import Policy

    device_type = str(accelerator.device_type)
    dev = torch.get_device_module(device_type) if device_type != "cpu" else None

    def sync() -> None:
        if dev is not None:
            dev.synchronize()

    name = mode._device_name(device_type)
    policy = Policy.load(name, "tuned", default=False)
    run_policy = Policy("tuned")
    measured: dict[str, float] = {}
    bases: set[str] = set()
    for entry in aten_ops.select(ops, None):
        aten_op = getattr(torch.ops.aten, entry.name).default
        for dtype_name in dtypes:
            dtype = getattr(torch, dtype_name)
            for rows, cols in shapes:
                try:
                    args = make_args(entry.name, rows, cols, dtype, device_type)
                except (RuntimeError, NotImplementedError) as exc:
                    logger.info("tune: aten::%s %s %dx%d skipped: %s", entry.name, dtype_name, rows, cols, exc)
                    continue
                k = entry.describe(args)
                if k is None:
                    continue
                with mode.use_ops(include=[entry.name], policy="always", device=device_type) as replaced:
                    if entry.name not in replaced:
                        break
                variants = (contextlib.nullcontext,
                            functools.partial(mode.use_ops, include=[entry.name], policy="always",
                                              device=device_type),
                            functools.partial(mode.use_ops, include=[entry.name], policy="never",
                                              device=device_type))

                def make_call(entry: Any = entry, rows: int = rows, cols: int = cols,
                              dtype: Any = dtype, aten_op: Any = aten_op) -> tuple[Callable[[], Any], int]:
                    fresh = make_args(entry.name, rows, cols, dtype, device_type)
                    return _caller(aten_op, fresh), _footprint(fresh)

                on_device = graph_times(variants, make_call, reps, accelerator)
                basis = "device"
                if on_device is None:
                    on_device = round_robin_times(variants, _caller(aten_op, args), sync, reps)
                    basis = "wall clock"
                t_aten, t_ours, t_fallback = (statistics.median(t) for t in on_device)
                measured[k] = t_aten / t_ours
                policy.record(k, measured[k], t_aten / t_fallback)
                run_policy.record(k, measured[k], t_aten / t_fallback)
                bases.add(basis)
                logger.info("tune: %s (%s time) aten %.1f us, anyaccel %.1f us (%.2fx), aten through the mode "
                            "%.1f us", k, basis, t_aten * 1e6, t_ours * 1e6, measured[k], t_fallback * 1e6)
                del args
    if save:
        path = policy.save(name)
        logger.info("tune: %d measurements written to %s", len(measured), path)
    if emit_default is not None:
        from anyaccel.ops.override.policy import device_key
        from anyaccel.ops.override.policy import emit_default as emit

        dkey = device_key(name, mode._capability(device_type))
        src = (f"measured by anyaccel tune with torch {torch.__version__}: {len(measured)} keys, dtypes "
               f"{', '.join(dtypes)}, {reps} rounds, {' and '.join(sorted(bases)) or 'no'} time")
        out = emit(Path(emit_default), dkey, run_policy, src)
        logger.info("tune: default-policy entry %r written to %s", dkey, out)
    return measured


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options (``anyaccel tune``)."""
    parser.add_argument("--ops", nargs="*", default=None, help="aten ops or families to measure (default: all)")
    parser.add_argument("--shapes", nargs="*", default=None, metavar="ROWSxCOLS",
                        help="shapes to measure, e.g. 8192x4096 (default: the benchmark's)")
    parser.add_argument("--dtypes", nargs="*", default=["bfloat16"], help="dtypes (default: bfloat16)")
    parser.add_argument("--reps", type=int, default=20, help="timed runs per measurement (default: 20)")
    parser.add_argument("--emit-default-policy", type=Path, default=None, metavar="PATH",
                        help="also write the measurements as this device's entry of a default-policy file at PATH "
                             "(the format of anyaccel/ops/override/default_policy.json; other entries kept)")


def run(args: argparse.Namespace, accelerator: Any) -> int:
    """Run the measurement on ``accelerator`` with `add_arguments`' options; returns the exit status."""
    shapes = DEFAULT_SHAPES
    if args.shapes:
        try:
            shapes = tuple((int(a), int(b)) for a, b in (s.lower().split("x") for s in args.shapes))
        except ValueError:
            logger.error("tune: --shapes takes ROWSxCOLS values such as 8192x4096, got %s", args.shapes)
            return 2
    tune(args.ops, shapes, args.dtypes, args.reps, emit_default=args.emit_default_policy, accelerator=accelerator)
    return 0
