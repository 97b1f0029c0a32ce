"""Whether a ``torch.nn.Module`` call would run forward hooks.

Private names used (tested on torch 2.10.0, 2.13.0 and 2.15.0): ``Module._forward_hooks`` and
``Module._forward_pre_hooks`` (the per-module hook dictionaries) and ``torch.nn.modules.module``'s
``_global_forward_hooks`` and ``_global_forward_pre_hooks``. torch has no public query for registered hooks.

Used where anyaccel replaces a module's call by a fused function (``patch``'s MLP calls ``down_proj``'s weight
directly): a module with hooks must still be called, so that the hooks run.

Fallback: where any of these names is missing or not a mapping, `has_forward_hooks` answers True (the
caller then calls the module as is: correct, only without the fusion).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["has_forward_hooks"]


def has_forward_hooks(module: torch.nn.Module) -> bool:
    """Whether calling ``module`` would run a forward or forward-pre hook (its own or a global one); True
    where this torch does not let us tell."""
    from torch.nn.modules import module as module_mod

    tables = (getattr(module, "_forward_hooks", None), getattr(module, "_forward_pre_hooks", None),
              getattr(module_mod, "_global_forward_hooks", None),
              getattr(module_mod, "_global_forward_pre_hooks", None))
    if not all(isinstance(t, Mapping) for t in tables):
        return True
    return any(len(t) for t in tables)  # type: ignore[arg-type]
