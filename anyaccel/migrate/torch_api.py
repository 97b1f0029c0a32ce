"""Which ``torch.accelerator`` members the installed torch has, found by looking, not by version strings.

``torch.accelerator`` exists in every torch anyaccel supports, but its members arrived over several
releases (``current_device_index``, ``set_device_index``, the ``device_index`` context manager...). A rewrite
that targets one of them must only do so where it exists; everywhere else it targets ``get_accelerator()``.

Only what ``get_accelerator()`` lacks is targeted: the current-device context (``device_index``). The other
members (``current_device_index``, ``set_device_index``, ``device_count``) have accelerator equivalents that
also work on the CPU accelerator, where ``torch.accelerator`` raises "Cannot access accelerator device when
none is available", so they stay ``get_accelerator()`` calls.
"""

from __future__ import annotations

import functools
import importlib
import logging

from anyaccel.migrate import rules

logger = logging.getLogger(__name__)

__all__ = ["torch_accelerator_members"]


@functools.cache
def torch_accelerator_members() -> frozenset[str]:
    """The members of ``rules.TORCH_ACCELERATOR_CONTEXTS`` that the installed ``torch.accelerator`` has.

    Returns:
        Their names (e.g. ``{"device_index"}``); empty when torch or ``torch.accelerator`` cannot be imported.

    Side effects:
        Imports torch on the first call (the result is cached for the process).
    """
    try:
        module = importlib.import_module("torch.accelerator")
    except ImportError as exc:
        logger.debug("torch.accelerator is not importable (%s); rewrites target get_accelerator()", exc)
        return frozenset()
    return frozenset(m for m in rules.TORCH_ACCELERATOR_CONTEXTS.values() if callable(getattr(module, m, None)))
