"""TorchCPUOpBuilder and the spec's host builds: the real CPU Adam op builds, loads, reports its ISA and passes
opcheck with its fake; its commands are the stable-ABI ones (two translation units, the ABI target, hidden
visibility, only libtorch_cpu linked, no OpenMP)."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
import torch

from anyaccel.op_builder import CPUAdamBuilder, CPULionBuilder, TorchCPUOpBuilder
from anyaccel.op_builder.core.hooks import PACKAGE_DIR
from anyaccel.op_builder.errors import ISAError, OpBuilderError
from anyaccel.op_builder.toolchains import schema, torch_abi
from anyaccel.op_builder.toolchains.cpu_isa import ISA_LEVELS, supported_levels

ENV = {"CXX": "/usr/bin/c++"}


@pytest.mark.slow
def test_cpu_adam_load_and_opcheck():
    b = CPUAdamBuilder()
    m = b.load()
    assert m.namespace.startswith("anyaccel_cpu_adam_") and m.isa == b.isa()
    ns = getattr(torch.ops, m.namespace)
    assert ns.isa() == b.isa()
    shapes = [(37,), (5, 9)]
    p = [torch.randn(s) for s in shapes]
    g = [torch.randn(s) for s in shapes]
    mo = [torch.rand(s) for s in shapes]
    v = [torch.rand(s) for s in shapes]
    args = (p, g, mo, v, [], 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, True)
    ref_p = [x.clone() for x in p]
    m.adam_step(*args)
    assert all(not torch.equal(a, b) for a, b in zip(p, ref_p, strict=True)), "adam_step must update params"
    torch.library.opcheck(ns.adam_step.default, args)
    assert b.is_built() and b.is_compatible()


def test_host_builds_are_torch_cpu_builders_made_from_their_spec():
    for cls, family in ((CPUAdamBuilder, "adam"), (CPULionBuilder, "lion")):
        assert issubclass(cls, TorchCPUOpBuilder) and cls.BACKEND == cls.DEVICE_TYPE == "cpu"
        assert cls.SPEC.family == family and cls.BUILD.name == f"cpu_{family}" and cls.NAME == f"cpu_{family}"
        assert cls.BUILD_VAR == f"ANYACCEL_BUILD_CPU_{family.upper()}"
        b = cls()
        assert b.sources() == [f"csrc/{family}/cpu_{family}.cpp", f"csrc/{family}/cpu_{family}_kernel.cpp"]
        assert b.source_root() == PACKAGE_DIR and b.include_paths() == ["csrc/includes"]
        assert set(b.generated_headers()) == {schema.HEADER_NAME, schema.DTYPES_HEADER_NAME}


def test_the_commands_of_a_host_build(tmp_path: Path):
    b = CPUAdamBuilder()
    gen = tmp_path / "gen"
    steps = b.compile_steps(ENV, "anyaccel_ns", gen, tmp_path)
    assert [s.source.name for s in steps] == ["cpu_adam.cpp", "cpu_adam_kernel.cpp"]  # compiled in parallel
    assert [s.obj for s in steps] == [tmp_path / "0_cpu_adam.o", tmp_path / "1_cpu_adam_kernel.o"]
    cmd = list(steps[0].command)
    assert cmd[0] == ENV["CXX"] and "-std=c++17" in cmd and "-fPIC" in cmd and "-O3" in cmd
    assert "-fvisibility=hidden" in cmd and f"-fmacro-prefix-map={PACKAGE_DIR.parent}/=" in cmd
    assert torch_abi.target_macro((2, 10)) in cmd and "-DANYACCEL_OP_NAMESPACE=anyaccel_ns" in cmd
    assert f"-I{gen}" in cmd and f"-I{PACKAGE_DIR / 'csrc/includes'}" in cmd
    assert cmd[cmd.index("-isystem") + 1] == str(torch_abi.include_dir())
    assert ISA_LEVELS[b.isa()].compile_args() == cmd[cmd.index("-O3") + 1:][:len(ISA_LEVELS[b.isa()].compile_args())]
    python_headers = sysconfig.get_paths()["include"]
    assert not [f for f in cmd if python_headers in f or "csrc/api/include" in f or f == "-fopenmp"], cmd
    link = b.link_command(ENV)
    assert link[:2] == [ENV["CXX"], "-shared"] and link[-2:] == [f"-L{torch_abi.library_dir()}", "-ltorch_cpu"]
    assert not [f for f in link if f.startswith("-l") and f != "-ltorch_cpu"], link


def test_a_source_that_is_not_cpp_is_refused(tmp_path: Path):
    class Odd(TorchCPUOpBuilder):
        NAME = "odd_cpu"
        BUILD_VAR = "ANYACCEL_BUILD_ODD_CPU"

        def sources(self):
            return ["csrc/adam/fused_adam_cuda.cu"]

    with pytest.raises(OpBuilderError, match=r"suffix '\.cu'; the cpu backend compiles \.cpp, \.cc, \.cxx files"):
        Odd().compile_steps(ENV, "ns", tmp_path, tmp_path)


def test_an_explicit_isa_level_is_built_whatever_the_cpu(monkeypatch):
    monkeypatch.setenv("ANYACCEL_CPU_ISA", "portable")
    assert CPUAdamBuilder().isa() == "portable"
    forced = CPUAdamBuilder(isa="avx512")  # an AOT variant of a wheel: not checked against this CPU
    assert forced.isa() == "avx512" and "-mavx512f" in forced.cxx_args()
    assert CPUAdamBuilder(isa="portable").cxx_args() == ["-O3"]
    sve = CPUAdamBuilder(isa="sve")  # the aarch64 wheel's SVE variant
    assert "-DANYACCEL_ISA_SVE" in sve.cxx_args() and "-march=armv8.2-a+sve" in sve.cxx_args()
    with pytest.raises(ISAError, match="'sse9' is not one of avx512, avx2, sve, neon, portable"):
        CPUAdamBuilder(isa="sse9")


def test_a_bad_isa_variable_makes_the_builder_incompatible(monkeypatch):
    monkeypatch.setenv("ANYACCEL_CPU_ISA", "sse9")
    ok, reason = CPUAdamBuilder().compatibility()
    assert not ok and "sse9" in reason
    assert CPUAdamBuilder().buildability()[0] is False and not CPUAdamBuilder().is_built()


def test_the_default_level_is_the_best_this_cpu_runs():
    assert CPUAdamBuilder().isa() == supported_levels()[0]


def test_no_name_no_builder():
    class Nameless(TorchCPUOpBuilder):
        pass

    with pytest.raises(ValueError, match="NAME=''"):
        Nameless()


def test_builder_returns_a_setuptools_extension_with_the_same_flags():
    ext = CPUAdamBuilder().builder()
    assert ext.name == CPUAdamBuilder().absolute_name()
    assert [Path(s).name for s in ext.sources] == ["cpu_adam.cpp", "cpu_adam_kernel.cpp"]
    flags = ext.extra_compile_args["cxx"]
    assert torch_abi.target_macro((2, 10)) in flags and any(f.startswith("-DANYACCEL_OP_NAMESPACE=") for f in flags)
    assert (Path(ext.include_dirs[0]) / schema.HEADER_NAME).is_file()


def test_per_source_flags_reach_only_their_translation_unit_and_the_key(tmp_path: Path):
    """The spec's ``source_cxx_args`` (``-O1`` for the registration unit) come after ``-O3`` in that unit's
    command only, and are part of the cache key (a change rebuilds)."""
    from anyaccel.spec import REGISTRATION_CXX_ARGS

    b = CPUAdamBuilder()
    glue, kernel = b.sources()
    assert b.source_cxx_args(glue) == list(REGISTRATION_CXX_ARGS) and b.source_cxx_args(kernel) == []
    steps = b.compile_steps(ENV, "anyaccel_ns", tmp_path, tmp_path)
    glue_cmd, kernel_cmd = (list(s.command) for s in steps)
    assert glue_cmd[-len(REGISTRATION_CXX_ARGS):] == list(REGISTRATION_CXX_ARGS)
    assert glue_cmd.index("-O1") > glue_cmd.index("-O3")  # the later -O wins
    assert "-O1" not in kernel_cmd and "-O3" in kernel_cmd
    assert b.key_inputs()["source_cxx_args"] == {glue: list(REGISTRATION_CXX_ARGS)}

