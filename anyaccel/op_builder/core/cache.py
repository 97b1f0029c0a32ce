"""Where built ops live, and the check that nobody else can write there.

Layout under the cache root (``ANYACCEL_CACHE_DIR``, else ``$XDG_CACHE_HOME/anyaccel``, else
``~/.cache/anyaccel``; docs/architecture.md "Cache")::

    ops/<NAME>/<key>/      one published build: the library, manifest.json and build.log
    tmp/                   private build directories, renamed into ops/ when complete
    locks/<NAME>-<key>.lock OS locks (flock) that serialise builds of one key across processes
    logs/                  logs of failed builds, kept for the user

Loading a shared library runs its code, so a cache another user can write to is a code-execution hole:
the root and every directory we use must be owned by the current user and not writable by group or others
(:class:`CacheSecurityError` otherwise).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from anyaccel.op_builder.core.errors import CacheSecurityError

CACHE_ENV = "ANYACCEL_CACHE_DIR"
SUBDIRS = ("ops", "tmp", "locks", "logs")


def default_cache_root(env: Mapping[str, str] | None = None) -> Path:
    """The cache root from the environment (no file-system access).

    Args:
        env: environment to read; ``os.environ`` when None.
    """
    env = os.environ if env is None else env
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser()
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "anyaccel"
    return Path("~/.cache/anyaccel").expanduser()


def check_secure(path: Path) -> None:
    """Refuse a directory that another user owns or that group/others may write.

    Raises:
        CacheSecurityError: with the path, its owner and mode, and the fix.
    """
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        raise CacheSecurityError(f"op cache directory {path} is a symbolic link; use a real directory "
                                 f"owned by you (set {CACHE_ENV})")
    uid = os.geteuid()
    if st.st_uid != uid:
        raise CacheSecurityError(
            f"op cache directory {path} is owned by uid {st.st_uid}, not by you (uid {uid}); loading "
            f"libraries from it would run another user's code. Set {CACHE_ENV} to a directory you own."
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheSecurityError(
            f"op cache directory {path} is writable by group or others (mode {stat.filemode(st.st_mode)}); "
            f"anyone could plant a library there. Run `chmod go-w {path}` or set {CACHE_ENV} to a private "
            f"directory."
        )


@dataclass(frozen=True)
class Cache:
    """A checked cache root and its layout.

    Attributes:
        root: the cache root directory.
    """

    root: Path

    @classmethod
    def open(cls, root: Path | None = None) -> Cache:
        """Create (mode 0700) and check the root and its subdirectories.

        Args:
            root: the root; :func:`default_cache_root` when None.

        Raises:
            CacheSecurityError: the root or a subdirectory is not private to the current user.
        """
        root = default_cache_root() if root is None else Path(root)
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        check_secure(root)
        for name in SUBDIRS:
            sub = root / name
            sub.mkdir(mode=0o700, exist_ok=True)
            check_secure(sub)
        return cls(root)

    def op_dir(self, name: str) -> Path:
        """``ops/<name>``: the published builds of one op."""
        return self.root / "ops" / name

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

    def entries(self) -> list[Path]:
        """Every published entry directory, sorted by op then key."""
        ops = self.root / "ops"
        if not ops.is_dir():
            return []
        return sorted(p for op in ops.iterdir() if op.is_dir() for p in op.iterdir() if p.is_dir())
