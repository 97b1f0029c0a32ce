"""Whether a built entry (a cache entry or a prebuilt artifact) may be loaded: checks before ``dlopen``.

``dlopen`` runs a library's code, and a damaged one crashes the process inside it (a truncated ``op.so``
dies with SIGBUS, flipped bytes with SIGSEGV; a library another user could write runs their code in our
process), so nothing is loaded before `inspect_entry` passes:

1. the entry, its ``manifest.json`` and its ``op.so`` are what they claim (a directory and two regular
   files, no symbolic link) and under the user's control (owned by the user or root, not writable by group
   or others: `anyaccel.op_builder.core.cache.check_secure`);
2. the manifest parses, is of the current schema, names this entry's key, and its recorded inputs hash to
   that key (an edited manifest fails here);
3. the library has the size and the SHA-256 the manifest records (read through one file descriptor
   opened without following links).

The loader is then given not the entry's path but `verified_copy`: a private, sealed copy of the bytes
read (once more) and hashed, so a library rewritten in place between the check and ``dlopen`` (same inode,
size and mtime) cannot be what runs: the copy either holds the recorded bytes or is refused.

After the load, the builder checks that the library registered the namespace and functions it expects
([`OpBuilder.verify_functions`][anyaccel.op_builder.core.builder.OpBuilder.verify_functions]); what these
checks cannot see (code that is valid but not ours, with a matching manifest written by someone who can
write the cache) is kept out by the ownership checks.

Costs (a 2-core x86 host, warm page cache): about 0.1 ms to hash a 100 KB CPU op, a few
microseconds per ``lstat``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyaccel.op_builder.core import manifest as mf
from anyaccel.op_builder.core.cache import check_secure
from anyaccel.op_builder.errors import CacheSecurityError

#: The library's file name inside an entry.
LIBRARY_NAME = "op.so"


@dataclass(frozen=True)
class EntryCheck:
    """The verdict of `inspect_entry`.

    Attributes:
        present: something exists at the entry's path.
        manifest: the parsed manifest when every check passed, else None.
        reason: "" when loadable; else a short slug naming the first failed check, used in quarantine names
            ("no-manifest", "digest-mismatch", "insecure", ...).
        problem: the failed check in words, with the path ("" when loadable or absent).
        library: the library's path.
        identity: ``(st_dev, st_ino, st_size, st_mtime_ns)`` of the library that was hashed (None unless
            loadable).
    """

    present: bool
    manifest: dict[str, Any] | None
    reason: str
    problem: str
    library: Path
    identity: tuple[int, int, int, int] | None = None

    @property
    def ok(self) -> bool:
        """Whether the entry passed every check."""
        return self.manifest is not None and not self.reason


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _bad(entry: Path, reason: str, problem: str) -> EntryCheck:
    return EntryCheck(True, None, reason, problem, entry / LIBRARY_NAME)


def inspect_entry(entry: Path, key: str | None = None, namespace: str | None = None) -> EntryCheck:
    """Check an entry directory before its library may be loaded (see the module docstring).

    Args:
        entry: ``<root>/<op>/<key>``.
        key: the key the caller expects; the directory's name when None.
        namespace: the torch namespace the caller expects the manifest to name; not checked when None.

    Returns:
        An `EntryCheck`; ``present`` is False (and ``reason`` empty) when nothing is at ``entry``.

    Side effects: reads the manifest and the whole library (to hash it); never follows a symbolic link.
    """
    library = entry / LIBRARY_NAME
    key = entry.name if key is None else key
    try:
        st = entry.lstat()
    except FileNotFoundError:
        return EntryCheck(False, None, "", "", library)
    except OSError as exc:
        return _bad(entry, "unreadable", f"{entry} cannot be examined: {exc.strerror}")
    if not stat.S_ISDIR(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
        return _bad(entry, "not-a-directory", f"entry {entry} is {kind}")
    try:
        check_secure(entry, what="op cache entry")
        man_path = entry / mf.MANIFEST_NAME
        if not os.path.lexists(man_path):
            return _bad(entry, "no-manifest", f"entry {entry} has no {mf.MANIFEST_NAME}")
        man_st = check_secure(man_path, what="op manifest")
        if not stat.S_ISREG(man_st.st_mode):
            return _bad(entry, "bad-manifest", f"{man_path} is not a regular file")
        if not os.path.lexists(library):
            return _bad(entry, "no-library", f"entry {entry} has no {LIBRARY_NAME}")
        lib_st = check_secure(library, what="op library")
    except CacheSecurityError as exc:
        return _bad(entry, "insecure", str(exc))
    except OSError as exc:
        return _bad(entry, "unreadable", f"{entry} cannot be examined: {exc.strerror}")
    if not stat.S_ISREG(lib_st.st_mode):
        return _bad(entry, "not-a-file", f"{library} is not a regular file")
    man = mf.read_manifest(entry)
    if man is None:
        return _bad(entry, "bad-manifest", f"{man_path} is unreadable, larger than {mf.MAX_MANIFEST_BYTES} bytes, "
                                           "not UTF-8 JSON, nested too deeply, has a field of the wrong type, or "
                                           f"is of another schema than {mf.SCHEMA} (written by another anyaccel "
                                           "version)")
    if man.get("key") != key:
        return _bad(entry, "key-mismatch", f"{man_path} names key {str(man.get('key'))[:12]!r}, not {key[:12]!r}")
    try:
        recorded_key = mf.compute_key(man["inputs"]) if isinstance(man.get("inputs"), dict) else None
    except (RecursionError, MemoryError, TypeError, ValueError):  # nested too deeply to serialise, ...
        return _bad(entry, "bad-manifest", f"the inputs recorded in {man_path} cannot be serialised")
    if recorded_key != key:
        return _bad(entry, "inputs-mismatch", f"the inputs recorded in {man_path} do not hash to the key {key[:12]} "
                                              "(the manifest was edited)")
    if namespace is not None and man.get("namespace") != namespace:
        return _bad(entry, "namespace-mismatch", f"{man_path} names namespace {man.get('namespace')!r}, not "
                                                 f"{namespace!r} (the manifest was edited)")
    if man.get("library") not in (None, LIBRARY_NAME):
        return _bad(entry, "bad-manifest", f"{man_path} names library {man.get('library')!r}, not {LIBRARY_NAME!r}")
    digest, size = man.get("library_sha256"), man.get("library_size")
    if not isinstance(digest, str) or not isinstance(size, int):
        return _bad(entry, "no-digest", f"{man_path} records no content digest of {LIBRARY_NAME}")
    if lib_st.st_size != size:
        return _bad(entry, "size-mismatch", f"{library} has {lib_st.st_size} bytes, its manifest records {size} "
                                            "(truncated or replaced)")
    try:
        fd = os.open(library, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        return _bad(entry, "unreadable", f"{library} cannot be opened: {exc.strerror}")
    try:
        fst = os.fstat(fd)
        if _identity(fst) != _identity(lib_st):
            return _bad(entry, "changed", f"{library} changed while it was being checked")
        actual = mf.fd_digest(fd)
    except OSError as exc:
        return _bad(entry, "unreadable", f"{library} cannot be read: {exc.strerror}")
    finally:
        os.close(fd)
    if actual != digest:
        return _bad(entry, "digest-mismatch", f"{library} has SHA-256 {actual[:16]}..., its manifest records "
                                              f"{digest[:16]}... (damaged or replaced)")
    return EntryCheck(True, man, "", "", library, _identity(fst))


def library_record(library: Path) -> dict[str, Any]:
    """The manifest fields that pin a freshly built library: ``library``, ``library_sha256``, ``library_size``.

    Raises:
        OSError: the library cannot be read.
    """
    return {"library": LIBRARY_NAME, "library_sha256": mf.file_digest(library),
            "library_size": library.lstat().st_size}


class LibraryChangedError(OSError):
    """The library's bytes, read for loading, are not the ones its manifest records (it changed after
    `inspect_entry` hashed it)."""


#: The sealed copies of loaded libraries, kept open for the life of the process: the dynamic loader records a
#: library by the path it was opened with (``/proc/self/fd/N``), so that number must never name another one.
_KEPT_FDS: list[int] = []


def _memfd(name: str) -> int | None:
    """A sealable in-memory file (Linux ``memfd_create``) whose ``/proc/self/fd`` path can be loaded, or None."""
    if not hasattr(os, "memfd_create") or not os.path.isdir("/proc/self/fd"):
        return None
    try:
        return os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError:
        return None


@contextlib.contextmanager
def verified_copy(library: Path, digest: str, size: int, name: str) -> Iterator[str]:
    """A private copy of ``library`` holding exactly the bytes that hash to ``digest``: the path to load.

    The library is opened once (without following links) and read once; the bytes read are hashed and written
    into the copy, so what is loaded is what was hashed even if the file is rewritten in place meanwhile
    (``dlopen`` of the cache path would read the file again). The copy is a sealed ``memfd`` (no one can write
    it after the seal, not even this process) loaded through ``/proc/self/fd/N``, kept open for the life of
    the process once loaded (the loader records the library by that path, so the number is never reused);
    where there is no ``memfd`` or ``/proc``, a file created mode 0700 in a private (0700) temporary directory,
    removed on exit.

    Args:
        library: the library `inspect_entry` accepted.
        digest: its recorded SHA-256 (hex).
        size: its recorded size in bytes.
        name: a label for the copy (``/proc/<pid>/maps`` shows ``/memfd:<name>``).

    Yields:
        The path to pass to the loader.

    Raises:
        LibraryChangedError: the bytes read differ from the record (the file changed after it was checked).
        OSError: the library cannot be read or the copy cannot be written.

    Side effects: holds a copy of the library in memory (or in the temporary directory); the ``memfd`` is
    kept open when the body returns normally.
    """
    src = os.open(library, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    memfd = _memfd(name)
    tmp_dir = None
    try:
        if memfd is not None:
            dst, load_path = memfd, f"/proc/self/fd/{memfd}"
        else:
            tmp_dir = tempfile.mkdtemp(prefix="anyaccel-load-")  # mode 0700, ours
            load_path = os.path.join(tmp_dir, LIBRARY_NAME)
            dst = os.open(load_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o700)
        try:
            hasher, offset = hashlib.sha256(), 0
            while True:
                chunk = os.pread(src, mf.CHUNK_BYTES, offset)
                if not chunk:
                    break
                hasher.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(dst, view):]
                offset += len(chunk)
            if offset != size or hasher.hexdigest() != digest:
                raise LibraryChangedError(f"{library} changed after its integrity check: read {offset} bytes with "
                                          f"SHA-256 {hasher.hexdigest()[:16]}..., its manifest records {size} bytes "
                                          f"and {digest[:16]}...")
            if memfd is not None:
                fcntl.fcntl(memfd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
                            | fcntl.F_SEAL_WRITE)
        finally:
            if memfd is None:
                os.close(dst)
        yield load_path
        if memfd is not None:
            _KEPT_FDS.append(memfd)
            memfd = None
    finally:
        os.close(src)
        if memfd is not None:
            os.close(memfd)
        if tmp_dir is not None:
            shutil.rmtree(tmp_dir, ignore_errors=True)
