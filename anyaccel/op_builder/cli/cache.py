"""``anyaccel cache ls`` and ``anyaccel cache clean [--stale | --all]``.

Every item under ``ops/`` gets a state:

- ``ok``: loadable here;
- ``stale``: intact but never loadable here again: built for another platform or anyaccel version, or for a
  stable-ABI target newer than the running torch (the torch version itself does not make an entry stale: the
  ops use torch's stable ABI);
- ``damaged``: fails the checks made before loading (`inspect_entry`:
  no or edited manifest, a library whose size or SHA-256 differs from the manifest's, a component another user
  owns or may write), so the loader would quarantine and rebuild it;
- ``insecure``: an op directory that is a symbolic link, another user's, or writable by others (the loader
  refuses it);
- ``unexpected``: a file or link where only entry directories belong.

``ls`` also lists the quarantine (entries the loader moved aside, with the reason). ``clean --stale`` (the
default) removes everything that is not ``ok`` and empties the quarantine; ``clean --all`` removes every
entry, leftover build directory, log and quarantined entry, whatever is found there (files, folders, dangling
links: links are removed, never followed). Entries whose build lock is held (a build in progress) are never
removed, and neither are lock files (see `anyaccel.op_builder.core.lock`) nor anything outside the
cache's own folders.

Both commands print a clean error (no traceback) and exit 1 when the cache cannot be used (a root that is
a file, not private to the user, unreadable).
"""

from __future__ import annotations

import argparse
import logging
import os
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

logger = logging.getLogger(__name__)

# Manifest input fields compared with the running process by equality to decide staleness.
RUNTIME_FIELDS = ("package_version", "platform")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``ls`` and ``clean [--stale | --all]``."""
    sub = parser.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    sub.add_parser("ls", help="list cached ops (and the quarantine) with their state")
    clean = sub.add_parser("clean", help="remove cached ops")
    group = clean.add_mutually_exclusive_group()
    group.add_argument("--stale", action="store_true",
                       help="entries this environment cannot load, damaged ones and the quarantine (default)")
    group.add_argument("--all", action="store_true",
                       help="every entry, leftover build directory, log and quarantined entry")


def runtime_fields() -> dict[str, Any]:
    """The running process's values of `RUNTIME_FIELDS`."""
    import platform

    from anyaccel.version import __version__

    return {"package_version": __version__, "platform": f"{sys.platform}-{platform.machine()}"}


def stale_reason(manifest: dict[str, Any] | None, runtime: dict[str, Any]) -> str:
    """Why an intact entry with ``manifest`` cannot be loaded here ("" when it can)."""
    if manifest is None:
        return "no valid manifest"
    from anyaccel.op_builder.toolchains import torch_abi

    inputs = manifest.get("inputs", {})
    bad = [f"{f} {inputs.get(f)!r}" for f in RUNTIME_FIELDS if inputs.get(f) != runtime[f]]
    target = inputs.get("abi_target")
    if not torch_abi.loadable(str(target)):
        bad.append(f"stable-ABI target {target!r} (newer than this torch)")
    return "built for " + ", ".join(bad) if bad else ""


@dataclass(frozen=True)
class Item:
    """One thing found under ``ops/`` or ``quarantine/``.

    Attributes:
        path: where it is.
        op: the op directory's name ("?" for a stray item directly in ``ops/``).
        state: "ok", "stale", "damaged", "insecure", "unexpected" or "quarantined".
        reason: why, for every state but "ok".
        manifest: the entry's manifest when it passed its checks.
        is_entry: whether ``path`` is an entry directory (its build lock must be free to remove it).
    """

    path: Path
    op: str
    state: str
    reason: str = ""
    manifest: dict[str, Any] | None = None
    is_entry: bool = False


def _kind(path: Path) -> str:
    try:
        mode = path.lstat().st_mode
    except OSError:
        return "missing"
    if stat.S_ISLNK(mode):
        return "link"
    return "dir" if stat.S_ISDIR(mode) else "file"


def _children(path: Path) -> list[Path]:
    try:
        with os.scandir(path) as it:
            return sorted(Path(e.path) for e in it)
    except OSError:
        return []


def scan(cache: Any, runtime: dict[str, Any]) -> list[Item]:
    """Every item of ``ops/`` (entries and strays) and of ``quarantine/``, with its state.

    Side effects: hashes every entry's library (as the loader would before loading it); follows no link.
    """
    from anyaccel.op_builder.core.cache import check_secure
    from anyaccel.op_builder.core.integrity import inspect_entry
    from anyaccel.op_builder.errors import CacheSecurityError

    items: list[Item] = []
    for op_dir in _children(cache.root / "ops"):
        kind = _kind(op_dir)
        if kind != "dir":
            state = "insecure" if kind == "link" else "unexpected"
            what = f"a symbolic link to {_readlink(op_dir)}" if kind == "link" else "a file, not an op directory"
            items.append(Item(op_dir, "?" if kind == "file" else op_dir.name, state, what))
            continue
        try:
            check_secure(op_dir)
        except CacheSecurityError as exc:
            items.append(Item(op_dir, op_dir.name, "insecure", str(exc)))
            continue
        for entry in _children(op_dir):
            if _kind(entry) != "dir":
                what = f"a symbolic link to {_readlink(entry)}" if _kind(entry) == "link" else "a file"
                items.append(Item(entry, op_dir.name, "unexpected", f"{what}, not an entry directory"))
                continue
            check = inspect_entry(entry)
            if not check.ok:
                items.append(Item(entry, op_dir.name, "damaged", f"{check.reason}: {check.problem}", None, True))
                continue
            reason = stale_reason(check.manifest, runtime)
            items.append(Item(entry, op_dir.name, "stale" if reason else "ok", reason, check.manifest, True))
    for held in _children(cache.quarantine_dir):  # <op>-<64 hex key>-<reason>
        op, _, rest = held.name.partition("-")
        items.append(Item(held, op, "quarantined", rest[65:] or "?"))
    return items


