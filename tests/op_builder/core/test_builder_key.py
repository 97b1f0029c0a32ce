"""The cache key changes with every input and comes back when the input is reverted (no compiler runs)."""

from __future__ import annotations

import shutil

import pytest

import anyaccel.op_builder.core.builder as builder_mod
from anyaccel.op_builder.core.manifest import compute_key, mismatches
from opb_helpers import make_wrapper
from toy_builder import FIXTURES, ToyBuilder


def key_of(b) -> str:
    return compute_key(b.key_inputs())


def test_key_changes_with_each_input_and_reverts(tmp_path, monkeypatch):
    root = tmp_path / "src"
    shutil.copytree(FIXTURES, root)
    base = key_of(ToyBuilder(root=root))
    assert base == key_of(ToyBuilder(root=root)), "the key must be deterministic"

    changes = []
    header = root / "include" / "toy_common.h"
    original = header.read_text()
    header.write_text(original + "// edited\n")
    changes.append(("header", key_of(ToyBuilder(root=root))))
    header.write_text(original)
    assert key_of(ToyBuilder(root=root)) == base, "reverting the header must give the old key"

    src = root / "toy.cpp"
    original_src = src.read_text()
    src.write_text(original_src + "\n// edited\n")
    changes.append(("source", key_of(ToyBuilder(root=root))))
    src.write_text(original_src)

    changes.append(("flags", key_of(ToyBuilder("x", root=root))))
    monkeypatch.setenv("ANYACCEL_CPU_ISA", "portable")
    changes.append(("isa", key_of(ToyBuilder(root=root))))
    monkeypatch.delenv("ANYACCEL_CPU_ISA")

    other_cxx = make_wrapper(tmp_path, 'exec g++ "$@"\n')
    monkeypatch.setenv("CXX", str(other_cxx))
    changes.append(("compiler", key_of(ToyBuilder(root=root))))
    monkeypatch.delenv("CXX")

    import torch

    monkeypatch.setattr(torch, "__version__", "9.9.9")
    changes.append(("torch", key_of(ToyBuilder(root=root))))
    monkeypatch.undo()
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", not torch._C._GLIBCXX_USE_CXX11_ABI)
    changes.append(("abi", key_of(ToyBuilder(root=root))))
    monkeypatch.undo()
    monkeypatch.setattr(builder_mod, "python_tag", lambda: "cpython-399")
    changes.append(("python", key_of(ToyBuilder(root=root))))
    monkeypatch.undo()
    monkeypatch.setattr(builder_mod, "__version__", "99.0")
    changes.append(("package", key_of(ToyBuilder(root=root))))
    monkeypatch.undo()

    class ArchToy(ToyBuilder):
        def extra_key_inputs(self):
            return {"cuda_arch_list": ["9.0"]}

    changes.append(("arch list", key_of(ArchToy(root=root))))

    keys = [k for _, k in changes]
    assert base not in keys, [n for n, k in changes if k == base]
    assert len(set(keys)) == len(keys), "every input must give its own key"
    assert key_of(ToyBuilder(root=root)) == base, "everything reverted: the old key"


def test_mismatches_names_the_fields():
    assert mismatches({"a": 1, "b": [1, 2]}, {"a": 1, "b": (1, 2)}) == []
    assert mismatches({"a": 1, "torch": "2.0"}, {"a": 1, "torch": "2.13"}) == ["torch"]
    assert mismatches({"compiler": 1}, {"compiler": 2}, ignore=("compiler",)) == []


def test_namespace_follows_the_key():
    b = ToyBuilder()
    key = key_of(b)
    assert b.namespace(key) == f"anyaccel_toy_{key[:10]}"


def test_missing_source_is_an_oserror(tmp_path):
    with pytest.raises(OSError):
        ToyBuilder(root=tmp_path).key_inputs()
