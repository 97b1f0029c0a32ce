"""``anyaccel._compat.foreach``: each list op equals its per-tensor loop (the fallback) and a float64 reference."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from anyaccel._compat import foreach


def _lists(seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    make = lambda: [torch.rand(n, generator=gen, dtype=torch.float64) + 0.5 for n in (3, 17)]  # noqa: E731
    return make(), make(), make()


def _apply(name: str, xs: list[torch.Tensor], ys: list[torch.Tensor], zs: list[torch.Tensor]) -> list[torch.Tensor]:
    calls: dict[str, Callable[[], object]] = {
        "mul_": lambda: foreach.mul_(xs, 0.5), "add": lambda: foreach.add(xs, ys, alpha=2.0),
        "add_": lambda: foreach.add_(xs, ys, alpha=-1.0), "add_scalar": lambda: foreach.add_(xs, 0.25),
        "lerp": lambda: foreach.lerp(xs, ys, 0.3), "lerp_": lambda: foreach.lerp_(xs, ys, 0.3),
        "addcmul_": lambda: foreach.addcmul_(xs, ys, zs, value=0.1),
        "addcdiv_": lambda: foreach.addcdiv_(xs, ys, zs, value=0.1),
        "sqrt": lambda: foreach.sqrt(xs), "sign": lambda: foreach.sign([x - 1.0 for x in xs]),
    }
    out = calls[name]()
    return [t.clone() for t in out] if isinstance(out, list) else [x.clone() for x in xs]


NAMES = ["mul_", "add", "add_", "add_scalar", "lerp", "lerp_", "addcmul_", "addcdiv_", "sqrt", "sign"]


@pytest.mark.parametrize("name", NAMES)
def test_private_and_fallback_agree(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    private = _apply(name, *_lists(1))
    for attr in [a for a in dir(torch) if a.startswith("_foreach_")]:
        monkeypatch.delattr(torch, attr)
    fallback = _apply(name, *_lists(1))
    for a, b in zip(private, fallback, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
