"""Where built ops live, and the checks that nobody else can write anything we load from there.

Layout under the cache root (``ANYACCEL_CACHE_DIR``, else ``$XDG_CACHE_HOME/anyaccel``, else
``~/.cache/anyaccel``; docs/architecture.md "Cache")::

    ops/<NAME>/<key>/        one published build: op.so, manifest.json (with op.so's SHA-256) and build.log
    tmp/                     private build directories, renamed into ops/ when complete
    locks/<NAME>-<key>.lock  OS locks (flock) that serialise builds of one key across processes
    logs/                    logs of failed builds, kept for the user
    quarantine/<NAME>-<key>-<reason>/  entries found damaged, foreign or mismatched, moved aside in one rename

Loading a shared library runs its code, so every path from the root to the library must be under the current
user's control (else another user could plant code we run): each component is owned by the current user (or
root) and not writable by group or others, and none is a symbolic link, except the root itself when the link
is the user's own. Everything we create gets an explicit mode (directories 0700, files 0600, the library 0700)
whatever the process umask. A path that fails these checks raises `CacheSecurityError` naming the path
and the fix; an *entry* that fails them is quarantined instead (it is ours to move) and rebuilt.

Failures of the file system itself (the root is a file, a read-only file system, a full disk) raise
`CacheUnusableError` with a code and a fix (`cache_os_error`), never a raw ``OSError``.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from anyaccel import settings
from anyaccel.op_builder.errors import CacheSecurityError, CacheUnusableError, OpBuilderError

logger = logging.getLogger(__name__)

CACHE_ENV = settings.CACHE_DIR.name
SUBDIRS = ("ops", "tmp", "locks", "logs", "quarantine")
#: Modes of what the cache creates: private to the user whatever the umask.
DIR_MODE = 0o700
FILE_MODE = 0o600
LIBRARY_MODE = 0o700
#: Modes of what an ahead-of-time build installs (readable by every user of the installation).
PUBLIC_DIR_MODE = 0o755
PUBLIC_FILE_MODE = 0o644
PUBLIC_LIBRARY_MODE = 0o755

_READ_ONLY = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_NOT_DIR = frozenset({errno.ENOTDIR, errno.EEXIST, errno.EISDIR})


def default_cache_root(env: Mapping[str, str] | None = None) -> Path:
    """The cache root from the environment (no file-system access).

    Args:
        env: environment to read; ``os.environ`` when None.
    """
    explicit = settings.CACHE_DIR.get(env)
    if explicit is not None:
        return explicit
    env = os.environ if env is None else env
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "anyaccel"
    return Path("~/.cache/anyaccel").expanduser()


def cache_os_error(exc: OSError, path: Path, action: str) -> OpBuilderError:
    """The typed error for an ``OSError`` the file system raised while we worked on the cache.

    Args:
        exc: the error.
        path: the path the operation was on.
        action: what we tried, as a verb phrase ("create the directory", "write the lock file").

    Returns:
        `CacheUnusableError` with code ``cache_not_directory`` (a file where a directory must be),
        ``cache_read_only`` (permission denied, read-only file system), ``disk_full`` (no space, quota) or
        ``cache_unusable`` (anything else); `CacheSecurityError` for ``ELOOP`` (a symbolic link met
        where none is followed). The message names the path, the system's reason and the fix.
    """
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ELOOP:
        return CacheSecurityError(f"cannot {action} {path}: it is a symbolic link, which the op cache never follows; "
                                  f"remove it (`rm '{path}'`), anyaccel recreates what it needs", path)
    if exc.errno in _NOT_DIR:
        blocker = _first_non_directory(path)
        where = f"{blocker} is a file, not a directory" if blocker else reason
        return CacheUnusableError("cache_not_directory", f"cannot {action} {path}: {where}; set {CACHE_ENV} to a "
                                  f"directory, or remove that file", path)
    if exc.errno in _READ_ONLY:
        return CacheUnusableError("cache_read_only", f"cannot {action} {path}: {reason}; make {path.parent} writable "
                                  f"by you (`chmod u+w '{path.parent}'`) or set {CACHE_ENV} to a writable directory "
                                  "(a read-only cache serves only the ops already built in it)", path)
    if exc.errno in _FULL:
        return CacheUnusableError("disk_full", f"cannot {action} {path}: {reason}; free space there "
                                  f"(`anyaccel cache clean --all` empties the op cache) or set {CACHE_ENV} to a "
                                  "directory on a disk with space", path)
    return CacheUnusableError("cache_unusable", f"cannot {action} {path}: {reason}; set {CACHE_ENV} to another "
                              "directory", path)


def _require_utf8(root: Path) -> None:
    """Refuse a cache root whose path is not valid UTF-8 (bytes the file-system encoding kept as surrogates).

    Raises:
        CacheUnusableError: code ``cache_not_utf8``; the message shows the path's bytes and the fix.
    """
    try:
        str(root).encode("utf-8")
    except UnicodeEncodeError as exc:
        raw = os.fsencode(root)
        raise CacheUnusableError(
            "cache_not_utf8", f"op cache root {raw!r} is not valid UTF-8 (byte {exc.start} of the path): builds write "
            f"it into ninja build files and compiler command lines, which take UTF-8; set {CACHE_ENV} (or "
            "XDG_CACHE_HOME / HOME) to a UTF-8 path", root) from None


def _first_non_directory(path: Path) -> Path | None:
    """The first component of ``path`` (from the top) that exists and is not a directory, or None."""
    for candidate in (*reversed(path.parents), path):
        try:
            st = candidate.stat()
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return candidate
    return None


def _trusted(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def check_secure(path: Path, allow_symlink: bool = False, what: str = "op cache directory") -> os.stat_result:
    """Refuse a path that another user owns, that group or others may write, or that is a symbolic link.

    Args:
        path: the path (a directory or a file).
        allow_symlink: accept a symbolic link owned by the current user (or root) and check its target
            instead: only the cache root may be one.
        what: how the message names the path ("op cache directory", "op library", ...).

    Returns:
        The ``stat`` of the path (of the link's target for an accepted link).

    Raises:
        CacheSecurityError: with the path, its owner and mode, and the fix.
        FileNotFoundError: the path does not exist.
    """
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        if not allow_symlink:
            raise CacheSecurityError(f"{what} {path} is a symbolic link (to {os.readlink(path)}); inside the op cache "
                                     f"only the root may be one. Remove it (`rm '{path}'`); anyaccel recreates it",
                                     path)
        if not _trusted(st.st_uid):
            raise CacheSecurityError(f"{what} {path} is a symbolic link owned by uid {st.st_uid}, not by you (uid "
                                     f"{os.geteuid()}); another user chose where your ops are loaded from. Remove it "
                                     f"or set {CACHE_ENV} to a directory you own.", path)
        target = Path(os.path.realpath(path))
        check_secure(target, allow_symlink=False, what=f"{what} (the target of {path})")
        return target.stat()
    uid = os.geteuid()
    if not _trusted(st.st_uid):
        raise CacheSecurityError(
            f"{what} {path} is owned by uid {st.st_uid}, not by you (uid {uid}) or root; loading libraries from "
            f"it would run another user's code. Remove it (anyaccel rebuilds what it needs) or set {CACHE_ENV} to "
            "a directory you own.", path)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheSecurityError(
            f"{what} {path} is writable by group or others (mode {stat.filemode(st.st_mode)}); anyone could plant "
            f"a library there. Run `chmod go-w '{path}'` (or remove it) or set {CACHE_ENV} to a private "
            "directory.", path)
    return st


def make_dir(path: Path, mode: int = DIR_MODE) -> bool:
    """Create one directory with exactly ``mode`` (the umask cannot widen or narrow it).

    Returns:
        True when it was created, False when something already exists at ``path``.

    Raises:
        CacheUnusableError: the parent is missing, a file, read-only or full (see `cache_os_error`).
    """
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        return False
    except OSError as exc:
        raise cache_os_error(exc, path, "create the directory") from None
    try:
        os.chmod(path, mode)  # mkdir's mode passes through the umask; this sets it exactly
    except OSError as exc:
        raise cache_os_error(exc, path, "set the mode of") from None
    return True


def make_dirs(path: Path, mode: int = DIR_MODE) -> None:
    """Create ``path`` and its missing parents, each with exactly ``mode`` (unlike ``Path.mkdir(parents=True)``,
    whose parents get ``0777 & ~umask``: world-writable under ``umask 0``).

    Raises:
        CacheUnusableError: see `make_dir`.
    """
    missing = []
    current = path
    while not os.path.lexists(current):
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        make_dir(directory, mode)


def write_file(path: Path, data: bytes | str, mode: int = FILE_MODE) -> None:
    """Create ``path`` (it must not exist) with exactly ``mode`` and write ``data``; never follows a link.

    Raises:
        OSError: the file exists or cannot be written (callers turn it into a typed error).
    """
    payload = data.encode() if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def remove_path(path: Path) -> None:
    """Remove a file, a symbolic link (never what it points to) or a directory tree; a missing path is fine.

    Raises:
        OSError: the removal failed.
    """
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)  # fd-based on Linux: never follows a link planted inside
    else:
        path.unlink()


@dataclass(frozen=True)
class Cache:
    """A checked cache root and its layout.

    Attributes:
        root: the cache root directory.
    """

    root: Path

    @classmethod
    def open(cls, root: Path | None = None, create: bool = True) -> Cache:
        """Create (mode 0700, whatever the umask) and check the root and its subdirectories.

        Args:
            root: the root; `default_cache_root` when None.
            create: False to only read the cache (``anyaccel cache ls``/``clean``): a missing root or
                subdirectory is left missing (it holds nothing), so a read-only or absent cache opens.

        Raises:
            CacheSecurityError: the root or a subdirectory is not private to the current user.
            CacheUnusableError: the root (or a parent) is a file, or cannot be created (read-only, full; only
                with ``create``); or (only with ``create``, before anything is created) its path is not valid
                UTF-8 (code ``cache_not_utf8``): builds write it into ninja files and compiler command lines.
        """
        root = default_cache_root() if root is None else Path(root)
        root = Path(os.path.abspath(root))
        if create:
            _require_utf8(root)
            make_dirs(root)
        elif not os.path.lexists(root):
            if _first_non_directory(root) is not None:  # a file on the way: a misconfiguration, not an empty cache
                raise cache_os_error(NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)), root, "open")
            return cls(root)
        try:
            st = check_secure(root, allow_symlink=True, what="op cache root")
        except FileNotFoundError:
            raise CacheUnusableError("cache_unusable", f"op cache root {root} is a symbolic link to "
                                     f"{os.path.realpath(root)}, which does not exist; create that directory (mode "
                                     f"0700) or set {CACHE_ENV} to a directory", root) from None
        if not stat.S_ISDIR(st.st_mode):
            raise CacheUnusableError("cache_not_directory", f"op cache root {root} is a file, not a directory; set "
                                     f"{CACHE_ENV} to a directory, or remove that file", root)
        for name in SUBDIRS:
            sub = root / name
            if not os.path.lexists(sub):
                if not create:
                    continue
                make_dir(sub)
            st = check_secure(sub)
            if not stat.S_ISDIR(st.st_mode):
                raise CacheUnusableError("cache_not_directory", f"op cache directory {sub} is a file, not a "
                                         f"directory; remove it (`rm '{sub}'`), anyaccel recreates it", sub)
        return cls(root)

    def op_dir(self, name: str) -> Path:
        """``ops/<name>``: the published builds of one op."""
        return self.root / "ops" / name

    def check_op_dir(self, name: str, create: bool = False) -> Path:
        """Check ``ops/<name>`` (and create it, mode 0700, when ``create``).

        Returns:
            The directory (which may not exist when ``create`` is False).

        Raises:
            CacheSecurityError: it is a symbolic link, another user's or writable by group or others.
            CacheUnusableError: it is a file, or cannot be created.
        """
        path = self.op_dir(name)
        if not os.path.lexists(path):
            if not create:
                return path
            make_dir(path)
        st = check_secure(path)
        if not stat.S_ISDIR(st.st_mode):
            raise CacheUnusableError("cache_not_directory", f"op cache directory {path} is a file, not a directory; "
                                     f"remove it (`rm '{path}'`), anyaccel recreates it", path)
        return path

    def entry(self, name: str, key: str) -> Path:
        """``ops/<name>/<key>``: one published build."""
        return self.op_dir(name) / key

    def lock_path(self, name: str, key: str) -> Path:
        """The lock file that serialises builds of (name, key)."""
        return self.root / "locks" / f"{name}-{key}.lock"

    @property
    def tmp(self) -> Path:
        """The directory for private build directories."""
        return self.root / "tmp"

    @property
    def logs(self) -> Path:
        """The directory for logs of failed builds."""
        return self.root / "logs"

    @property
    def quarantine_dir(self) -> Path:
        """The directory damaged, foreign or mismatched entries are moved into."""
        return self.root / "quarantine"

    def quarantine(self, entry: Path, reason: str) -> Path:
        """Move ``entry`` (``ops/<name>/<key>``) to ``quarantine/<name>-<key>-<reason>`` in one rename.

        An older quarantined copy of the same name is removed first. The caller holds the entry's build lock.

        Args:
            entry: the entry directory (or whatever stands at its path: a file, a link).
            reason: a short slug ("digest-mismatch", "insecure", ...).

        Returns:
            Where the entry now is.

        Raises:
            CacheSecurityError: the entry cannot be moved because another user owns it (the message says who
                can remove it).
            CacheUnusableError: the quarantine cannot be written (read-only, full).
        """
        dest = self.quarantine_dir / f"{entry.parent.name}-{entry.name}-{reason}"
        try:
            remove_path(dest)
            os.rename(entry, dest)
        except FileNotFoundError:
            return dest  # someone else (cache clean) removed it meanwhile
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                owner = _owner(entry)
                raise CacheSecurityError(
                    f"op cache entry {entry} is unsafe to load ({reason}) and cannot be moved aside: {exc.strerror}"
                    f"{f' (it is owned by uid {owner})' if owner is not None else ''}. Ask its owner or an "
                    f"administrator to remove it, or set {CACHE_ENV} to a directory you own.", entry) from None
            raise cache_os_error(exc, entry, "move aside (quarantine)") from None
        return dest

    def entries(self) -> list[Path]:
        """Every published entry directory, sorted by op then key; symbolic links are never followed."""
        ops = self.root / "ops"
        out: list[Path] = []
        for op in real_dirs(ops):
            out.extend(real_dirs(op))
        return sorted(out)


def real_dirs(path: Path) -> list[Path]:
    """The directories (not links to one) directly in ``path``; empty when it is not a real directory."""
    try:
        with os.scandir(path) as it:
            return sorted(Path(e.path) for e in it if e.is_dir(follow_symlinks=False))
    except (NotADirectoryError, FileNotFoundError):
        return []


def _owner(path: Path) -> int | None:
    try:
        return path.lstat().st_uid
    except OSError:
        return None
