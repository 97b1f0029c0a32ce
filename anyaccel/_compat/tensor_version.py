"""A tensor's version counter, read.

Private name used (tested on torch 2.10.0, 2.13.0 and 2.15.0): ``Tensor._version``, the counter autograd bumps
on every in-place change (``torch.autograd.graph.increment_version`` is the public way to bump it; torch has no
public way to read it).

Used by the optimizers' plan cache: a cached bucket re-validates its state tensors when one was changed in
place since it was validated.

Fallback: where a tensor has no integer ``_version``, `versions` gives a fresh ``object()`` for it, equal to
nothing from another call, so every comparison says "changed" and the caller re-validates: correct, only
slower.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["versions"]

def versions(tensors: Iterable[Any]) -> list[Any]:
    """The version counters of ``tensors``, in order (a fresh ``object()``, equal to no other call's, where a
    tensor has none)."""
    out: list[Any] = []
    for t in tensors:
        v = getattr(t, "_version", None)
        out.append(v if isinstance(v, int) else object())
    return out
