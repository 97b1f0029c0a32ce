"""Typed errors with a fix, never a raw OSError or a wrong diagnosis: a cache that is a file
or under one, a read-only cache, a full disk, a compiler that crashes or cannot be executed, a ``--version``
probe that fails. Every code is in ``DIAGNOSES`` (with a fix) and in docs/op_builders.md."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest
from integrity_support import REPO, Template, child_env, load_in_child, make_wrapper, readonly_prefix
from opb_helpers import unique
from toy_builder import ToyBuilder

from anyaccel.op_builder import CPULionBuilder, errors
from anyaccel.op_builder.core.cache import Cache, cache_os_error
from anyaccel.op_builder.errors import (
    DIAGNOSES,
    BuildError,
    CacheUnusableError,
    OpBuilderError,
    ToolchainError,
    diagnose,
)
from anyaccel.op_builder.toolchains import host

LOGS = {
    "disk_full": "x.cpp:1: fatal error: error writing to /tmp/ccA.s: No space left on device\ncompilation terminated.",
    "compiler_crashed": "c++: internal compiler error: Segmentation fault signal terminated program cc1plus",
    "compiler_not_executable": "/bin/sh: 1: /opt/cxx: Exec format error",
}


@pytest.mark.parametrize("code", sorted(LOGS))
def test_new_diagnoses_from_logs(code):
    assert diagnose(LOGS[code], 1).code == code


def test_diagnoses_from_return_codes():
    assert diagnose("FAILED: [code=139] a.o\n./cxx -c a.cpp\nSegmentation fault", 139).code == "compiler_crashed"
    assert diagnose("", -11).code == "compiler_crashed"
    assert diagnose("", 126).code == "compiler_not_executable"
    assert diagnose("", 137).code == "killed"
    assert diagnose("cc1plus: fatal error: Killed signal terminated program", 1).code == "killed"
    assert diagnose("a.cpp:1:1: error: expected ';'", 1).code == "compile_error"
    # "No space" is not a source error even when it arrives as an error line
    assert diagnose("a.cpp:1: error: No space left on device", 1).code == "disk_full"


def test_every_error_class_has_a_documented_code():
    docs = (REPO / "docs" / "op_builders.md").read_text()
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, OpBuilderError)]
    assert len(classes) >= 9
    for code, diag in DIAGNOSES.items():
        assert diag.fix and diag.summary, code
        assert f"`{code}`" in docs, f"code {code} is missing from docs/op_builders.md"
    for cls in classes:
        assert cls.CODE in DIAGNOSES, cls


def test_cache_os_error_mapping(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    cases = {errno.ENOSPC: "disk_full", errno.EDQUOT: "disk_full", errno.EROFS: "cache_read_only",
             errno.EACCES: "cache_read_only", errno.ENOTDIR: "cache_not_directory", errno.EIO: "cache_unusable"}
    for number, code in cases.items():
        err = cache_os_error(OSError(number, os.strerror(number)), f / "sub", "create the directory")
        assert isinstance(err, CacheUnusableError) and isinstance(err, OSError) and err.code == code, number
        assert str(f / "sub") in str(err) and "ANYACCEL_CACHE_DIR" in str(err)
    assert f"{f} is a file" in str(cache_os_error(OSError(errno.ENOTDIR, "x"), f / "sub", "create"))


@pytest.mark.parametrize("where", ["is-a-file", "under-a-file"])
def test_cache_dir_that_is_a_file(tmp_path, monkeypatch, where):
    f = tmp_path / "file"
    f.write_text("x")
    root = f if where == "is-a-file" else f / "cache"
    with pytest.raises(CacheUnusableError) as err:
        Cache.open(root)
    assert err.value.code == "cache_not_directory" and f"{f} is a file" in str(err.value)
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(root))
    with pytest.raises(CacheUnusableError):  # a key new to this process: the in-process table cannot answer
        ToyBuilder(unique()).load()


def _fail(monkeypatch, tmp_path, cxx: Path, **env: str) -> BuildError:
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ANYACCEL_CPU_ISA", "portable")
    monkeypatch.setenv("CXX", str(cxx))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(BuildError) as err:
        CPULionBuilder().load()
    return err.value


@pytest.mark.slow
@pytest.mark.parametrize("mode,code", [("enospc", "disk_full"), ("segv", "compiler_crashed"),
                                       ("ice", "compiler_crashed")])
def test_compiler_failures_are_diagnosed(monkeypatch, tmp_path, mode, code):
    err = _fail(monkeypatch, tmp_path, make_wrapper(tmp_path), INTEG_CXX=mode)  # a fresh wrapper: a fresh key
    assert err.code == code, str(err)
    assert DIAGNOSES[code].fix in str(err) and err.log_path is not None and err.log_path.is_file()


def test_compiler_without_execute_permission(monkeypatch, tmp_path):
    cxx = tmp_path / "c++"
    cxx.write_text("#!/bin/sh\nexec g++ \"$@\"\n")
    cxx.chmod(0o644)
    err = _fail(monkeypatch, tmp_path, cxx)
    assert err.code == "compiler_not_executable" and str(cxx) in str(err) and "execute permission" in str(err)
    with pytest.raises(ToolchainError) as terr:
        host.find_cxx({"CXX": str(cxx), "PATH": ""})
    assert terr.value.code == "compiler_not_executable"


@pytest.mark.slow
def test_compiler_that_is_not_a_program(monkeypatch, tmp_path):
    cxx = tmp_path / "c++"
    cxx.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 64)  # executable bit, but nothing the kernel can run
    cxx.chmod(0o755)
    err = _fail(monkeypatch, tmp_path, cxx)
    assert err.code == "compiler_not_executable", str(err)


def test_version_probe_never_raises(tmp_path):
    broken = make_wrapper(tmp_path)
    probe = host.probe_version(broken, env={**os.environ, "INTEG_VERSION": "fail"})
    assert not probe.ok and probe.returncode == 3 and "broken" in probe.output and "\ufffd" in probe.output
    assert "exited with status 3" in probe.describe() and str(broken) in probe.describe()
    for path in (tmp_path / "missing", tmp_path):  # nothing there; a directory
        probe = host.probe_version(path)
        assert not probe.ok and probe.returncode is None and probe.error
    text = tmp_path / "text"
    text.write_text("hello")
    assert not host.probe_version(text).ok  # no execute permission
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    probe = host.probe_version(hang, timeout_s=0.5)
    assert not probe.ok and "no answer within 0.5 s" in probe.describe()
    assert host.tool_version(hang, timeout_s=0.5).startswith("unknown (")


def test_nvcc_version_probe_failure_is_typed_and_logged(monkeypatch, tmp_path):
    """A CUDA build whose ``nvcc --version`` fails: ToolchainError ``version_probe_failed`` (not the old
    ``compiler_missing``), and the failure log keeps the command, its status and its output."""
    from anyaccel.ops.registry import get_builder_class

    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime_api.h").write_text("#define CUDART_VERSION 13000\n")
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'nvcc: cannot open license file' >&2\nexit 7\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    cls = get_builder_class("FusedAdamBuilder", "cuda")
    with pytest.raises(ToolchainError) as err:
        cls().preflight()
    assert err.value.code == "version_probe_failed"
    assert "exited with status 7" in str(err.value) and "license file" in str(err.value)
    with pytest.raises(BuildError) as build_err:
        cls().build_prebuilt(tmp_path / "prebuilt")
    assert build_err.value.code == "version_probe_failed" and build_err.value.log_path is not None
    assert "license file" in build_err.value.log_path.read_text()


@pytest.mark.slow
def test_read_only_cache(tmp_path):
    """A read-only cache serves what it holds, and a build that needs it fails with ``cache_read_only``."""
    (tmp_path / "t").mkdir()
    template = Template(tmp_path / "t")
    cache = template.clone(tmp_path / "ro")
    prefix = readonly_prefix(cache)
    if prefix is None:
        if os.geteuid() == 0:
            pytest.skip("root ignores modes and no private read-only mount can be made here")
        for p in (cache, *cache.iterdir()):
            p.chmod(0o500)
    (warm,), _ = load_in_child(template.env(cache), prefix=prefix)
    assert warm["ok"] and warm["source"] == "cache", warm
    (cold,), _ = load_in_child(template.env(cache, ANYACCEL_CPU_ISA="avx2"), prefix=prefix)
    if not cold["ok"] and cold["code"] == "isa_unavailable":
        pytest.skip("no second SIMD level on this CPU")
    assert not cold["ok"] and cold["code"] == "cache_read_only", cold
    assert re.search(r"writable|Read-only", cold["message"]) and "ANYACCEL_CACHE_DIR" in cold["message"]
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    prefix = readonly_prefix(empty)
    if prefix is None:
        empty.chmod(0o500)
    (fresh,), _ = load_in_child(child_env(empty, template.cxx), prefix=prefix)
    assert not fresh["ok"] and fresh["type"] == "CacheUnusableError" and fresh["code"] == "cache_read_only", fresh
