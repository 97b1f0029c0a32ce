"""Host toolchain discovery and job sizing (anyaccel/op_builder/toolchains/host.py): pure functions."""

from __future__ import annotations

import os

import pytest
from opb_helpers import make_wrapper

from anyaccel.op_builder.errors import ToolchainError
from anyaccel.op_builder.toolchains.host import (
    build_jobs,
    file_identity,
    find_cxx,
    find_ninja,
    require_cxx,
    require_ninja,
    tool_version,
)


def test_cxx_from_env_then_candidates(tmp_path):
    wrapper = make_wrapper(tmp_path, "exit 0\n", name="my-cxx")
    assert find_cxx({"CXX": str(wrapper), "PATH": ""}) == wrapper
    assert find_cxx({"CXX": "my-cxx -O2", "PATH": str(tmp_path)}) == wrapper
    make_wrapper(tmp_path, "exit 0\n", name="g++")
    assert find_cxx({"PATH": str(tmp_path)}) == tmp_path / "g++"
    make_wrapper(tmp_path, "exit 0\n", name="c++")
    assert find_cxx({"PATH": str(tmp_path)}) == tmp_path / "c++"  # c++ before g++, as torch and distutils
    assert find_cxx({"PATH": str(tmp_path / "empty")}) is None
    with pytest.raises(ToolchainError) as err:
        require_cxx({"PATH": str(tmp_path / "empty")})
    assert err.value.code == "compiler_missing"
    with pytest.raises(ToolchainError, match="no-such-compiler") as err:
        find_cxx({"CXX": "no-such-compiler", "PATH": str(tmp_path)})
    assert err.value.code == "compiler_missing"


def test_ninja_found_without_path():
    ninja = find_ninja({"PATH": ""})
    assert ninja is not None and os.access(ninja, os.X_OK)
    assert require_ninja({"PATH": ""}) == ninja


def test_build_jobs_bounded_and_max_jobs_wins():
    gib = 2**30
    assert build_jobs({}, cpu_count=16, mem_available=64 * gib) == 16
    assert build_jobs({}, cpu_count=16, mem_available=3 * gib) == 2
    assert build_jobs({}, cpu_count=16, mem_available=gib // 10) == 1
    assert build_jobs({"MAX_JOBS": "5"}, cpu_count=2, mem_available=gib) == 5
    for bad in ("lots", "0", "-2", "1.5"):
        with pytest.raises(ValueError, match="MAX_JOBS"):
            build_jobs({"MAX_JOBS": bad})


def test_file_identity_and_tool_version_of_a_wrapper(tmp_path):
    tool = make_wrapper(tmp_path, "echo 'mycc 1.2.3'\necho second line\n", name="mycc")
    ident = file_identity(tool)
    assert ident["path"] == str(tool) and ident["size"] == tool.stat().st_size and ident["mtime_ns"] > 0
    assert tool_version(tool) == "mycc 1.2.3"
    assert tool_version(tmp_path / "missing").startswith("unknown (")
    failing = make_wrapper(tmp_path, "exit 3\n", name="silent")
    assert tool_version(failing) == "unknown (exit 3)"
