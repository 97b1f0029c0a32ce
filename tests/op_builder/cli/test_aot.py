"""Ahead-of-time builds: one failing op does not stop the others; prebuilt used first; mismatch -> JIT."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import anyaccel.op_builder.cli.aot as aot
from anyaccel.op_builder.core.manifest import MANIFEST_NAME
from anyaccel.op_builder.registry import register_builder
from opb_helpers import HERE, child_env, run_json, toy_load_cmd, unique
from toy_builder import ToyBuilder

pytestmark = pytest.mark.slow
REPO = HERE.parent.parent


def test_selected_ops():
    names = ["cpu_adam"]
    assert aot.selected_ops({}, names) == []
    assert aot.selected_ops({"ANYACCEL_BUILD_OPS": "1"}, names) == ["cpu_adam"]
    assert aot.selected_ops({"ANYACCEL_BUILD_CPU_ADAM": "1"}, names) == ["cpu_adam"]
    assert aot.selected_ops({"ANYACCEL_BUILD_OPS": "1", "ANYACCEL_BUILD_CPU_ADAM": "0"}, names) == []


def test_one_failure_does_not_abort_and_prebuilt_is_used(tmp_path, counting_cxx, caplog):
    cxx, count = counting_cxx
    variant = unique()

    class Good(ToyBuilder):
        def __init__(self):
            super().__init__(variant)

    class Bad(ToyBuilder):
        def __init__(self):
            super().__init__(unique(), source="missing_header.cpp")

    register_builder(f"aot_good_{variant}", "*", Good)
    register_builder(f"aot_bad_{variant}", "*", Bad)
    dest = tmp_path / "prebuilt"
    outcomes = aot.build_prebuilt_ops([f"aot_bad_{variant}", f"aot_good_{variant}"], dest)
    assert [o.status for o in outcomes] == ["failed", "built"]
    assert "header" in outcomes[0].detail
    table = aot.format_table(outcomes)
    assert "failed" in table and "built" in table
    entries = list((dest / "toy").iterdir())
    assert len(entries) == 1 and (entries[0] / MANIFEST_NAME).is_file()

    # a fresh process with an empty cache and no compiler uses the prebuilt op
    env = child_env(ANYACCEL_PREBUILT_DIR=str(dest), ANYACCEL_CACHE_DIR=str(tmp_path / "empty-cache"),
                    CXX=str(cxx))
    used = run_json(toy_load_cmd(variant), env)
    assert used["ok"] and used["source"] == "prebuilt" and count() == 0

    # a prebuilt for another torch is not trusted: one warning, then a JIT build
    man = json.loads((entries[0] / MANIFEST_NAME).read_text())
    man["inputs"]["torch"] = "1.0.0"
    (entries[0] / MANIFEST_NAME).write_text(json.dumps(man))
    proc = subprocess.run(toy_load_cmd(variant), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["source"] == "built" and count() == 1
    assert proc.stderr.count("does not match this environment") == 1


def test_setup_py_reports_and_never_aborts(tmp_path):
    env = child_env(ANYACCEL_BUILD_CPU_ADAM="1", CXX=str(tmp_path / "no-such-c++"),
                    ANYACCEL_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path / "lib")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "CPUAdamBuilder" in proc.stderr and ("skipped" in proc.stderr or "failed" in proc.stderr)
    assert (tmp_path / "lib" / "anyaccel" / "op_builder" / "builder.py").is_file()


def test_device_only_ops_are_selected_by_their_own_variable():
    """FusedAdamBuilder has no host row; its BUILD_VAR still selects it (not ANYACCEL_BUILD_FUSEDADAMBUILDER)."""
    assert aot.selected_ops({"ANYACCEL_BUILD_FUSED_ADAM": "1"}) == ["FusedAdamBuilder"]
    assert aot.selected_ops({"ANYACCEL_BUILD_FUSEDADAMBUILDER": "1"}) == []
    everything = aot.selected_ops({"ANYACCEL_BUILD_OPS": "1", "ANYACCEL_BUILD_FUSED_LION": "0"})
    assert "FusedAdamBuilder" in everything and "CPUAdamBuilder" in everything
    assert "FusedLionBuilder" not in everything
