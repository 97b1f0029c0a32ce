"""The override mode's tuner (anyaccel/ops/tune.py): its round-robin and graph-replay timing."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from anyaccel.ops import tune


def test_round_robin_takes_turns_and_times_each_variant_apart() -> None:
    """Variants alternate batch by batch, in an order reversed every round; a variant's cost shows in its own
    figure only; entering a variant is not timed."""
    log: list[str] = []
    state = {"slow": 0.0}

    def variant(name: str, per_call_s: float, enter_s: float) -> contextlib.AbstractContextManager[None]:
        @contextlib.contextmanager
        def ctx() -> Iterator[None]:
            time.sleep(enter_s)  # registration work: must not count
            log.append(name)
            state["slow"] = per_call_s
            try:
                yield
            finally:
                state["slow"] = 0.0

        return ctx()

    calls = []

    def fn() -> None:
        calls.append(1)
        time.sleep(state["slow"])

    reps = 3
    fast, slow = tune.time_round_robin(
        (lambda: variant("a", 0.0, 0.05), lambda: variant("b", 0.002, 0.0)), fn, lambda: None, reps, warmup=2)
    assert log == ["a", "b"] + ["a", "b", "b", "a", "a", "b"]
    assert len(calls) == 2 * 2 + reps * 2 * (1 + tune.BATCH)
    assert slow >= 0.002 > fast  # a's 50 ms entry is not in a's per-call figure


class FakeGraphAccelerator:
    """An accelerator with graphs, faked on the CPU: a graph records the calls made while it captures and
    replays them; an event reads a clock that each replayed call advances by the per-call cost of the variant
    that was active at capture. Streams and synchronisation are no-ops."""

    def __init__(self, graphs: bool = True) -> None:
        self.graphs = graphs
        self.capturing: list[object] | None = None
        self.clock_ms = 0.0
        self.cost_ms = 0.0  # per call, set by the active variant
        self.log: list[str] = []

    def device_name(self, device_index: int | None = None) -> str:
        return "fake"

    def create_graph(self) -> object | None:
        return {"calls": []} if self.graphs else None

    @contextlib.contextmanager
    def capture_to_graph(self, graph: dict[str, list[object]], pool: object = None,
                         stream: object = None) -> Iterator[None]:
        self.capturing = graph["calls"]
        try:
            yield
        finally:
            self.capturing = None

    def replay_graph(self, graph: dict[str, list[float]]) -> None:
        self.log.append("replay")
        self.clock_ms += sum(graph["calls"])  # type: ignore[arg-type]

    def Stream(self) -> object:  # noqa: N802
        class S:
            def wait_stream(self, other: object) -> None:
                pass

        return S()

    def stream(self, s: object) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def current_stream(self) -> object:
        return self.Stream()

    def synchronize(self) -> None:
        pass

    def Event(self, enable_timing: bool = False) -> object:  # noqa: N802
        accel = self

        class E:
            def record(self) -> None:
                self.t = accel.clock_ms

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, end: E) -> float:
                return end.t - self.t

        return E()


def test_graph_times_capture_each_variant_and_time_replays_per_call() -> None:
    """Each variant is active while its calls are captured (not while replayed); a replay's time divided by the
    calls it holds is the figure; distinct input sets fill the L2 rule; variants take turns, reversed every
    round."""
    accel = FakeGraphAccelerator()
    made: list[int] = []

    def variant(name: str, cost_ms: float) -> contextlib.AbstractContextManager[None]:
        @contextlib.contextmanager
        def ctx() -> Iterator[None]:
            accel.log.append(name)
            accel.cost_ms = cost_ms
            try:
                yield
            finally:
                accel.cost_ms = 0.0

        return ctx()

    def make_call() -> tuple[object, int]:
        made.append(1)

        def call() -> None:
            if accel.capturing is not None:
                accel.capturing.append(accel.cost_ms)

        footprint = 1 << 20  # 1 MiB: with a 64 MiB L2 (the fallback) and L2_MULTIPLE 2, 128 sets, capped
        return call, footprint

    times = tune.graph_times((lambda: variant("off", 0.010), lambda: variant("on", 0.004)), make_call, reps=3,
                             accelerator=accel)
    assert times is not None
    assert len(made) == tune.MAX_INPUT_SETS
    off, on = times
    assert off == [pytest.approx(10e-6)] * 3 and on == [pytest.approx(4e-6)] * 3
    assert accel.log[:2] == ["off", "on"] and "off" not in accel.log[2:]  # replays run with no variant active
    assert accel.log.count("replay") == 2 + 3 * 2


def test_graph_times_is_none_without_graphs_or_when_a_capture_fails() -> None:
    """No graphs on the accelerator, or a call that cannot be captured: None, so the tuner times the wall
    clock."""
    assert tune.graph_times((contextlib.nullcontext,), lambda: (lambda: None, 8), 2,
                            accelerator=FakeGraphAccelerator(graphs=False)) is None

    accel = FakeGraphAccelerator()

    def refuses() -> None:
        if accel.capturing is not None:
            raise RuntimeError("operation not permitted when stream is capturing")

    assert tune.graph_times((contextlib.nullcontext,), lambda: (refuses, 8), 2, accelerator=accel) is None
