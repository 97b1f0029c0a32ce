"""The per-shape policy of the aten-override mode: for each call, anyaccel's kernel or aten's.

A call is described by a key ``"<aten op>|<dtype>|<rows bucket>|<row length>"`` (rows rounded up to a
power of two). A table maps keys to the measured speed-up of anyaccel's kernel over aten's (``aten
time / anyaccel time``, as `anyaccel.ops.tune` measures it through the override itself: device time from graph
replays where the accelerator has graphs, else the wall clock); a measured call goes to anyaccel's kernel only
when its key was measured **faster** (``> 1 + margin``).

Where the tables come from, in order (each later one refines the earlier):

1. **The default policy shipped in the package** (``default_policy.json`` beside this module, schema in
   `validate_default`): one entry per device key ``"<device name>|<major>.<minor>"`` (compute
   capability; ``"cpu"`` for the CPU), and an ``unknown_device`` entry for every other device. An entry holds
   measured keys (``speedups``, ``fallbacks``, as a tuning table) and a **size rule** (``rule``: aten op, or
   ``"<aten op>|<dtype>"`` for one dtype, -> the least ``rows bucket x row length`` sent to anyaccel when the
   key was not measured; the dtype's rule comes first). The H100 and H200 entries are measured on device
   time (``anyaccel tune --emit-default-policy PATH``, ``docs/nn_ops.md``); the ``unknown_device`` entry is a
   conservative size rule.
2. **The device's tuning table** (``<cache>/tune/<device name>.json``, written by
   ``python -m anyaccel.tune_command``): its keys override the default entry's.

A replaced op's Python kernel costs host time on every eager call, also when it hands the call to aten
(about 10 us). Kernels are judged on device time (a step under ``torch.compile`` or CUDA graphs pays nothing
else, and an eager step large enough to keep the device busy hides the host's work behind it), so that host
cost is reported by the benchmark, not charged here. Under the tuned policy an op with measured keys is
registered only if they show a win for it and, at every measured key of that op, the call as the mode would
route it (anyaccel's kernel where it wins, else aten through the mode's fallback, both measured by the
tuning) keeps at least `FLOOR` of aten's speed; an op with no measured key is registered when the size rule
names it.

Accuracy routes are not speed routes: the tables only decide speed. Calls that need anyaccel's fp32
accumulation (16-bit ``nll_loss`` means and sums, 16-bit cross-entropy with label smoothing or probability
targets: `anyaccel.ops.override.aten_ops.AtenOverride.accurate`) go to anyaccel in every mode but ``"never"``
and in every entry, measured ones included (`Policy.accuracy_routes`).

``mode="always"`` skips the tables (every eligible call goes to anyaccel: for tests and for measuring);
``mode="never"`` sends every call to aten (the registrations stay: for measuring the override's own
overhead).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from importlib import resources
from pathlib import Path
from typing import Any

from anyaccel import settings

logger = logging.getLogger(__name__)

#: Policy modes.
MODES = ("tuned", "always", "never")
#: Required speed-up over aten for a tuned key to go to anyaccel (noise margin).
MARGIN = 0.03
#: The slowest a registered op may make any measured call, relative to aten.
FLOOR = 0.95
ENV_MODE = settings.OVERRIDE_POLICY.name
#: The version of the default-policy file's schema (`validate_default`).
DEFAULT_SCHEMA = 1
#: The default-policy file's name in this package.
DEFAULT_FILE = "default_policy.json"
#: The entry of the default policy that serves devices without an entry of their own.
UNKNOWN_DEVICE = "unknown_device"


class PolicyFileError(ValueError):
    """A default-policy file does not follow the schema (`validate_default` names the field)."""


def bucket(rows: int) -> int:
    """``rows`` rounded up to a power of two (1 for 0 or 1)."""
    return 1 if rows <= 1 else 1 << (int(rows) - 1).bit_length()


def key(op: str, dtype: object, rows: int, cols: int) -> str:
    """The table key of a call of aten ``op`` on ``rows`` rows of ``cols`` elements of ``dtype``."""
    return f"{op}|{str(dtype).removeprefix('torch.')}|{bucket(rows)}|{int(cols)}"


def key_elements(k: str) -> int:
    """``rows bucket x row length`` of key ``k`` (what a size rule compares)."""
    parts = k.split("|")
    return int(parts[2]) * int(parts[3])


def device_key(device_name: str, capability: tuple[int, int] | None) -> str:
    """The default policy's key of a device: ``"<name>|<major>.<minor>"``, or the name alone without a compute
    capability (the CPU: ``"cpu"``)."""
    return device_name if capability is None else f"{device_name}|{capability[0]}.{capability[1]}"


def table_path(device_name: str, root: Path | None = None) -> Path:
    """``<cache root>/tune/<device name, sanitised>.json``."""
    from anyaccel.op_builder.core.cache import default_cache_root

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", device_name).strip("_") or "device"
    return (root or default_cache_root()) / "tune" / f"{safe}.json"


def _entry_error(where: str, entry: object) -> str | None:
    if not isinstance(entry, dict):
        return f"{where} is a {type(entry).__name__}; accepted: an object"
    unknown = set(entry) - {"source", "rule", "speedups", "fallbacks"}
    if unknown:
        return f"{where} has unknown fields {sorted(unknown)}; accepted: source, rule, speedups, fallbacks"
    if not isinstance(entry.get("source", ""), str):
        return f"{where}.source must be a string"
    rule = entry.get("rule", {})
    if not isinstance(rule, dict):
        return f"{where}.rule must be an object (aten op -> least elements)"
    for op, n in rule.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            return f"{where}.rule[{op!r}] = {n!r}; accepted: an integer >= 1 (rows bucket x row length)"
    for field in ("speedups", "fallbacks"):
        table = entry.get(field, {})
        if not isinstance(table, dict):
            return f"{where}.{field} must be an object (policy key -> ratio)"
        for k, v in table.items():
            parts = str(k).split("|")
            if len(parts) != 4 or not parts[2].isdigit() or not parts[3].isdigit():
                return (f"{where}.{field} key {k!r} is not a policy key; accepted: "
                        "'<aten op>|<dtype>|<rows bucket>|<row length>'")
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                return f"{where}.{field}[{k!r}] = {v!r}; accepted: a number > 0 (aten time / other time)"
    return None


def validate_default(data: object) -> dict[str, Any]:
    """Check a parsed default-policy file and return it.

    Schema: ``{"schema": 1, "about": str, "devices": {device key: entry}, "unknown_device": entry}``, an
    entry being ``{"source": str, "rule": {aten op or "<aten op>|<dtype>": int >= 1}, "speedups": {policy
    key: float > 0}, "fallbacks": {policy key: float > 0}}`` (every entry field optional; device keys as
    `device_key` writes them).

    Raises:
        PolicyFileError: naming the first field that breaks the schema and what it accepts.
    """
    if not isinstance(data, dict):
        raise PolicyFileError(f"default policy: the file holds a {type(data).__name__}; accepted: a JSON object")
    if data.get("schema") != DEFAULT_SCHEMA:
        raise PolicyFileError(f"default policy: schema={data.get('schema')!r}; accepted: {DEFAULT_SCHEMA}")
    unknown = set(data) - {"schema", "about", "devices", UNKNOWN_DEVICE}
    if unknown:
        raise PolicyFileError(f"default policy: unknown top-level fields {sorted(unknown)}; accepted: schema, "
                              f"about, devices, {UNKNOWN_DEVICE}")
    devices = data.get("devices", {})
    if not isinstance(devices, dict):
        raise PolicyFileError("default policy: devices must be an object (device key -> entry)")
    for name, entry in [*devices.items(), (UNKNOWN_DEVICE, data.get(UNKNOWN_DEVICE, {}))]:
        err = _entry_error(f"default policy: entry {name!r}", entry)
        if err:
            raise PolicyFileError(err)
    return data


def read_default(path: Path | None = None) -> dict[str, Any]:
    """The default policy (the packaged file, or ``path``), validated.

    Raises:
        PolicyFileError: the file is unreadable JSON or breaks the schema.
        OSError: the file cannot be read.
    """
    text = path.read_text() if path is not None else \
        resources.files("anyaccel.ops.override").joinpath(DEFAULT_FILE).read_text()
    try:
        return validate_default(json.loads(text))
    except json.JSONDecodeError as exc:
        raise PolicyFileError(f"default policy {path or DEFAULT_FILE}: not JSON ({exc})") from None


def default_entry(dkey: str, data: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """The default policy's entry for device key ``dkey``: ``(which, entry)`` where ``which`` is ``dkey`` or
    `UNKNOWN_DEVICE`."""
    data = read_default() if data is None else data
    devices = data.get("devices", {})
    if dkey in devices:
        return dkey, devices[dkey]
    return UNKNOWN_DEVICE, data.get(UNKNOWN_DEVICE, {})


class Policy:
    """A loaded policy.

    Args:
        mode: one of `MODES` (``ANYACCEL_OVERRIDE_POLICY`` overrides the default ``"tuned"``).
        speedups: key -> measured speed-up of anyaccel over aten.
        fallbacks: key -> measured speed of aten through the mode's fallback, relative to aten.
        rule: aten op (or ``"<aten op>|<dtype>"``) -> the least ``rows bucket x row length`` sent to anyaccel at
            an unmeasured key.
        source: where the tables came from (logged by the mode).

    Raises:
        ValueError: ``mode`` is not one of `MODES`.
    """

    def __init__(self, mode: str = "tuned", speedups: dict[str, float] | None = None,
                 fallbacks: dict[str, float] | None = None, rule: dict[str, int] | None = None,
                 source: str = "given tables") -> None:
        if mode not in MODES:
            raise ValueError(f"override policy mode={mode!r} is not one of {', '.join(MODES)}")
        self.mode = mode
        self.speedups = dict(speedups or {})
        self.fallbacks = dict(fallbacks or {})
        self.rule = dict(rule or {})
        self.source = source
        self._lock = threading.Lock()

    @property
    def accuracy_routes(self) -> bool:
        """Whether calls that need anyaccel's fp32 accumulation go to anyaccel whatever the speed tables say (every
        mode but ``"never"``, which measures aten through the mode)."""
        return self.mode != "never"

    def _measured(self, op: str) -> list[str]:
        return [k for k in self.speedups if k.split("|", 1)[0] == op]

    def registrable(self, op: str) -> bool:
        """Whether the mode should replace aten ``op`` at all (see the module docstring)."""
        if self.mode != "tuned":
            return True
        keys = self._measured(op)
        if not keys:
            return self._has_rule(op)
        if not any(self._wins(k) for k in keys):
            return False
        effective = [self.speedups[k] if self._wins(k) else self.fallbacks.get(k, 1.0) for k in keys]
        return min(effective) >= FLOOR

    def why(self, op: str) -> str:
        """Why `registrable` decides as it does for ``op`` (for the mode's log)."""
        if self.mode != "tuned":
            return f"policy {self.mode!r}"
        keys = self._measured(op)
        if not keys:
            rules = {r: n for r, n in self.rule.items() if r == op or r.startswith(f"{op}|")}
            return (f"size rule: {', '.join(f'{r} >= {n} elements' for r, n in sorted(rules.items()))}" if rules
                    else "no measured key and no size rule")
        wins = sum(self._wins(k) for k in keys)
        if not wins:
            return f"none of its {len(keys)} measured keys wins"
        worst = min(self.speedups[k] if self._wins(k) else self.fallbacks.get(k, 1.0) for k in keys)
        return f"{wins} of {len(keys)} measured keys win; slowest call as routed {worst:.2f}x aten (floor {FLOOR})"

    def _has_rule(self, op: str) -> bool:
        return any(r == op or r.startswith(f"{op}|") for r in self.rule)

    def _wins(self, k: str) -> bool:
        return self.speedups.get(k, 0.0) > 1.0 + MARGIN

    def use_ours(self, k: str) -> bool:
        """Whether the call with key ``k`` goes to anyaccel's kernel (a measured key: measured faster; else the
        size rule of its op, when there is one)."""
        if self.mode != "tuned":
            return self.mode == "always"
        if k in self.speedups:
            return self._wins(k)
        op, dtype = k.split("|", 2)[:2]
        least = self.rule.get(f"{op}|{dtype}", self.rule.get(op))
        return least is not None and key_elements(k) >= least

    def record(self, k: str, speedup: float, fallback: float | None = None) -> None:
        """Store a measured speed-up of anyaccel's kernel (and, when given, the speed of the mode's aten
        fallback relative to aten without the mode) for key ``k`` (thread-safe)."""
        with self._lock:
            self.speedups[k] = float(speedup)
            if fallback is not None:
                self.fallbacks[k] = float(fallback)

    @classmethod
    def load(cls, device_name: str, mode: str | None = None, root: Path | None = None,
             capability: tuple[int, int] | None = None, default: bool = True, table: bool = True) -> Policy:
        """The policy for ``device_name``: the default policy's entry for its device key (with ``default``),
        overlaid with its tuning table when there is one.

        Args:
            device_name: the device's name (``torch.cuda.get_device_name()``; ``"cpu"``).
            mode: the policy mode (default: ``ANYACCEL_OVERRIDE_POLICY`` or ``"tuned"``).
            root: the cache root holding ``tune/`` (default: anyaccel's).
            capability: the compute capability (major, minor), part of the default policy's device key.
            default: start from the shipped default policy (False: the tuning table alone, as the tuner reads
                it).
            table: overlay the device's tuning table (False: the default policy alone, as the benchmark's
                default-policy check measures it).

        An unreadable tuning table or default policy is logged as a warning and skipped.
        """
        mode = mode or settings.OVERRIDE_POLICY.get() or "tuned"
        speedups: dict[str, float] = {}
        fallbacks: dict[str, float] = {}
        rule: dict[str, int] = {}
        sources = []
        if default:
            dkey = device_key(device_name, capability)
            try:
                which, entry = default_entry(dkey)
            except (OSError, PolicyFileError) as exc:
                logger.warning("override: the packaged default policy is unusable (%s); ignored", exc)
            else:
                speedups.update({str(k): float(v) for k, v in entry.get("speedups", {}).items()})
                fallbacks.update({str(k): float(v) for k, v in entry.get("fallbacks", {}).items()})
                rule.update({str(k): int(v) for k, v in entry.get("rule", {}).items()})
                label = f"entry {which!r}" if which != UNKNOWN_DEVICE else \
                    f"{UNKNOWN_DEVICE!r} size rule (no entry for {dkey!r})"
                sources.append(f"default policy {DEFAULT_FILE} {label}")
        path = table_path(device_name, root)
        if table and path.is_file():
            try:
                data = json.loads(path.read_text())
                tuned_s = {str(k): float(v) for k, v in data.get("speedups", {}).items()}
                tuned_f = {str(k): float(v) for k, v in data.get("fallbacks", {}).items()}
            except (OSError, ValueError, AttributeError) as exc:
                logger.warning("override policy table %s is unreadable (%s); ignored", path, exc)
            else:
                speedups.update(tuned_s)
                fallbacks.update(tuned_f)
                sources.append(f"tuning table {path} ({len(tuned_s)} keys)")
        return cls(mode, speedups, fallbacks, rule, " + ".join(sources) or "no table")

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


def derive_rule(speedups: dict[str, float], fallbacks: dict[str, float]) -> dict[str, int]:
    """Per aten op, the least element count (``rows bucket x row length``) from which every measured key of the
    op, of every dtype, wins (speed-up above ``1 + MARGIN``), for the unmeasured keys of an emitted default
    entry; ops without such a count (the largest measured key loses) get none.

    ``fallbacks`` is accepted for symmetry with the tables and not used: the rule only widens routing to
    anyaccel, above sizes measured to win.
    """
    del fallbacks
    by_op: dict[str, list[tuple[int, bool]]] = {}
    for k, s in speedups.items():
        by_op.setdefault(k.split("|", 1)[0], []).append((key_elements(k), s > 1.0 + MARGIN))
    rule = {}
    for op, rows in by_op.items():
        rows.sort()
        least = None
        for n, wins in reversed(rows):
            if not wins:
                break
            least = n
        # the count must exceed every losing key's size, or an unmeasured call of a losing size would go to us
        if least is not None and all(wins or n < least for n, wins in rows):
            rule[op] = least
    return rule


def emit_default(path: Path, dkey: str, policy: Policy, source: str) -> Path:
    """Write (or update) the default-policy file ``path`` with the entry of device key ``dkey`` from the
    measured ``policy``: its speed-ups and fallbacks, and the size rule `derive_rule` derives from them.
    The other entries of an existing file are kept; a new file starts from the packaged one's
    ``unknown_device`` entry and ``about`` text.

    Returns:
        ``path``.

    Raises:
        PolicyFileError: an existing ``path`` breaks the schema (it is not overwritten).

    Side effects: writes ``path`` (atomically, through a temporary file beside it).
    """
    data = read_default(path) if path.is_file() else dict(read_default(), devices={})
    entry = {"source": source, "rule": derive_rule(policy.speedups, policy.fallbacks),
             "speedups": dict(sorted(policy.speedups.items())), "fallbacks": dict(sorted(policy.fallbacks.items()))}
    data["devices"] = dict(sorted({**data.get("devices", {}), dkey: entry}.items()))
    validate_default(data)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
    return path
