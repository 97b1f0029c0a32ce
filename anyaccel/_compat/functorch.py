"""Whether a functorch transform (``torch.func.grad``, ``vmap``, ``jvp`` ...) is active.

Private name used (tested on torch 2.10.0, 2.13.0 and 2.15.0): ``torch._C._are_functorch_transforms_active``,
the query torch's own ``autograd.Function.apply`` makes. torch has no public one.

Used by the eager model-op Functions (`anyaccel.ops.nn.define`): a ``torch.autograd.Function`` whose
``forward`` takes ``ctx`` (torch's combined form, public) skips the per-call signature bind that torch's
``apply`` does for the ``setup_context`` form, but functorch transforms accept only the ``setup_context``
form. So the combined form is used only while no transform is active.

Fallback: where the name is missing or not callable, `transforms_active` answers True (every call then takes
the ``setup_context`` form: correct, only without the saving).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["transforms_active"]


def _query() -> Callable[[], bool] | None:
    query = getattr(torch._C, "_are_functorch_transforms_active", None)
    return query if callable(query) else None


def transforms_active() -> bool:
    """Whether a functorch transform is active on this thread; True where this torch does not let us tell."""
    query = _query()
    return True if query is None else bool(query())
