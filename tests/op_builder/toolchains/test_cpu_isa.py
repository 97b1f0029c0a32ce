"""CPU ISA level selection: validation, support checks, flags as data, py-cpuinfo off the default path."""

from __future__ import annotations

import pytest

import anyaccel.op_builder.toolchains.cpu_isa as cpu_isa
from anyaccel.op_builder.errors import ISAError
from anyaccel.op_builder.toolchains.cpu_isa import ISA_LEVELS, resolve_isa, supported_levels


def test_capability_mapping():
    assert supported_levels("AVX512", "x86_64") == ("avx512", "avx2", "portable")
    assert supported_levels("AVX2", "x86_64") == ("avx2", "portable")
    assert supported_levels("DEFAULT", "x86_64") == ("portable",)
    assert supported_levels("SVE256", "aarch64") == ("neon", "portable")
    assert supported_levels("ZVECTOR", "s390x") == ("portable",)


def test_default_never_calls_cpuinfo(monkeypatch):
    def boom():
        raise AssertionError("py-cpuinfo called on the default path")

    monkeypatch.setattr(cpu_isa, "cpuinfo_flags", boom)
    assert resolve_isa({}, "AVX2", "x86_64").name == "avx2"
    assert resolve_isa({}, "AVX512", "x86_64").name == "avx512"
    assert resolve_isa({}, "DEFAULT", "aarch64").name == "neon"
    assert resolve_isa({"ANYACCEL_CPU_ISA": "portable"}, "AVX512", "x86_64").name == "portable"


def test_bad_name_lists_valid_levels():
    with pytest.raises(ISAError) as err:
        resolve_isa({"ANYACCEL_CPU_ISA": "sse9"}, "AVX2", "x86_64")
    for name in ISA_LEVELS:
        assert name in str(err.value)
    assert "sse9" in str(err.value)


def test_unsupported_level_is_refused(monkeypatch):
    monkeypatch.setattr(cpu_isa, "cpuinfo_flags", lambda: frozenset({"avx2", "fma", "f16c"}))
    with pytest.raises(ISAError, match="not supported"):
        resolve_isa({"ANYACCEL_CPU_ISA": "avx512"}, "AVX2", "x86_64")
    with pytest.raises(ISAError, match="not supported"):
        resolve_isa({"ANYACCEL_CPU_ISA": "neon"}, "AVX2", "x86_64")
    # torch capped (e.g. ATEN_CPU_CAPABILITY=default) but py-cpuinfo sees AVX2: accepted
    assert resolve_isa({"ANYACCEL_CPU_ISA": "avx2"}, "DEFAULT", "x86_64").name == "avx2"


def test_one_macro_and_its_flags():
    assert ISA_LEVELS["avx2"].compile_args() == ["-DANYACCEL_ISA_AVX2", "-mavx2", "-mfma", "-mf16c"]
    assert ISA_LEVELS["avx512"].compile_args()[0] == "-DANYACCEL_ISA_AVX512"
    assert "-mavx512f" in ISA_LEVELS["avx512"].flags
    assert ISA_LEVELS["neon"].compile_args() == ["-DANYACCEL_ISA_NEON"]
    assert ISA_LEVELS["portable"].compile_args() == []


def test_this_machine_resolves():
    level = resolve_isa({})
    assert level.name in supported_levels()


def test_levels_are_limited_to_those_the_sources_implement():
    # an op whose sources implement AVX2 and the portable code only: AVX-512 CPUs get AVX2
    assert resolve_isa({}, "AVX512", "x86_64", implemented=("avx2",)).name == "avx2"
    assert resolve_isa({}, "AVX512", "x86_64", implemented=()).name == "portable"  # portable is always there
    assert resolve_isa({"ANYACCEL_CPU_ISA": "portable"}, "AVX2", "x86_64", implemented=("avx2",)).name == "portable"
    with pytest.raises(ISAError, match="not a CPU ISA level of this op; valid levels: avx2, portable"):
        resolve_isa({"ANYACCEL_CPU_ISA": "avx512"}, "AVX512", "x86_64", implemented=("avx2",))


def test_the_forced_level_may_be_written_in_any_case():
    assert resolve_isa({"ANYACCEL_CPU_ISA": " AVX2 "}, "AVX2", "x86_64").name == "avx2"
