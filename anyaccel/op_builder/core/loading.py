"""The load path's process-wide state besides the loaded ops: log-once records and the prebuilt root.

The loaded ops and failed builds are in the process's one table,
[`LOADED_OPS`][anyaccel.op_builder.core.loaded_ops.LOADED_OPS].
"""

from __future__ import annotations

from pathlib import Path

from anyaccel import settings
from anyaccel.op_builder.core import integrity
from anyaccel.op_builder.core.hooks import PACKAGE_DIR

PREBUILT_ENV = settings.PREBUILT_DIR.name
LIBRARY_NAME = integrity.LIBRARY_NAME

# Log once per process: the op names whose prebuilt artifact was not used, the (op, key, reason) quarantines.
_WARNED_PREBUILT: set[str] = set()
_LOGGED_QUARANTINE: set[tuple[str, str, str]] = set()


def prebuilt_root() -> Path:
    """Where AOT-built ops are looked up: ``ANYACCEL_PREBUILT_DIR``, else ``anyaccel/_prebuilt``."""
    return settings.PREBUILT_DIR.get() or PACKAGE_DIR / "_prebuilt"
