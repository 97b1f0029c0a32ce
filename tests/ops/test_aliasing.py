"""Memory shared between the tensors of one optimizer call, fuzzed with hypothesis.

Each example carves the tensors of an ``adam_step`` / ``lion_step`` call out of one buffer at random offsets
(so some overlap and some do not) and checks, against a brute-force pairwise reference, that the host kernel
raises exactly when a written tensor (param, state, model copy) overlaps another tensor, that gradients may
share memory with each other, that the message is the Python validation's (``validation.check_no_overlap``),
and that a rejected call wrote nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anyaccel.ops import dispatch, validation

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

_STATES = {"adam": ("exp_avgs", "exp_avg_sqs"), "lion": ("exp_avgs",)}
_SCALARS = {"adam": (1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True), "lion": (1e-3, 0.9, 0.99, 0.0)}


@st.composite
def _layouts(draw: Any) -> tuple[str, int, list[tuple[str, int, int]]]:
    family = draw(st.sampled_from(sorted(_STATES)))
    n = draw(st.integers(1, 3))
    size = draw(st.integers(1, 6))
    names = ["params", "grads", *_STATES[family]]
    # Each tensor starts at a random element offset of a 64-element buffer: collisions are frequent.
    entries = [(name, i, draw(st.integers(0, 64 - size))) for i in range(n) for name in names]
    return family, size, entries


def _reference_overlap(size: int, entries: list[tuple[str, int, int]]) -> bool:
    for a in range(len(entries)):
        for b in range(a + 1, len(entries)):
            (na, _, oa), (nb, _, ob) = entries[a], entries[b]
            if na == "grads" and nb == "grads":
                continue
            if oa < ob + size and ob < oa + size:
                return True
    return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_layouts())
def test_kernel_raises_exactly_on_overlap_with_the_validation_message(layout: Any) -> None:
    family, size, entries = layout
    op = getattr(dispatch.load(family, "cpu"), f"{family}_step")
    buffer = torch.randn(64)
    lists: dict[str, list[torch.Tensor]] = {}
    for name, _, offset in entries:
        lists.setdefault(name, []).append(buffer[offset:offset + size])
    states = {k: lists[k] for k in _STATES[family]}
    args = [lists["params"], lists["grads"], *states.values(), [], *_SCALARS[family]]
    before = buffer.clone()
    expected = _reference_overlap(size, entries)
    if not expected:
        op(*args)
        validation.check_no_overlap(f"{family}_step", lists["params"], lists["grads"], states, [])
        return
    with pytest.raises(RuntimeError) as kernel_error:
        op(*args)
    with pytest.raises(RuntimeError) as python_error:
        validation.check_no_overlap(f"{family}_step", lists["params"], lists["grads"], states, [])
    assert str(kernel_error.value) == str(python_error.value)
    assert "share memory" in str(kernel_error.value)
    assert torch.equal(buffer, before), "a rejected call wrote to memory"
