"""The cache key of a build and the manifest written beside each artifact.

The key is the SHA-256 of a canonical JSON document of every input that changes the binary (user pain
P2): source and header contents (the generated schema header included), flags, torch's stable-ABI target
(not the torch version: the binaries use only the stable ABI, P19), platform, compiler identity, CPU ISA
level, GPU arch list / toolkit (for GPU builders) and our package version. The manifest stores that
document, so a load can check that the artifact it is about to trust was built from the same inputs, and
``anyaccel cache ls`` can say why an entry is stale.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

MANIFEST_NAME = "manifest.json"
SCHEMA = 1


def hash_files(paths: Iterable[Path], root: Path) -> dict[str, str]:
    """SHA-256 hex digests of files, keyed by their path relative to ``root`` (or absolute outside it)."""
    out: dict[str, str] = {}
    for path in sorted(set(paths)):
        try:
            name = str(path.relative_to(root))
        except ValueError:
            name = str(path)
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def hash_text(text: str) -> str:
    """SHA-256 hex digest of ``text`` (UTF-8), e.g. of a generated header."""
    return hashlib.sha256(text.encode()).hexdigest()


#: Inputs recorded in a manifest but not hashed into the key: the torch that compiled a stable-ABI build does
#: not change the contract (the ABI target does, and it is hashed), so a torch upgrade keeps every key.
NOT_IN_KEY = ("built_with_torch",)


def compute_key(inputs: Mapping[str, Any]) -> str:
    """The cache key: SHA-256 hex of ``inputs`` (less :data:`NOT_IN_KEY`) as canonical JSON (sorted keys, no
    whitespace)."""
    hashed = {k: v for k, v in inputs.items() if k not in NOT_IN_KEY}
    blob = json.dumps(hashed, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def write_manifest(directory: Path, manifest: Mapping[str, Any]) -> None:
    """Write ``manifest.json`` into ``directory`` (fully written and fsynced before it is renamed in place)."""
    tmp = directory / (MANIFEST_NAME + ".part")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"schema": SCHEMA, **manifest}, fh, indent=1, sort_keys=True, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, directory / MANIFEST_NAME)


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest of an entry, or None when it is missing, unreadable or of another schema."""
    try:
        data = json.loads((directory / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    return data


def mismatches(recorded: Mapping[str, Any], expected: Mapping[str, Any], ignore: Iterable[str] = ()) -> list[str]:
    """The top-level input fields whose recorded value differs from the expected one (``ignore`` skipped).

    Values are compared through their canonical JSON form, so tuples and lists compare equal.
    """
    skip = set(ignore)
    canon = lambda v: json.dumps(v, sort_keys=True, default=str)  # noqa: E731
    fields = (set(recorded) | set(expected)) - skip
    return sorted(f for f in fields if canon(recorded.get(f)) != canon(expected.get(f)))
