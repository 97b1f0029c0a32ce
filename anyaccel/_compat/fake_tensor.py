"""Recognising fake tensors (``torch._subclasses``), which carry metadata but no storage.

Private name used (tested on torch 2.10.0, 2.13.0 and 2.15.0): ``torch._subclasses.fake_tensor.is_fake``
(which also sees through functional and functorch wrappers). Fallback where it is missing: a tensor whose type,
or a base of it, is named ``FakeTensor`` is fake.
"""

from __future__ import annotations

from typing import Any

__all__ = ["is_fake"]


def is_fake(t: Any) -> bool:
    """Whether ``t`` is a fake tensor (or wraps one); never raises."""
    try:
        from torch._subclasses.fake_tensor import is_fake as torch_is_fake
    except ImportError:
        return any(c.__name__ == "FakeTensor" for c in type(t).__mro__)
    return bool(torch_is_fake(t))
