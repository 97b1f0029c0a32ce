"""File handling for ``anyaccel migrate``: which files, reading them safely, writing them atomically."""

from __future__ import annotations

import codecs
import dataclasses
import io
import logging
import os
import tempfile
import tokenize
from collections.abc import Iterator, Sequence
from pathlib import Path

from anyaccel.migrate.findings import Finding

logger = logging.getLogger(__name__)

#: Directory names never descended into when a directory is given.
SKIPPED_DIRECTORIES = frozenset({"__pycache__", "node_modules", "site-packages", "build", "dist"})

_BOM = "\ufeff"


@dataclasses.dataclass(frozen=True)
class SourceText:
    """A decoded source file.

    Attributes:
        text: the file's content decoded (see ``encoding``), newlines kept as in the file, without a leading BOM.
        bom: True when the file started with a UTF-8 byte-order mark (written back on ``write_atomic``).
        encoding: the codec the file is written in: its PEP 263 coding cookie's (``latin-1``, ``cp1252``, ...),
            else ``utf-8``; ``write_atomic`` encodes with it, so the file keeps its encoding.
    """

    text: str
    bom: bool
    encoding: str = "utf-8"


def iter_python_files(paths: Sequence[str]) -> Iterator[str]:
    """Yield the files to migrate: each given file, and every ``*.py`` under each given directory.

    Directories are walked in sorted order, skipping hidden directories and ``SKIPPED_DIRECTORIES``
    (directory links are not descended into). Paths that do not exist are yielded as given, so that reading
    them reports the error. A file reached under several names (a symbolic link to a file also given or
    found, a hard link) is yielded once, under the first name met, so it is migrated once.

    Args:
        paths: files and directories, as given on the command line.

    Yields:
        File paths (str), each real file once.
    """
    seen: set[object] = set()
    for given in paths:
        root = Path(given)
        if root.is_dir():
            found: list[Path] = []
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIPPED_DIRECTORIES)
                found.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
            candidates = [str(p) for p in found]
        else:
            candidates = [given]
        for candidate in candidates:
            key = _identity(candidate)
            if key not in seen:
                seen.add(key)
                yield candidate


def _identity(path: str) -> object:
    """What makes two names one file: its device and inode (links followed), else the name itself."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return path
    return (st.st_dev, st.st_ino)


def read_source(path: str) -> SourceText | Finding:
    """Read ``path`` as Python source, decoded as Python decodes it (PEP 263 and PEP 3120): with the encoding
    its coding cookie names (``# -*- coding: latin-1 -*-`` on line 1 or 2), else UTF-8; a UTF-8 byte-order mark
    is removed (and remembered). ``tokenize.detect_encoding`` reads the cookie.

    Args:
        path: the file to read.

    Returns:
        A ``SourceText``, or a ``Finding`` saying why the file is skipped: ``unreadable`` (missing, a
        directory, no permission), ``notebook`` (a ``.ipynb`` Jupyter notebook: JSON, not Python source),
        ``binary`` (contains a NUL byte), ``not-utf8`` (no cookie and not UTF-8; the finding names the
        offending byte offset) or ``bad-encoding`` (the cookie names an unknown codec, contradicts the BOM, or
        the bytes do not decode with it).
    """
    if path.lower().endswith(".ipynb"):
        return Finding(path, 0, 0, "notebook",
                       "a Jupyter notebook (JSON), which anyaccel migrate does not read, skipped; export its code "
                       "with 'jupyter nbconvert --to script' and migrate the .py, or port its cells by hand")
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return Finding(path, 0, 0, "unreadable", f"cannot read the file, skipped: {exc.strerror or exc}")
    if b"\x00" in data:
        return Finding(path, 0, 0, "binary", "binary file (contains NUL bytes), skipped")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        if not str(exc.msg).startswith("invalid or missing encoding declaration"):
            # an unknown codec in the cookie, or a cookie that contradicts the BOM
            return Finding(path, 0, 0, "bad-encoding", f"{exc.msg}, skipped; fix the coding cookie (PEP 263)")
        encoding = "utf-8"  # no cookie and a first line that is not UTF-8: the decode below names the byte
    bom = encoding == "utf-8-sig"
    codec = "utf-8" if bom else codecs.lookup(encoding).name
    try:
        text = data.decode("utf-8-sig" if bom else codec)
    except UnicodeDecodeError as exc:
        bad = data[exc.start:exc.start + 1]
        if codec == "utf-8":
            return Finding(path, 0, 0, "not-utf8",
                           f"not UTF-8 (byte {exc.start} is {bad!r}), skipped; re-encode it as "
                           "UTF-8, or declare its encoding on line 1 or 2 (# -*- coding: latin-1 -*-), to migrate it")
        return Finding(path, 0, 0, "bad-encoding",
                       f"does not decode as {codec}, the encoding its coding cookie declares (byte {exc.start} is "
                       f"{bad!r}), skipped; fix the cookie or the file's encoding")
    return SourceText(text=text, bom=bom, encoding=codec)


def write_atomic(path: str, source: SourceText) -> None:
    """Replace the content of ``path`` with ``source``; atomically where the file has one name.

    Links are kept, never replaced by a plain file:

    - a symbolic link (a chain of them too) is followed: the file it finally names is rewritten and the
      link stays as it was;
    - a file with several hard links is rewritten in place (same inode), so every name sees the new text.
      That write is not atomic: a crash during it can leave the file partly written (a failed write puts
      the old bytes back).

    Otherwise the text is written to a temporary file in the file's directory, flushed and fsynced, given
    the original file's permission bits, then moved over the original with ``os.replace`` (atomic on POSIX
    and Windows): a crash at any point leaves either the old or the new file, never a half-written one.

    Args:
        path: the existing file to replace (or a symbolic link to it).
        source: the new content; written in ``source.encoding``, with a UTF-8 BOM when ``source.bom``.

    Raises:
        UnicodeEncodeError: the text holds a character ``source.encoding`` cannot encode; nothing was written.
        OSError: the directory or file is not writable or the disk is full; the original file is unchanged
            and the temporary file is removed.
    """
    target = Path(os.path.realpath(path))
    if str(target) != os.path.abspath(path):
        logger.info("%s is a symbolic link: rewriting the file it names, %s", path, target)
    data = ((_BOM if source.bom else "") + source.text).encode(source.encoding)
    mode: int | None = None
    try:
        st = target.stat()
    except OSError:
        st = None
    if st is not None and st.st_nlink > 1:
        _write_in_place(target, data)
        logger.debug("wrote %s in place (%d bytes; it has %d hard links)", target, len(data), st.st_nlink)
        return
    mode = st.st_mode & 0o7777 if st is not None else None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".anyaccel-tmp", dir=str(target.parent))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    logger.debug("wrote %s (%d bytes)", path, len(data))


def _write_in_place(target: Path, data: bytes) -> None:
    """Overwrite ``target``'s bytes with ``data`` through its own inode (keeps hard links).

    Raises:
        OSError: the write failed; the old bytes were written back (best effort, logged when that fails too).
    """
    with open(target, "r+b") as handle:
        old = handle.read()
        try:
            handle.seek(0)
            handle.write(data)
            handle.truncate()
            handle.flush()
            os.fsync(handle.fileno())
        except OSError:
            try:
                handle.seek(0)
                handle.write(old)
                handle.truncate()
                handle.flush()
            except OSError as exc:
                logger.error("could not restore %s after a failed write: %s", target, exc)
            raise
