"""The override mode's tuner (anyaccel/ops/tune.py): its round-robin timing."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

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
