"""``anyaccel cache ls`` and ``anyaccel cache clean [--stale | --all]``.

An entry is *stale* when its manifest is missing or damaged, or can never be loaded here again: built for
another platform or anyaccel version, or for a stable-ABI target newer than the running torch. (The torch
version itself does not make an entry stale: the ops use torch's stable ABI.) Entries
whose build lock is held (a build in progress) are never removed.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# Manifest input fields compared with the running process by equality to decide staleness.
RUNTIME_FIELDS = ("package_version", "platform")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``ls`` and ``clean [--stale | --all]``."""
    sub = parser.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    sub.add_parser("ls", help="list cached ops")
    clean = sub.add_parser("clean", help="remove cached ops")
    group = clean.add_mutually_exclusive_group()
    group.add_argument("--stale", action="store_true", help="only entries this environment cannot load (default)")
    group.add_argument("--all", action="store_true", help="every entry, leftover build directory and log")


def runtime_fields() -> dict[str, Any]:
    """The running process's values of :data:`RUNTIME_FIELDS`."""
    import platform

    from anyaccel.version import __version__

    return {"package_version": __version__, "platform": f"{sys.platform}-{platform.machine()}"}


def stale_reason(manifest: dict[str, Any] | None, runtime: dict[str, Any]) -> str:
    """Why an entry with ``manifest`` cannot be loaded here ("" when it can)."""
    if manifest is None:
        return "no valid manifest"
    from anyaccel.op_builder.toolchains import torch_abi

    inputs = manifest.get("inputs", {})
    bad = [f"{f} {inputs.get(f)!r}" for f in RUNTIME_FIELDS if inputs.get(f) != runtime[f]]
    target = inputs.get("abi_target")
    if not torch_abi.loadable(str(target)):
        bad.append(f"stable-ABI target {target!r} (newer than this torch)")
    return "built for " + ", ".join(bad) if bad else ""


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(args: argparse.Namespace) -> int:
    """Run ``ls`` or ``clean``; returns 0."""
    from anyaccel.op_builder.core.cache import Cache
    from anyaccel.op_builder.core.lock import BuildLock
    from anyaccel.op_builder.core.manifest import read_manifest

    cache = Cache.open()
    runtime = runtime_fields()
    out = sys.stdout
    if args.cache_command == "ls":
        out.write(f"cache root: {cache.root}\n")
        out.write(f"{'op':<16} {'key':<12} {'isa':<9} {'abi':<6} {'size':>9}  {'built':<16} state\n")
        for entry in cache.entries():
            man = read_manifest(entry)
            reason = stale_reason(man, runtime)
            inputs = (man or {}).get("inputs", {})
            built = time.strftime("%Y-%m-%d %H:%M", time.localtime(man["created"])) if man else "?"
            out.write(f"{entry.parent.name:<16} {entry.name[:12]:<12} {str(inputs.get('isa')):<9} "
                      f"{str(inputs.get('abi_target')):<6} {_size(entry) / 1024:>7.0f}KB  {built:<16} "
                      f"{'stale: ' + reason if reason else 'ok'}\n")
        return 0
    removed = 0
    for entry in cache.entries():
        if not args.all and not stale_reason(read_manifest(entry), runtime):
            continue
        lock = BuildLock(cache.lock_path(entry.parent.name, entry.name), what=entry.name)
        if not lock.try_acquire():
            logger.info("skipping %s: a build holds its lock", entry)
            continue
        try:
            shutil.rmtree(entry)
            removed += 1
        finally:
            lock.release()
    for leftover in cache.tmp.iterdir():  # <NAME>-<key[:10]>-<random>: a build dir, removed unless running
        name, _, rest = leftover.name.partition("-")
        if any(BuildLock(p, what=p.name).is_held() for p in (cache.root / "locks").glob(f"{name}-{rest[:10]}*.lock")):
            continue
        shutil.rmtree(leftover, ignore_errors=True)
        removed += 1
    if args.all:
        for log in cache.logs.iterdir():
            log.unlink()
            removed += 1
    out.write(f"removed {removed} item(s) from {cache.root}\n")
    return 0
