"""The cache key and the manifest (anyaccel/op_builder/core/manifest.py)."""

from __future__ import annotations

import json

from anyaccel.op_builder.core import manifest as mf


def test_compute_key_is_canonical() -> None:
    a = mf.compute_key({"b": [1, 2], "a": {"y": 1, "x": 2}})
    assert a == mf.compute_key({"a": {"x": 2, "y": 1}, "b": (1, 2)}) and len(a) == 64
    assert a != mf.compute_key({"a": {"x": 2, "y": 1}, "b": [2, 1]})


def test_hash_files_relative_to_the_root_and_absolute_outside(tmp_path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    inside, outside = root / "sub" / "a.h", tmp_path / "b.h"
    inside.write_text("a")
    outside.write_text("b")
    hashes = mf.hash_files([inside, outside, inside], root)
    assert set(hashes) == {"sub/a.h", str(outside)}
    assert hashes["sub/a.h"] == mf.hash_text("a")


def test_manifest_round_trip_and_damage(tmp_path) -> None:
    mf.write_manifest(tmp_path, {"key": "k", "inputs": {"abi_target": "2.10"}})
    man = mf.read_manifest(tmp_path)
    assert man == {"schema": mf.SCHEMA, "key": "k", "inputs": {"abi_target": "2.10"}}
    assert not (tmp_path / (mf.MANIFEST_NAME + ".part")).exists()
    (tmp_path / mf.MANIFEST_NAME).write_text("{not json")
    assert mf.read_manifest(tmp_path) is None
    (tmp_path / mf.MANIFEST_NAME).write_text(json.dumps({"schema": mf.SCHEMA + 1}))
    assert mf.read_manifest(tmp_path) is None
    assert mf.read_manifest(tmp_path / "missing") is None


def test_mismatches_names_the_fields() -> None:
    assert mf.mismatches({"a": 1, "b": [1, 2]}, {"a": 1, "b": (1, 2)}) == []
    assert mf.mismatches({"a": 1, "z": 2}, {"a": 2, "y": 1}) == ["a", "y", "z"]
    assert mf.mismatches({"compiler": 1}, {"compiler": 2}, ignore=("compiler",)) == []
