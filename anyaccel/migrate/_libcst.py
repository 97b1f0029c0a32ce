"""The one place the migrate package imports libcst, with an actionable error when it is absent."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingLibcstError(ImportError):
    """Raised when ``anyaccel migrate`` runs without libcst installed."""


def require_libcst() -> ModuleType:
    """Import and return ``libcst``.

    Returns:
        The ``libcst`` module.

    Raises:
        MissingLibcstError: libcst is not installed; the message names ``pip install anyaccel[migrate]``.
    """
    try:
        return importlib.import_module("libcst")
    except ImportError as exc:
        raise MissingLibcstError(
            "anyaccel migrate needs libcst (>= 1.0), which is not installed "
            f"({exc}); install it with: pip install 'anyaccel[migrate]'"
        ) from exc
