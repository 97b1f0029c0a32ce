"""The load path's process-wide state: the in-process table of loaded ops, failed builds, and the prebuilt root.

[`OpBuilder.load`][anyaccel.op_builder.core.builder.OpBuilder.load] reads and fills these tables; they are
keyed by cache key (the namespace is derived from it, so one key is one library).
"""

from __future__ import annotations

from pathlib import Path

from anyaccel import settings
from anyaccel.op_builder.core import integrity
from anyaccel.op_builder.core.hooks import PACKAGE_DIR
from anyaccel.op_builder.core.module import OpModule
from anyaccel.op_builder.errors import BuildError

PREBUILT_ENV = settings.PREBUILT_DIR.name
LIBRARY_NAME = integrity.LIBRARY_NAME

# Process-wide state, keyed by cache key (the namespace is derived from it, so one key = one library).
_LOADED: dict[str, OpModule] = {}
_FAILED: dict[str, BuildError] = {}
_WARNED_PREBUILT: set[str] = set()
_LOGGED_QUARANTINE: set[tuple[str, str, str]] = set()


def prebuilt_root() -> Path:
    """Where AOT-built ops are looked up: ``ANYACCEL_PREBUILT_DIR``, else ``anyaccel/_prebuilt``."""
    return settings.PREBUILT_DIR.get() or PACKAGE_DIR / "_prebuilt"
