"""Resolve a torch device module (``torch.cuda``, ``torch.xpu``, ``torch.npu``...) and its functions.

The one place where anyaccel finds the runtime functions of a device type. ``torch.get_device_module``
(torch >= 2.3) is the general path; on older builds the module is the attribute of ``torch`` with the
device type's name, which is what ``torch.get_device_module`` itself returns. A missing function becomes a
typed [`UnsupportedOperationError`][anyaccel.accelerator.errors.UnsupportedOperationError] naming the member and the
function.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from anyaccel.accelerator.errors import UnsupportedOperationError

__all__ = ["device_module", "module_function", "optional_attribute"]


def device_module(device_type: str) -> ModuleType | None:
    """Return torch's module for ``device_type`` (``"cuda"`` -> ``torch.cuda``), or None if there is none.

    Args:
        device_type: a torch device type string.

    Side effects: none; the module is looked up, not initialised.
    """
    module = getattr(torch, device_type, None)
    if module is not None:
        return module
    get = getattr(torch, "get_device_module", None)
    if get is None:  # torch < 2.3
        return None
    try:
        return get(device_type)
    except (RuntimeError, ValueError, AttributeError):
        return None


def optional_attribute(device_type: str, name: str) -> Any:
    """Return ``torch.<device_type>.<name>`` or None when the module or the attribute is absent."""
    module = device_module(device_type)
    return getattr(module, name, None) if module is not None else None


def module_function(device_type: str, name: str, accelerator: str, member: str) -> Callable[..., Any]:
    """Return the callable ``torch.<device_type>.<name>``.

    Args:
        device_type: a torch device type string, e.g. ``"xpu"``.
        name: the function's name in that module, e.g. ``"memory_stats"``.
        accelerator: the calling accelerator's name, for the error message.
        member: the interface member being served, for the error message.

    Raises:
        UnsupportedOperationError: the module or the function does not exist in this torch build.
    """
    function = optional_attribute(device_type, name)
    if function is None:
        raise UnsupportedOperationError(accelerator, member, f"torch.{device_type}.{name}")
    return function
