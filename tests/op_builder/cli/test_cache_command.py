"""``anyaccel cache ls|clean`` (anyaccel/op_builder/cli/cache.py, called through its module).

An entry is stale when its manifest is missing or damaged, or it was built for another platform or anyaccel
version, or for a stable-ABI target newer than the running torch; the torch it was built under does not make
it stale (the ops use the stable ABI).
"""

from __future__ import annotations

import argparse

import pytest

from anyaccel.op_builder.cli import cache as cache_commands
from anyaccel.op_builder.core.cache import Cache
from anyaccel.op_builder.core.integrity import library_record
from anyaccel.op_builder.core.lock import BuildLock
from anyaccel.op_builder.core.manifest import compute_key, write_manifest


def _parse(module, argv):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


def _fake_entry(cache: Cache, label: str, **inputs) -> str:
    """An intact entry (manifest schema 2: its inputs hash to its key, the library's digest is recorded); returns
    its key."""
    fields = cache_commands.runtime_fields() | {"abi_target": "2.10", "built_with_torch": "2.13.0",
                                                 "isa": "portable", "label": label} | inputs
    key = compute_key(fields)
    entry = cache.entry("fakeop", key)
    entry.mkdir(parents=True)
    (entry / "op.so").write_bytes(b"x" * 2048)
    write_manifest(entry, {"key": key, "namespace": "ns", "inputs": fields, "created": 0,
                           **library_record(entry / "op.so")})
    return key


def test_stale_reason() -> None:
    runtime = cache_commands.runtime_fields()
    ok = runtime | {"abi_target": "2.10", "built_with_torch": "2.10.1"}
    assert cache_commands.stale_reason({"inputs": ok}, runtime) == ""  # another torch: not stale
    assert cache_commands.stale_reason(None, runtime) == "no valid manifest"
    assert cache_commands.stale_reason({"inputs": ok | {"abi_target": "9.99"}}, runtime) == (
        "built for stable-ABI target '9.99' (newer than this torch)")
    assert cache_commands.stale_reason({"inputs": ok | {"platform": "plan9-vax"}}, runtime) == (
        "built for platform 'plan9-vax'")
    both = cache_commands.stale_reason({"inputs": ok | {"package_version": "0.0.1", "abi_target": None}}, runtime)
    assert both.startswith("built for package_version '0.0.1'") and "stable-ABI target None" in both


def test_ls_and_clean(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(tmp_path / "c"))
    cache = Cache.open()
    a = _fake_entry(cache, "a", built_with_torch="2.10.0")  # another torch: loadable
    b = _fake_entry(cache, "b", abi_target="9.99")  # needs a newer torch
    d = _fake_entry(cache, "d", platform="plan9-vax")  # another machine
    cache.entry("fakeop", "e" * 64).mkdir()  # no manifest: damaged
    (cache.tmp / "fakeop-cccccccccc-xyz").mkdir()  # leftover of a killed build
    (cache.logs / "fakeop-cccccccccc.log").write_text("failed")
    assert cache_commands.run(_parse(cache_commands, ["ls"])) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"cache root: {cache.root}"
    assert lines[1].split() == ["op", "key", "isa", "abi", "size", "built", "state"]
    rows = {line.split()[1]: line for line in lines[2:]}
    assert rows[a[:12]].split()[3] == "2.10" and rows[a[:12]].endswith(" ok")
    assert "stale: built for stable-ABI target '9.99' (newer than this torch)" in rows[b[:12]]
    assert "stale: built for platform 'plan9-vax'" in rows[d[:12]]
    assert "damaged: no-manifest" in rows["e" * 12]
    assert cache_commands.run(_parse(cache_commands, ["clean", "--stale"])) == 0
    assert [p.name for p in cache.entries()] == [a]
    assert not any(cache.tmp.iterdir())
    assert "removed 4 item(s)" in capsys.readouterr().out
    assert cache_commands.run(_parse(cache_commands, ["clean", "--all"])) == 0
    assert cache.entries() == [] and not any(cache.logs.iterdir())


def test_clean_never_removes_an_entry_whose_build_lock_is_held(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(tmp_path / "c"))
    cache = Cache.open()
    f = _fake_entry(cache, "f", abi_target="9.99")
    held = BuildLock(cache.lock_path("fakeop", f), "held by a build")
    assert held.try_acquire()
    try:
        assert cache_commands.run(_parse(cache_commands, ["clean", "--all"])) == 0
        assert [p.name for p in cache.entries()] == [f]
    finally:
        held.release()
    assert cache_commands.run(_parse(cache_commands, ["clean", "--stale"])) == 0
    assert cache.entries() == []


def test_actions_are_required_and_exclusive() -> None:
    with pytest.raises(SystemExit):
        _parse(cache_commands, [])
    with pytest.raises(SystemExit):
        _parse(cache_commands, ["clean", "--stale", "--all"])


def _read_only_file_system(monkeypatch, root) -> None:
    """Fake a read-only cache (chmod does not stop root, who runs some CI): creating anything under ``root`` fails
    with EROFS, as on a read-only mount."""
    import errno
    import os

    from anyaccel.op_builder.core import cache as core_cache

    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        if str(path).startswith(str(root)):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(core_cache.os, "mkdir", mkdir)


@pytest.mark.parametrize("action", [["ls"], ["clean"], ["clean", "--all"]], ids=" ".join)
@pytest.mark.parametrize("exists", [True, False], ids=["empty-root", "no-root"])
def test_an_empty_read_only_cache_lists_and_cleans_nothing(tmp_path, monkeypatch, capsys, action, exists) -> None:
    root = tmp_path / "cache"
    if exists:
        root.mkdir(mode=0o700)
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(root))
    _read_only_file_system(monkeypatch, root)
    assert cache_commands.run(_parse(cache_commands, action)) == 0
    out = capsys.readouterr().out
    assert f"{root}" in out
    if action == ["ls"]:
        assert out.splitlines()[1].split()[0] == "op" and len(out.splitlines()) == 2  # the header, no row
    else:
        assert "removed 0 item(s)" in out
    assert sorted(p.name for p in root.iterdir()) == [] if exists else not root.exists()
