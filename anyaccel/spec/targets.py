"""``"module:attribute"`` targets: how specs name code without importing it."""

from __future__ import annotations

import importlib
from typing import Any


def resolve(target: str) -> Any:
    """Import ``"package.module:attribute"`` and return the attribute.

    Raises:
        ImportError: the module is missing; AttributeError: the attribute is.
    """
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)

