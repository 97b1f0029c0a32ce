"""Ahead-of-time builds (anyaccel/op_builder/cli/aot.py): the selection variables, one variant per SIMD level
of a host build, one failing op does not stop the others, prebuilt artifacts are used first and a mismatching
one falls back to a JIT build, setup.py reports and never aborts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from opb_helpers import HERE, child_env, run_json, toy_load_cmd, unique
from toy_builder import ToyBuilder

import anyaccel.op_builder.cli.aot as aot
from anyaccel.op_builder.classes import builder_class, spec_builds
from anyaccel.op_builder.core.manifest import MANIFEST_NAME, compute_key

REPO = HERE.parent.parent
CPU_ADAM = builder_class("adam", "cpu_adam")


def test_selected_builds() -> None:
    assert aot.selected_builds({}) == []
    assert aot.selected_builds({"ANYACCEL_BUILD_CPU_ADAM": "1"}) == [CPU_ADAM]
    everything = aot.selected_builds({"ANYACCEL_BUILD_OPS": "1"})
    assert everything == [builder_class(s.family, b.name) for s, b in spec_builds()]
    assert CPU_ADAM not in aot.selected_builds({"ANYACCEL_BUILD_OPS": "1", "ANYACCEL_BUILD_CPU_ADAM": "0"})
    assert aot.selected_builds({"ANYACCEL_BUILD_OPS": "0", "ANYACCEL_BUILD_CPU_ADAM": "0"}) == []


def test_device_only_ops_are_selected_by_their_own_variable() -> None:
    """FusedAdamBuilder has no host row; its builds' variables select them (not ANYACCEL_BUILD_FUSEDADAMBUILDER)."""
    assert aot.selected_builds({"ANYACCEL_BUILD_FUSED_ADAM": "1"}) == [builder_class("adam", "fused_adam")]
    assert aot.selected_builds({"ANYACCEL_BUILD_FUSED_ADAM_SYCL": "1"}) == [builder_class("adam", "fused_adam_sycl")]
    assert aot.selected_builds({"ANYACCEL_BUILD_FUSEDADAMBUILDER": "1"}) == []
    everything = aot.selected_builds({"ANYACCEL_BUILD_OPS": "1", "ANYACCEL_BUILD_FUSED_LION": "0"})
    names = [c.NAME for c in everything]
    assert "fused_adam" in names and "cpu_adam" in names and "fused_lion_sycl" in names
    assert "fused_lion" not in names


def test_a_host_build_has_one_variant_per_simd_level_of_the_machine() -> None:
    assert aot.isa_variants("x86_64") == ("avx512", "avx2", "portable")
    assert aot.isa_variants("aarch64") == ("sve", "neon", "portable")
    assert aot.isa_variants("riscv64") == ("portable",)
    labels = [label for label, _ in aot.variants(CPU_ADAM)]
    assert labels == [f"cpu_adam[{lv}]" for lv in aot.isa_variants()]
    assert [make().isa() for _, make in aot.variants(CPU_ADAM)] == list(aot.isa_variants())
    fused = builder_class("lion", "fused_lion")
    assert [label for label, _ in aot.variants(fused)] == ["fused_lion"]
    assert [label for label, _ in aot.variants(ToyBuilder)] == ["toy"]  # no spec: one variant


def test_build_all_skips_what_cannot_build_and_records_failures() -> None:
    class Skipped(ToyBuilder):
        def buildability(self):
            return False, "no compiler for this"

    class Raises(ToyBuilder):
        def __init__(self):
            raise ValueError("bad configuration\nsecond line")

    outcomes = aot.build_all([Skipped, Raises], lambda b: "built", lambda b: b.buildability())
    assert [(o.op, o.status) for o in outcomes] == [("toy", "skipped"), ("toy", "failed")]
    assert outcomes[0].detail == "no compiler for this"
    assert outcomes[1].detail == "bad configuration" and "second line" in outcomes[1].error


@pytest.mark.slow
def test_one_failure_does_not_abort_and_prebuilt_is_used(tmp_path, counting_cxx) -> None:
    cxx, count = counting_cxx
    variant = unique()

    class Good(ToyBuilder):
        def __init__(self, isa=None):
            super().__init__(variant)

    class Bad(ToyBuilder):
        def __init__(self, isa=None):
            super().__init__(unique(), source="missing_header.cpp")

    dest = tmp_path / "prebuilt"
    outcomes = aot.build_prebuilt_ops([Bad, Good], dest)
    assert [o.status for o in outcomes] == ["failed", "built"]
    assert "header" in outcomes[0].detail and outcomes[0].error
    table = aot.format_table(outcomes)
    assert table.splitlines()[0].split() == ["op", "status", "time", "detail"]
    assert "failed" in table and "built" in table
    entries = list((dest / "toy").iterdir())
    assert len(entries) == 1 and (entries[0] / MANIFEST_NAME).is_file() and (entries[0] / "op.so").is_file()
    assert not (dest / ".tmp").exists() or not any((dest / ".tmp").iterdir())
    assert str(entries[0]) == outcomes[1].detail

    # a fresh process with an empty cache and another compiler uses the prebuilt op (the compiler is a
    # build-host field)
    env = child_env(ANYACCEL_PREBUILT_DIR=str(dest), ANYACCEL_CACHE_DIR=str(tmp_path / "empty-cache"),
                    CXX=str(cxx))
    used = run_json(toy_load_cmd(variant), env)
    assert used["ok"] and used["source"] == "prebuilt" and count() == 0

    man_path = entries[0] / MANIFEST_NAME
    pristine = man_path.read_text()

    # built under another torch: still used (a build-host field; the stable ABI is the contract)
    man = json.loads(pristine)
    man["inputs"]["built_with_torch"] = "2.10.0"
    man_path.write_text(json.dumps(man))
    assert run_json(toy_load_cmd(variant), env)["source"] == "prebuilt" and count() == 0

    # built for a stable-ABI target newer than this torch: not trusted; one warning, then a JIT build. The
    # artifact is consistent (its key and namespace follow its inputs): a manifest edited in place is damaged
    # instead (tests/op_builder/core/test_integrity.py)
    man = json.loads(pristine)
    man["inputs"]["abi_target"] = "9.99"
    man["key"] = compute_key(man["inputs"])
    man["namespace"] = f"anyaccel_toy_{man['key'][:10]}"
    man_path.write_text(json.dumps(man))
    entries[0].rename(entries[0].parent / man["key"])
    proc = subprocess.run(toy_load_cmd(variant), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["source"] != "prebuilt" and count() == 1
    assert proc.stderr.count("does not match this environment") == 1
    assert "stable-ABI target 9.99 is newer than torch" in proc.stderr


@pytest.mark.slow
def test_setup_py_reports_and_never_aborts(tmp_path) -> None:
    env = child_env(ANYACCEL_BUILD_CPU_ADAM="1", CXX=str(tmp_path / "no-such-c++"),
                    ANYACCEL_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path / "lib")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "ahead-of-time op builds" in proc.stderr
    for level in aot.isa_variants():
        assert f"cpu_adam[{level}]" in proc.stderr
    assert "skipped" in proc.stderr or "failed" in proc.stderr
    assert (tmp_path / "lib" / "anyaccel" / "op_builder" / "core" / "builder.py").is_file()
