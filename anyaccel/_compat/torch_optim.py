"""torch.optim internals: the ``load_state_dict`` hook tables of an optimizer.

Private names used (tested on torch 2.10.0, 2.13.0 and 2.15.0): ``Optimizer._optimizer_load_state_dict_pre_hooks``
and ``..._post_hooks``, which ``register_load_state_dict_pre_hook``/``..._post_hook`` fill and torch's own
``load_state_dict`` runs. anyaccel's ``load_state_dict`` validates the whole dict before changing anything and
keeps fp32 state of 16-bit parameters (torch's casts state to the parameter dtype), so it runs the hooks
itself. Fallback where the tables are missing or not mappings: no hooks (a torch without them has no way to
register any).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["load_state_dict_hooks"]


def load_state_dict_hooks(optimizer: torch.optim.Optimizer) -> tuple[list[Any], list[Any]]:
    """The ``load_state_dict`` pre- and post-hooks registered on ``optimizer`` (by
    ``register_load_state_dict_pre_hook``/``..._post_hook``), as lists; empty where torch keeps none."""
    pre = getattr(optimizer, "_optimizer_load_state_dict_pre_hooks", None)
    post = getattr(optimizer, "_optimizer_load_state_dict_post_hooks", None)
    return (list(pre.values()) if isinstance(pre, Mapping) else [],
            list(post.values()) if isinstance(post, Mapping) else [])
