"""``anyaccel build`` and ``anyaccel cache ls|clean`` (called through their modules)."""

from __future__ import annotations

import argparse

import torch

from anyaccel.op_builder.cli import build as commands, cache as cache_commands
from anyaccel.op_builder.core.cache import Cache
from anyaccel.op_builder.core.manifest import write_manifest


def _parse(module, argv):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


def _fake_entry(cache: Cache, key: str, torch_version: str) -> None:
    entry = cache.entry("fakeop", key)
    entry.mkdir(parents=True)
    (entry / "op.so").write_bytes(b"x")
    inputs = cache_commands.runtime_fields() | {"torch": torch_version, "isa": "portable"}
    write_manifest(entry, {"key": key, "namespace": "ns", "inputs": inputs, "created": 0})


def test_ls_and_clean(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(tmp_path / "c"))
    cache = Cache.open()
    _fake_entry(cache, "a" * 64, torch.__version__)
    _fake_entry(cache, "b" * 64, "1.0.0")
    (cache.tmp / "fakeop-cccccccccc-xyz").mkdir()  # leftover of a killed build
    assert cache_commands.run(_parse(cache_commands, ["ls"])) == 0
    out = capsys.readouterr().out
    assert "aaaaaaaaaaaa" in out and "stale: built for torch '1.0.0'" in out
    assert cache_commands.run(_parse(cache_commands, ["clean", "--stale"])) == 0
    assert [p.name for p in cache.entries()] == ["a" * 64]
    assert not any(cache.tmp.iterdir())
    assert cache_commands.run(_parse(cache_commands, ["clean", "--all"])) == 0
    assert cache.entries() == []


def test_build_unknown_op(capsys):
    assert commands.run(_parse(commands, ["--ops", "no_such_op"])) == 2