def _readlink(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):  # os.walk follows no link to a directory by default
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def run(args: argparse.Namespace) -> int:
    """Run ``ls`` or ``clean``.

    Returns:
        0 (``ls`` also when the reader of stdout goes away, as in ``cache ls | head -1``: quietly);
        1 when the cache cannot be opened (the error and its fix are logged, no traceback) or, for
        ``clean``, when something could not be removed.
    """
    from anyaccel.op_builder.core.cache import Cache
    from anyaccel.op_builder.errors import OpBuilderError

    try:
        cache = Cache.open(create=False)  # reading needs no folder: an empty read-only cache lists nothing
    except OpBuilderError as exc:
        logger.error("%s", exc)
        return 1
    runtime = runtime_fields()
    if args.cache_command == "ls":
        _ls(cache, scan(cache, runtime), sys.stdout)  # a closed stdout: `anyaccel.cli.main` ends quietly
        return 0
    return _clean(cache, runtime, bool(args.all), sys.stdout)


def _ls(cache: Any, items: list[Item], out: TextIO) -> None:
    out.write(f"cache root: {cache.root}\n")
    out.write(f"{'op':<16} {'key':<12} {'isa':<9} {'abi':<6} {'size':>9}  {'built':<16} state\n")
    for item in items:
        man = item.manifest or {}
        inputs = man.get("inputs", {})
        built = time.strftime("%Y-%m-%d %H:%M", time.localtime(man["created"])) if "created" in man else "?"
        size = _size(item.path) if _kind(item.path) == "dir" else 0
        if item.is_entry or item.state == "quarantined":
            key = item.path.name[len(item.op) + 1:][:12] if item.state == "quarantined" else item.path.name[:12]
        else:
            key = "-"
        state = "ok" if item.state == "ok" else f"{item.state}: {item.reason}"
        out.write(f"{item.op:<16} {key:<12} {str(inputs.get('isa', '-')):<9} {str(inputs.get('abi_target', '-')):<6} "
                  f"{size / 1024:>7.0f}KB  {built:<16} {state}\n")


def _remove(path: Path) -> str:
    """Remove ``path`` (a link itself, never its target); returns "" or the reason it failed."""
    from anyaccel.op_builder.core.cache import remove_path

    try:
        remove_path(path)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    return ""


def _clean(cache: Any, runtime: dict[str, Any], everything: bool, out: TextIO) -> int:
    from anyaccel.op_builder.core.lock import BuildLock
    from anyaccel.op_builder.errors import OpBuilderError

    removed, failures = 0, []

    def drop(path: Path) -> None:
        nonlocal removed
        why = _remove(path)
        if why:
            failures.append(why)
        else:
            removed += 1

    for item in scan(cache, runtime):
        if item.state == "ok" and not everything:
            continue
        if not item.is_entry:
            drop(item.path)
            continue
        lock_path = cache.lock_path(item.op, item.path.name)
        if _kind(lock_path) not in ("file", "missing"):  # a planted link or folder is never opened
            drop(lock_path)
        lock = BuildLock(lock_path, what=item.path.name)
        try:
            if not lock.try_acquire():
                logger.info("skipping %s: a build holds its lock", item.path)
                continue
        except OpBuilderError as exc:
            failures.append(f"{item.path}: {exc}")
            continue
        try:
            drop(item.path)
        finally:
            lock.release()
    for leftover in _children(cache.tmp):  # <NAME>-<key[:10]>-<random>: a build dir, removed unless running
        name, _, rest = leftover.name.partition("-")
        if _kind(leftover) == "dir" and rest and _build_running(cache, name, rest[:10]):
            continue
        drop(leftover)
    for stray in _children(cache.root / "locks"):
        if _kind(stray) != "file":  # lock files stay (see core.lock); anything else is not ours to keep
            drop(stray)
    if everything:
        for log in _children(cache.logs):
            drop(log)
        for op_dir in _children(cache.root / "ops"):  # emptied op folders (not one a build just made: rmdir)
            try:
                op_dir.rmdir()
            except OSError:
                pass
    out.write(f"removed {removed} item(s) from {cache.root}\n")
    for why in failures:
        logger.error("could not remove %s", why)
    return 1 if failures else 0


def _build_running(cache: Any, name: str, key_prefix: str) -> bool:
    from anyaccel.op_builder.core.lock import BuildLock
    from anyaccel.op_builder.errors import OpBuilderError

    for lock_path in (cache.root / "locks").glob(f"{name}-{key_prefix}*.lock"):
        if _kind(lock_path) != "file":
            continue
        try:
            if BuildLock(lock_path, what=lock_path.name).is_held():
                return True
        except OpBuilderError:
            continue
    return False
