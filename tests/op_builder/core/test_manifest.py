"""The cache key and the manifest (anyaccel/op_builder/core/manifest.py)."""

from __future__ import annotations

import json

import pytest

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


def _entry_manifest(tmp_path, raw: bytes):
    (tmp_path / mf.MANIFEST_NAME).write_bytes(raw)
    return mf.read_manifest(tmp_path)


def test_deeply_nested_manifest_is_refused_not_raised(tmp_path) -> None:
    depth = 100_000  # far past the JSON parser's recursion limit: RecursionError, not ValueError
    nested = b'{"schema": 2, "key": "k", "inputs": {"x": ' + b"[" * depth + b"]" * depth + b"}}"
    assert _entry_manifest(tmp_path, nested) is None


def test_manifest_that_is_not_utf8_is_refused(tmp_path) -> None:
    assert _entry_manifest(tmp_path, b'{"schema": 2, "key": "\xff\xfe"}') is None


def test_oversized_manifest_is_refused_without_reading_it_all(tmp_path) -> None:
    path = tmp_path / mf.MANIFEST_NAME
    payload = json.dumps({"schema": mf.SCHEMA, "key": "k", "inputs": {}, "pad": ""}).encode()
    path.write_bytes(payload[:-2] + b" " * (mf.MAX_MANIFEST_BYTES + 1) + payload[-2:])  # valid JSON, too big
    assert json.loads(path.read_bytes())["key"] == "k"
    assert mf.read_manifest(tmp_path) is None


@pytest.mark.parametrize("field,value", [("key", ["k"]), ("inputs", "abc"), ("namespace", 3), ("library", None),
                                         ("library_sha256", 5), ("library_size", "12"), ("library_size", True),
                                         ("isa", {"a": 1})])
def test_manifest_fields_of_the_wrong_type_are_refused(tmp_path, field, value) -> None:
    good = {"schema": mf.SCHEMA, "key": "k", "namespace": "ns", "inputs": {}, "library": "op.so",
            "library_sha256": "0" * 64, "library_size": 12, "isa": None}
    assert _entry_manifest(tmp_path, json.dumps(good).encode()) == good
    assert _entry_manifest(tmp_path, json.dumps({**good, field: value}).encode()) is None


def test_manifest_that_is_not_an_object_is_refused(tmp_path) -> None:
    for raw in (b"[]", b"2", b'"schema"', b"null"):
        assert _entry_manifest(tmp_path, raw) is None
