"""The model ops' argument checks (anyaccel/ops/nn/validation.py): the memo that lets an eager call skip
checks its argument metadata already passed, without ever letting a bad call through."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from anyaccel.ops.nn import validation as v
from anyaccel.ops.nn.errors import OpInputError
from anyaccel.ops.nn.families.layer_norm.fakes import check_forward
from anyaccel.ops.nn.families.rope.fakes import check_qk


def _counting() -> tuple[Any, list[tuple[Any, ...]]]:
    calls: list[tuple[Any, ...]] = []

    @v.memoized
    def check(op: str, x: torch.Tensor, eps: Any) -> None:
        calls.append((op, x.shape, eps))
        v.check_float(op, "x", x)
        v.check_finite_nonneg(op, "eps", eps)

    return check, calls


def test_memoized_check_runs_once_per_metadata() -> None:
    check, calls = _counting()
    x = torch.randn(3, 4)
    check("op", x, 1.0)
    check("op", torch.randn(3, 4), 1.0)  # other data, same metadata: skipped
    check("op", x.t(), 1.0)  # another shape
    check("op", x.to(torch.bfloat16), 1.0)  # another dtype
    check("op", x, 2.0)  # another scalar
    check("other", x, 1.0)  # another op name
    assert len(calls) == 5


def test_memoized_check_raises_on_every_bad_call_and_tells_values_by_type() -> None:
    check, calls = _counting()
    bad = torch.ones(3, dtype=torch.int64)
    for _ in range(3):
        with pytest.raises(OpInputError, match="dtype int64"):
            check("op", bad, 1.0)
    assert len(calls) == 3  # failures are never remembered
    check("op", torch.randn(2), 1)  # the int 1 passes
    with pytest.raises(OpInputError, match="eps=True"):
        check("op", torch.randn(2), True)  # equal and hash-equal to 1, but a bool: checked, and refused


def test_memoized_check_without_a_hashable_key_always_checks() -> None:
    check, calls = _counting()
    x = torch.randn(2)
    for _ in range(2):
        with pytest.raises(OpInputError, match="eps="):
            check("op", x, [1.0])  # unhashable: checked each time
    assert len(calls) == 2


def test_memoized_check_is_bounded() -> None:
    check, calls = _counting()
    x = torch.randn(2)
    for i in range(v.MEMO_SIZE + 10):
        check("op", x, float(i))
    check("op", x, float(v.MEMO_SIZE + 5))  # not remembered: the memo was full
    check("op", x, 0.0)  # remembered
    assert len(calls) == v.MEMO_SIZE + 11


def test_family_checks_are_memoized_and_still_refuse() -> None:
    """The memo in front of real family checks: a good call, then bad metadata, still raises."""
    x, w = torch.randn(4, 8), torch.randn(8)
    check_forward("layer_norm", x, w, None, 1e-5)
    check_forward("layer_norm", x, w, None, 1e-5)
    with pytest.raises(OpInputError, match="weight has shape \\[7\\]"):
        check_forward("layer_norm", x, torch.randn(7), None, 1e-5)
    q, k, t = torch.randn(2, 4, 8), torch.randn(1, 4, 8), torch.randn(4, 4)
    check_qk("rope_qk", q, k, t, t)
    with pytest.raises(OpInputError, match="k has shape \\[1, 4, 6\\]"):
        check_qk("rope_qk", q, torch.randn(1, 4, 6), t, t)


@pytest.mark.parametrize("which", ["weight", "hidden"])
def test_a_meta_tensor_among_real_ones_says_it_has_no_data(which: str) -> None:
    """Not "move weight with .to('cpu')", which cannot be done to a meta tensor (an offloaded weight)."""
    import anyaccel.ops.nn as nn

    t = {"hidden": torch.randn(4, 8), "weight": torch.randn(10, 8)}
    t[which] = t[which].to("meta")
    with pytest.raises(OpInputError, match=f"fused_linear_cross_entropy: {which} is a meta tensor .* accelerate"):
        nn.fused_linear_cross_entropy(t["hidden"], t["weight"], torch.tensor([1, 2, 3, 4]), impl="torch")
