"""The per-shape policy of the aten-override mode: for each call, anyaccel's kernel or aten's.

A call is described by a key ``"<aten op>|<dtype>|<rows bucket>|<row length>"`` (rows rounded up to a
power of two). The table maps keys to the measured speed-up of anyaccel's kernel over aten's (``aten
time / anyaccel time``, as measured through the override itself, Python overhead included); a call goes
to anyaccel's kernel only when its key was measured **faster** (``> 1 + margin``). Unmeasured keys go to
aten: switching the mode on never makes a tuned shape slower, and leaves untuned shapes as they were.

The mode pays for itself only where it is registered: a replaced op's Python kernel costs host time on
every call, also when it hands the call to aten (tens of microseconds). So under the tuned policy an op is
registered only if the table shows a win for it and, at every measured key of that op, the call as the mode
would route it (anyaccel's kernel where it wins, else aten through the mode's fallback, both measured by
the tuning) keeps at least `FLOOR` of aten's speed; otherwise the op is left to aten untouched.

Tables are JSON files under the anyaccel cache root, one per device name
(``<cache>/tune/<device name>.json``, written by ``python -m anyaccel.ops.tune``). ``mode="always"``
skips the table (every eligible call goes to anyaccel: for tests and for measuring); ``mode="never"``
sends every call to aten (the registrations stay: for measuring the override's own overhead).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from pathlib import Path

from anyaccel import settings

logger = logging.getLogger(__name__)

#: Policy modes.
MODES = ("tuned", "always", "never")
#: Required speed-up over aten for a tuned key to go to anyaccel (noise margin).
MARGIN = 0.03
#: The slowest a registered op may make any measured call, relative to aten.
FLOOR = 0.95
ENV_MODE = settings.OVERRIDE_POLICY.name


def bucket(rows: int) -> int:
    """``rows`` rounded up to a power of two (1 for 0 or 1)."""
    return 1 if rows <= 1 else 1 << (int(rows) - 1).bit_length()


def key(op: str, dtype: object, rows: int, cols: int) -> str:
    """The table key of a call of aten ``op`` on ``rows`` rows of ``cols`` elements of ``dtype``."""
    return f"{op}|{str(dtype).removeprefix('torch.')}|{bucket(rows)}|{int(cols)}"


def table_path(device_name: str, root: Path | None = None) -> Path:
    """``<cache root>/tune/<device name, sanitised>.json``."""
    from anyaccel.op_builder.core.cache import default_cache_root

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", device_name).strip("_") or "device"
    return (root or default_cache_root()) / "tune" / f"{safe}.json"


class Policy:
    """A loaded policy.

    Args:
        mode: one of `MODES` (``ANYACCEL_OVERRIDE_POLICY`` overrides the default ``"tuned"``).
        speedups: key -> measured speed-up of anyaccel over aten.
    """

    def __init__(self, mode: str = "tuned", speedups: dict[str, float] | None = None,
                 fallbacks: dict[str, float] | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"override policy mode={mode!r} is not one of {', '.join(MODES)}")
        self.mode = mode
        self.speedups = dict(speedups or {})
        self.fallbacks = dict(fallbacks or {})
        self._lock = threading.Lock()

    def registrable(self, op: str) -> bool:
        """Whether the mode should replace aten ``op`` at all (see the module docstring)."""
        if self.mode != "tuned":
            return True
        keys = [k for k in self.speedups if k.split("|", 1)[0] == op]
        if not any(self._wins(k) for k in keys):
            return False
        effective = [self.speedups[k] if self._wins(k) else self.fallbacks.get(k, 1.0) for k in keys]
        return min(effective) >= FLOOR

    def _wins(self, k: str) -> bool:
        return self.speedups.get(k, 0.0) > 1.0 + MARGIN

    def use_ours(self, k: str) -> bool:
        """Whether the call with key ``k`` goes to anyaccel's kernel."""
        if self.mode != "tuned":
            return self.mode == "always"
        return self._wins(k)

    def record(self, k: str, speedup: float, fallback: float | None = None) -> None:
        """Store a measured speed-up of anyaccel's kernel (and, when given, the speed of the mode's aten
        fallback relative to aten without the mode) for key ``k`` (thread-safe)."""
        with self._lock:
            self.speedups[k] = float(speedup)
            if fallback is not None:
                self.fallbacks[k] = float(fallback)

    @classmethod
    def load(cls, device_name: str, mode: str | None = None, root: Path | None = None) -> Policy:
        """The policy for ``device_name`` from its table file (an empty table when there is none or it is
        unreadable, logged)."""
        mode = mode or settings.OVERRIDE_POLICY.get() or "tuned"
        path = table_path(device_name, root)
        speedups: dict[str, float] = {}
        fallbacks: dict[str, float] = {}
        if path.is_file():
            try:
                data = json.loads(path.read_text())
                speedups = {str(k): float(v) for k, v in data.get("speedups", {}).items()}
                fallbacks = {str(k): float(v) for k, v in data.get("fallbacks", {}).items()}
            except (OSError, ValueError, AttributeError) as exc:
                logger.warning("override policy table %s is unreadable (%s); every call goes to aten", path, exc)
        return cls(mode, speedups, fallbacks)

    def save(self, device_name: str, root: Path | None = None) -> Path:
        """Write the table for ``device_name`` atomically (mode 0600 file in a 0700 directory).

        Returns:
            The file's path.
        """
        path = table_path(device_name, root)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"device": device_name, "speedups": dict(sorted(self.speedups.items())),
                       "fallbacks": dict(sorted(self.fallbacks.items()))}, f, indent=1)
        os.replace(tmp, path)
        return path
