"""DeepSpeed's module path for selection: ``<package>.accelerator.real_accelerator``.

Plug-ins written for DeepSpeed import ``get_accelerator``/``set_accelerator`` from here (some install
themselves at import time with ``real_accelerator.set_accelerator(MyAccelerator())``); this module gives
them the same functions as ``anyaccel.accelerator``, so there is one selection state, not two.
"""

from __future__ import annotations

from anyaccel.accelerator.registry import _BUILTINS
from anyaccel.accelerator.selection import get_accelerator, set_accelerator

__all__ = ["get_accelerator", "set_accelerator", "SUPPORTED_ACCELERATOR_LIST", "is_current_accelerator_supported"]

#: Names of the built-in accelerators (DeepSpeed exposes the same constant).
SUPPORTED_ACCELERATOR_LIST = list(_BUILTINS)


def is_current_accelerator_supported() -> bool:
    """True when the chosen accelerator is a built-in one (DeepSpeed's helper of the same name)."""
    return get_accelerator()._name in SUPPORTED_ACCELERATOR_LIST
