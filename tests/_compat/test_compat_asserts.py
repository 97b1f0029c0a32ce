"""``anyaccel._compat.asserts``: torch's device-side assertion, and the fallback without it."""

from __future__ import annotations

import pytest
import torch

from anyaccel._compat import asserts


def test_a_true_condition_passes_and_a_false_one_is_reported() -> None:
    assert asserts.assert_async(torch.tensor(True), "never shown")
    # on the CPU torch's op checks at once; on a GPU the same call asserts on the device
    with pytest.raises(RuntimeError):
        asserts.assert_async(torch.tensor(False), "target out of range")


def test_without_the_op_the_caller_is_told_to_check_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch, "_assert_async")
    assert asserts.assert_async(torch.tensor(False), "not queued") is False
