"""Toolchain facts for ``anyaccel report`` (anyaccel/op_builder/cli/info.py)."""

from __future__ import annotations

import json

from anyaccel.op_builder.cli import info


def test_describe_names_every_tool_and_is_json() -> None:
    facts = info.describe()
    json.dumps(facts)
    assert {"cxx", "ninja", "nvcc", "torch", "python_tag", "cpu_isa", "build_jobs", "cache_root"} <= set(facts)
    assert facts["ninja"]["path"] and facts["cxx"]["path"]
    assert facts["cpu_isa"]["chosen"] in facts["cpu_isa"]["supported"]
    assert facts["cache_root"]


def test_a_bad_cxx_is_reported_not_raised(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    monkeypatch.setenv("MAX_JOBS", "lots")
    facts = info.describe()
    assert facts["cxx"]["path"] is None and "no-such-c++" in facts["cxx"]["error"]
    assert "MAX_JOBS" in facts["build_jobs"]
