"""The cache key of a build and the manifest written beside each artifact.

The key is the SHA-256 of a canonical JSON document of every input that changes the binary, so a changed
input never reuses a stale build: source and header contents (the generated schema header included), flags,
torch's stable-ABI target (not the torch version: the binaries use only the stable ABI, so one build serves
every torch from that target on), platform, compiler identity, CPU ISA
level, GPU arch list / toolkit (for GPU builders) and our package version. The manifest stores that
document, so a load can check that the artifact it is about to trust was built from the same inputs, and
``anyaccel cache ls`` can say why an entry is stale. It also records the SHA-256 and size of the library
(``library_sha256``, ``library_size``; schema 2), checked before the library is loaded
(`anyaccel.op_builder.core.integrity`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

MANIFEST_NAME = "manifest.json"
#: 2: the library's content digest is recorded (``library_sha256``, ``library_size``); schema-1 manifests
#: (without it) are not trusted.
SCHEMA = 2
#: Bytes read per call while hashing a library.
CHUNK_BYTES = 1 << 20


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


def fd_digest(fd: int) -> str:
    """SHA-256 hex digest of everything readable from the open file ``fd`` (from offset 0).

    Raises:
        OSError: reading failed.
    """
    digest = hashlib.sha256()
    offset = 0
    while True:
        chunk = os.pread(fd, CHUNK_BYTES, offset)
        if not chunk:
            return digest.hexdigest()
        digest.update(chunk)
        offset += len(chunk)


def file_digest(path: Path) -> str:
    """SHA-256 hex digest of a file's content; a symbolic link is refused (``ELOOP``), never followed.

    Raises:
        OSError: the file cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return fd_digest(fd)
    finally:
        os.close(fd)


#: Inputs recorded in a manifest but not hashed into the key: the torch that compiled a stable-ABI build does
#: not change the contract (the ABI target does, and it is hashed), so a torch upgrade keeps every key.
NOT_IN_KEY = ("built_with_torch",)


def compute_key(inputs: Mapping[str, Any]) -> str:
    """The cache key: SHA-256 hex of ``inputs`` (less `NOT_IN_KEY`) as canonical JSON (sorted keys, no
    whitespace).

    The integrity check recomputes it from a manifest's recorded inputs
    (`anyaccel.op_builder.core.integrity.inspect_entry`), so an edited input never passes, while a field of
    `NOT_IN_KEY` may differ (an artifact built under another torch).
    """
    hashed = {k: v for k, v in inputs.items() if k not in NOT_IN_KEY}
    blob = json.dumps(hashed, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def write_manifest(directory: Path, manifest: Mapping[str, Any], mode: int = 0o600) -> None:
    """Write ``manifest.json`` into ``directory`` with exactly ``mode`` (whatever the umask); it is fully written
    and fsynced under a temporary name, then renamed in place.

    Raises:
        OSError: the directory is not writable, the disk is full, or the temporary name exists as a link.
    """
    tmp = directory / (MANIFEST_NAME + ".part")
    payload = json.dumps({"schema": SCHEMA, **manifest}, indent=1, sort_keys=True, default=str).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / MANIFEST_NAME)


#: The largest manifest read, in bytes: ours are about 2 KB; a bigger file is damaged or planted.
MAX_MANIFEST_BYTES = 1 << 20


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest of an entry, or None when it cannot be trusted as one, for any reason.

    None when the file is missing, a link, unreadable, larger than `MAX_MANIFEST_BYTES`, not UTF-8, not
    JSON, nested too deeply for the parser (``RecursionError``), not an object, of another schema, or when a
    field the loader reads has the wrong type (``key``, ``namespace``, ``library``, ``library_sha256``: strings;
    ``library_size``: an integer; ``inputs``: an object; ``isa``: a string or null). Never raises: a damaged
    manifest is the caller's reason to quarantine the entry.
    """
    try:
        fd = os.open(directory / MANIFEST_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(MAX_MANIFEST_BYTES + 1)
            if len(raw) > MAX_MANIFEST_BYTES:
                return None
            data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError, MemoryError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not _well_typed(data):
        return None
    return data


#: Field -> the types its value may have in a manifest (absent fields are checked by the loader).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "key": (str,), "namespace": (str,), "library": (str,), "library_sha256": (str,), "inputs": (dict,),
    "isa": (str, type(None)),
}


def _well_typed(data: dict[str, Any]) -> bool:
    """Whether every field the loader reads has its type (``library_size``: an int, not a bool)."""
    if "library_size" in data and (type(data["library_size"]) is not int):
        return False
    return all(isinstance(data[f], types) for f, types in _FIELD_TYPES.items() if f in data)


def mismatches(recorded: Mapping[str, Any], expected: Mapping[str, Any], ignore: Iterable[str] = ()) -> list[str]:
    """The top-level input fields whose recorded value differs from the expected one (``ignore`` skipped).

    Values are compared through their canonical JSON form, so tuples and lists compare equal.
    """
    skip = set(ignore)
    canon = lambda v: json.dumps(v, sort_keys=True, default=str)  # noqa: E731
    fields = (set(recorded) | set(expected)) - skip
    return sorted(f for f in fields if canon(recorded.get(f)) != canon(expected.get(f)))
