"""``anyaccel._compat.functorch.transforms_active``: the private query, and the fallback without it."""

from __future__ import annotations

import pytest
import torch

from anyaccel._compat import functorch


def test_sees_grad_and_vmap() -> None:
    assert not functorch.transforms_active()
    seen: list[bool] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        seen.append(functorch.transforms_active())
        return (x * x).sum()

    torch.func.grad(f)(torch.ones(3))
    torch.func.vmap(f)(torch.ones(2, 3))
    assert seen == [True, True]
    assert not functorch.transforms_active()


def test_fallback_answers_true_where_torch_lacks_the_query(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch._C, "_are_functorch_transforms_active")
    assert functorch.transforms_active()
