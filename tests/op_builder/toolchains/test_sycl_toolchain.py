"""The SYCL toolchain policy (anyaccel/op_builder/toolchains/sycl.py) without a SYCL compiler: discovery
order, the ``--version`` check (a fake ``icpx`` from fixtures/fake_toolchains answers like Intel's), a stale
``ONEAPI_ROOT`` never trusted, and the XPU arch list."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from opb_helpers import HERE, make_wrapper

from anyaccel.op_builder.errors import ToolchainError
from anyaccel.op_builder.toolchains import sycl as st

FAKES = HERE / "fixtures" / "fake_toolchains"
FAKE_ONEAPI = FAKES / "oneapi"
FAKE_ICPX_DIR = FAKE_ONEAPI / "compiler" / "latest" / "bin"
FAKE_ACPP_DIR = FAKES / "adaptivecpp" / "bin"


@pytest.fixture
def sycl_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A PATH without icpx, no override, no ONEAPI_ROOT, an explicit arch list."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", f"{empty}{os.pathsep}{os.path.dirname(shutil.which('sh'))}")
    for var in (st.SYCL_CXX_ENV, st.ONEAPI_ROOT_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(st.ARCH_LIST_ENV, "pvc")
    return tmp_path


def test_compiler_found_by_override_then_path_then_oneapi_root(sycl_env: Path, monkeypatch: pytest.MonkeyPatch):
    assert st.find_sycl_compiler() is None
    monkeypatch.setenv(st.ONEAPI_ROOT_ENV, str(FAKE_ONEAPI))
    assert st.find_sycl_compiler() == FAKE_ICPX_DIR / "icpx"
    other = sycl_env / "other"
    other.mkdir()
    make_wrapper(other, "echo 'Intel(R) oneAPI DPC++/C++ Compiler 2024.2.1 (2024.2.1.20240711)'\n", name="icpx")
    monkeypatch.setenv("PATH", f"{other}{os.pathsep}{os.environ['PATH']}")
    assert st.find_sycl_compiler() == other / "icpx"  # PATH before ONEAPI_ROOT
    monkeypatch.setenv(st.SYCL_CXX_ENV, str(FAKE_ICPX_DIR / "icpx"))
    assert st.find_sycl_compiler() == FAKE_ICPX_DIR / "icpx"  # the override wins
    monkeypatch.setenv(st.SYCL_CXX_ENV, "no-such-icpx")
    with pytest.raises(ToolchainError, match=st.SYCL_CXX_ENV) as err:
        st.find_sycl_compiler()
    assert err.value.code == "sycl_compiler_missing" and "no-such-icpx" in str(err.value)


def test_compiler_is_checked_by_running_it(sycl_env: Path):
    found = st.probe_sycl_compiler(FAKE_ICPX_DIR / "icpx")
    assert found.version == (2025, 0, 4) and found.torch_version == 20250004
    assert found.home == FAKE_ONEAPI / "compiler" / "latest"
    assert "DPC++" in found.banner
    with pytest.raises(ToolchainError, match="not a SYCL") as err:
        st.probe_sycl_compiler(FAKES / "not_sycl" / "icpx")
    assert err.value.code == "sycl_compiler_missing" and "g++" in str(err.value)
    with pytest.raises(ToolchainError, match="does not run"):
        st.probe_sycl_compiler(sycl_env / "missing" / "icpx")


def test_acpp_on_path_is_found_only_where_no_icpx_is(sycl_env: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", f"{FAKE_ACPP_DIR}{os.pathsep}{os.environ['PATH']}")
    assert st.find_sycl_compiler() == FAKE_ACPP_DIR / "acpp"
    monkeypatch.setenv(st.ONEAPI_ROOT_ENV, str(FAKE_ONEAPI))
    assert st.find_sycl_compiler() == FAKE_ICPX_DIR / "icpx"  # an installed icpx comes first
    monkeypatch.setenv("PATH", f"{FAKE_ICPX_DIR}{os.pathsep}{FAKE_ACPP_DIR}{os.pathsep}{os.environ['PATH']}")
    assert st.find_sycl_compiler() == FAKE_ICPX_DIR / "icpx"
    monkeypatch.delenv(st.ONEAPI_ROOT_ENV)
    monkeypatch.setenv(st.SYCL_CXX_ENV, str(FAKE_ACPP_DIR / "acpp"))
    assert st.find_sycl_compiler() == FAKE_ACPP_DIR / "acpp"  # the override wins


def test_acpp_is_checked_by_its_acpp_version(sycl_env: Path):
    found = st.probe_sycl_compiler(FAKE_ACPP_DIR / "acpp")
    assert found.flavour == st.ACPP and found.version == (24, 6, 0)
    assert found.banner.startswith("acpp [AdaptiveCpp") and found.home == FAKES / "adaptivecpp"
    assert st.probe_sycl_compiler(FAKE_ICPX_DIR / "icpx").flavour == st.DPCPP
    # a clang that is not acpp: --version passes, --acpp-version does not name AdaptiveCpp
    clang = make_wrapper(sycl_env, "echo 'clang version 19.1.7'\n", name="clang++")
    with pytest.raises(ToolchainError, match="acpp-version") as err:
        st.probe_sycl_compiler(clang)
    assert err.value.code == "sycl_compiler_missing" and "clang version 19.1.7" in str(err.value)


def test_the_missing_compiler_message_names_acpp(sycl_env: Path):
    with pytest.raises(ToolchainError, match="no acpp on PATH") as err:
        st.require_sycl_compiler()
    assert "AdaptiveCpp" in str(err.value)


def test_oneapi_root_alone_is_not_trusted(sycl_env: Path, monkeypatch: pytest.MonkeyPatch):
    stale = sycl_env / "oneapi-removed"
    (stale / "compiler" / "latest" / "bin").mkdir(parents=True)
    monkeypatch.setenv(st.ONEAPI_ROOT_ENV, str(stale))
    with pytest.raises(ToolchainError) as err:
        st.require_sycl_compiler()
    text = str(err.value)
    assert err.value.code == "sycl_compiler_missing"
    assert st.SYCL_CXX_ENV in text and "icpx" in text and str(stale) in text
    liar = sycl_env / "oneapi-liar"
    (liar / "compiler" / "latest" / "bin").mkdir(parents=True)
    shutil.copy(FAKES / "not_sycl" / "icpx", liar / "compiler" / "latest" / "bin" / "icpx")
    monkeypatch.setenv(st.ONEAPI_ROOT_ENV, str(liar))
    with pytest.raises(ToolchainError, match="not a SYCL"):
        st.require_sycl_compiler()


def test_arch_list_from_variable_or_torch(sycl_env: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(st.ARCH_LIST_ENV, "pvc, bmg;pvc")
    assert st.xpu_arch_list() == ["bmg", "pvc"]
    monkeypatch.setenv(st.ARCH_LIST_ENV, "")
    assert st.xpu_arch_list() == []  # set but empty: JIT only, as torch
    monkeypatch.setenv(st.ARCH_LIST_ENV, "pvc,$(rm)")
    with pytest.raises(ValueError, match=st.ARCH_LIST_ENV):
        st.xpu_arch_list()
    monkeypatch.delenv(st.ARCH_LIST_ENV)
    monkeypatch.setattr(torch.xpu, "get_arch_list", lambda: ["pvc", "dg2-g10", "bmg"])
    assert st.xpu_arch_list() == ["bmg", "pvc"]  # torch's default drops dg2
