"""The cache key changes with every input and comes back when the input is reverted (no compiler runs).

The inputs are those of the stable-ABI builds: sources and headers, flags, the CPU ISA level, the compiler's
identity, the package version, the platform, backend extras, the generated schema header of a spec build and
the stable-ABI target -- not the torch version, the Python version or the C++11 ABI flag, which a stable-ABI
binary does not depend on (``built_with_torch`` is recorded for the report but ignored when matching).
"""

from __future__ import annotations

import shutil

import pytest
from opb_helpers import make_wrapper
from toy_builder import FIXTURES, ToyBuilder

import anyaccel.op_builder.core.builder as builder_mod
from anyaccel.op_builder import CPUAdamBuilder
from anyaccel.op_builder.core.manifest import compute_key
from anyaccel.op_builder.toolchains import torch_abi


def key_of(b) -> str:
    return compute_key(b.key_inputs())


def test_key_inputs_carry_the_abi_target_not_the_torch_version() -> None:
    inputs = ToyBuilder().key_inputs()
    assert inputs["abi_target"] == torch_abi.format_version(torch_abi.DEFAULT_TARGET) == "2.10"
    import torch

    assert inputs["built_with_torch"] == torch.__version__
    assert not {"torch", "python", "cxx11_abi", "torch_cuda", "torch_hip"} & set(inputs)
    assert inputs["schema_header"] is None  # a hand-written builder has no spec, hence no generated header
    assert inputs["op"] == "toy" and inputs["backend"] == "cpu" and inputs["isa"] == ToyBuilder().isa()
    spec_inputs = CPUAdamBuilder().key_inputs()
    assert len(spec_inputs["schema_header"]) == 64  # the hash of the generated headers
    assert "csrc/adam/cpu_adam.cpp" in spec_inputs["files"] and "csrc/includes/stable/checks.h" in spec_inputs["files"]


def test_key_changes_with_each_input_and_reverts(tmp_path, monkeypatch) -> None:
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

    if torch_abi.running_torch() > torch_abi.DEFAULT_TARGET:  # a newer stable-ABI target the running torch has
        monkeypatch.setenv(torch_abi.TARGET_ENV, torch_abi.format_version(torch_abi.running_torch()))
        changes.append(("abi target", key_of(ToyBuilder(root=root))))
        monkeypatch.delenv(torch_abi.TARGET_ENV)
    # (on torch 2.10, the default target, no other target is loadable: that change is not exercised there)
    with monkeypatch.context() as mp:  # (never monkeypatch.undo(): it would undo the conftest's environment too)
        mp.setattr(builder_mod, "__version__", "99.0")
        changes.append(("package", key_of(ToyBuilder(root=root))))
    with monkeypatch.context() as mp:
        mp.setattr(builder_mod.sys, "platform", "plan9")
        changes.append(("platform", key_of(ToyBuilder(root=root))))

    class ArchToy(ToyBuilder):
        def extra_key_inputs(self):
            return {"cuda_arch_list": ["9.0"]}

    changes.append(("arch list", key_of(ArchToy(root=root))))

    keys = [k for _, k in changes]
    assert base not in keys, [n for n, k in changes if k == base]
    assert len(set(keys)) == len(keys), "every input must give its own key"
    assert key_of(ToyBuilder(root=root)) == base, "everything reverted: the old key"


def test_the_generated_schema_header_is_part_of_the_key(monkeypatch) -> None:
    base = key_of(CPUAdamBuilder())
    real = CPUAdamBuilder.generated_headers

    def edited(self):
        headers = dict(real(self))
        headers["anyaccel_op.h"] += "// a spec edit\n"
        return headers

    with monkeypatch.context() as mp:
        mp.setattr(CPUAdamBuilder, "generated_headers", edited)
        assert key_of(CPUAdamBuilder()) != base
    assert key_of(CPUAdamBuilder()) == base


def test_python_version_and_cxx11_abi_do_not_change_the_key(monkeypatch) -> None:
    import torch

    base = key_of(ToyBuilder())
    monkeypatch.setattr("anyaccel.op_builder.toolchains.host.python_tag", lambda: "cpython-399")
    monkeypatch.setattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", not torch._C._GLIBCXX_USE_CXX11_ABI)
    assert key_of(ToyBuilder()) == base


def test_a_torch_upgrade_keeps_the_key(monkeypatch) -> None:
    import torch

    base = key_of(ToyBuilder())
    monkeypatch.setattr(torch, "__version__", "2.14.1")  # a newer torch: the same stable ABI
    assert key_of(ToyBuilder()) == base


def test_a_target_newer_than_the_running_torch_is_refused(monkeypatch) -> None:
    monkeypatch.setenv(torch_abi.TARGET_ENV, "9.99")
    with pytest.raises(torch_abi.TorchABIError, match="newer than the running torch"):
        ToyBuilder().key_inputs()
    ok, reason = ToyBuilder().compatibility()
    assert not ok and "9.99" in reason and "newer" in reason


def test_namespace_follows_the_key() -> None:
    b = ToyBuilder()
    key = key_of(b)
    assert b.namespace(key) == f"anyaccel_toy_{key[:10]}"


def test_missing_source_is_an_oserror(tmp_path) -> None:
    with pytest.raises(OSError):
        ToyBuilder(root=tmp_path).key_inputs()


def test_a_header_beside_the_sources_is_in_the_key(tmp_path):
    root = tmp_path / "src"
    shutil.copytree(FIXTURES, root)
    base = key_of(ToyBuilder(root=root))
    beside = root / "toy_local.h"  # what toy.cpp would include as "toy_local.h", outside the include paths
    beside.write_text("// v1\n")
    first = key_of(ToyBuilder(root=root))
    beside.write_text("// v2\n")
    assert len({base, first, key_of(ToyBuilder(root=root))}) == 3
    beside.unlink()
    assert key_of(ToyBuilder(root=root)) == base
