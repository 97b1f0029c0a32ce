"""torch's stable ABI: the target version, and built host ops that link nothing versioned of torch."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from anyaccel.op_builder.classes import builder_class, spec_builds
from anyaccel.op_builder.toolchains import torch_abi

#: What a stable-ABI op may leave undefined: torch's stable C shim, the C and C++ runtimes, and nothing else.
#: The C++ standard library's own symbols (std::, operator new/delete) are allowed with or without a version:
#: GCC 13 on the GPU image leaves them unversioned. Only torch's C++ symbols (below) would tie a binary to one torch.
ALLOWED = re.compile(r"^(aoti_torch_\w+|torch_\w+|_ITM_\w+|__gmon_start__|_Unwind_\w+|__cxa_\w+|__gxx_personality_v0"
                     r"|__libc_single_threaded|__stack_chk_fail|_Z\w+@(GLIBCXX|CXXABI)_[\d.]+|\w+@(GLIBC|GLIBCXX|CXXABI|GCC)"
                     r"_[\d.]+|_Z(NK?St|St|dl|da|nw|na)\w*)$")
#: Versioned torch C++ symbols (c10::, at::, torch:: mangled names), which would tie a binary to one torch.
TORCH_CXX = re.compile(r"^_ZN?K?\d*(c10|at|torch|caffe2)")


def test_target_is_2_10_by_default_and_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(torch_abi.TARGET_ENV, raising=False)
    assert torch_abi.target() == (2, 10)
    assert torch_abi.target_macro((2, 10)) == "-DTORCH_TARGET_VERSION=0x020a000000000000"
    for bad, match in (("x", "not a torch version"), ("2.9", "older than 2.10"), ("9.99", "newer than the running")):
        monkeypatch.setenv(torch_abi.TARGET_ENV, bad)
        with pytest.raises(torch_abi.TorchABIError, match=match):
            torch_abi.target()


def test_loadable_compares_the_target_with_the_running_torch() -> None:
    assert torch_abi.loadable("2.10", running=(2, 11))
    assert torch_abi.loadable("2.13", running=(2, 13))
    assert not torch_abi.loadable("2.14", running=(2, 13))
    assert not torch_abi.loadable("None", running=(2, 13))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
@pytest.mark.parametrize("family,name", [(s.family, b.name) for s, b in spec_builds() if b.backend == "cpu"])
def test_host_op_links_only_the_stable_c_shim(family: str, name: str, tmp_path, monkeypatch) -> None:
    tmp_path.chmod(0o700)
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(tmp_path))
    module = builder_class(family, name)().load()
    out = subprocess.run(["nm", "-D", "--undefined-only", str(module.path)], capture_output=True, text=True, check=True)
    symbols = [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]
    assert any(s.startswith("aoti_torch_") for s in symbols)  # the check sees real symbols
    assert [s for s in symbols if TORCH_CXX.match(s)] == []
    assert [s for s in symbols if not ALLOWED.match(s)] == []
    needed = subprocess.run(["readelf", "-d", str(module.path)], capture_output=True, text=True, check=True).stdout
    libs = re.findall(r"Shared library: \[([^\]]+)\]", needed)
    assert [lib for lib in libs if "torch" in lib or "c10" in lib] == ["libtorch_cpu.so"]
