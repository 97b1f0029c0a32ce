"""``anyaccel._compat.modules.has_forward_hooks``: the private hook tables, and the fallback without them."""

from __future__ import annotations

import pytest
import torch

from anyaccel._compat import modules


def test_sees_own_and_global_hooks() -> None:
    lin = torch.nn.Linear(2, 2)
    assert not modules.has_forward_hooks(lin)
    handle = lin.register_forward_hook(lambda *a: None)
    assert modules.has_forward_hooks(lin)
    handle.remove()
    handle = lin.register_forward_pre_hook(lambda *a: None)
    assert modules.has_forward_hooks(lin)
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:
        assert modules.has_forward_hooks(lin)
    finally:
        handle.remove()
    assert not modules.has_forward_hooks(lin)


def test_fallback_answers_true_where_torch_lacks_the_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch.nn.modules.module, "_global_forward_hooks")
    assert modules.has_forward_hooks(torch.nn.Linear(2, 2))
