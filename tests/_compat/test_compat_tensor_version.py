"""``anyaccel._compat.tensor_version``: the private counter, and the fallback without it."""

from __future__ import annotations

import torch

from anyaccel._compat import tensor_version


def test_reads_the_counter_that_in_place_changes_bump() -> None:
    t = torch.zeros(3)
    before = tensor_version.versions([t])
    t.add_(1)
    after = tensor_version.versions([t])
    assert before != after and after == tensor_version.versions([t])


def test_without_a_counter_every_comparison_says_changed() -> None:
    class NoCounter:
        pass

    x = NoCounter()
    assert tensor_version.versions([x]) != tensor_version.versions([x])
