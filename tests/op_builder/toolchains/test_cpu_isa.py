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
    # aarch64: torch's capability plays no part (it names SVE for one vector length only); the CPU's features do
    assert supported_levels("SVE256", "aarch64", frozenset()) == ("neon", "portable")
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
    assert ISA_LEVELS["neon"].compile_args() == ["-DANYACCEL_ISA_NEON", "-march=armv8-a+simd"]
    assert ISA_LEVELS["sve"].compile_args() == ["-DANYACCEL_ISA_SVE", "-march=armv8.2-a+sve"]
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


# A faked aarch64 CPU: the features as Linux names them, as getauxval(AT_HWCAP) bits and as /proc/cpuinfo.
HWCAP_ASIMD, HWCAP_SVE = 1 << 1, 1 << 22
CPUINFO_SVE = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes sve sha512\nCPU part\t: 0xd40\n"
CPUINFO_NEON = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\n"


def test_arm_features_from_hwcap_bits_and_proc_cpuinfo():
    assert "sve" in cpu_isa.arm_features(hwcap=HWCAP_ASIMD | HWCAP_SVE)
    assert "sve" not in cpu_isa.arm_features(hwcap=HWCAP_ASIMD)
    assert "asimd" in cpu_isa.arm_features(hwcap=HWCAP_ASIMD)
    # no hwcap word (not Linux, or a C library without getauxval): the Features line of /proc/cpuinfo
    assert "sve" in cpu_isa.arm_features(hwcap=0, cpuinfo_text=CPUINFO_SVE)
    assert "sve" not in cpu_isa.arm_features(hwcap=0, cpuinfo_text=CPUINFO_NEON)
    assert cpu_isa.arm_features(hwcap=0, cpuinfo_text="") == frozenset()


@pytest.mark.parametrize("machine", ["aarch64", "arm64"])
def test_aarch64_picks_sve_where_the_cpu_reports_it_else_neon(machine, monkeypatch):
    monkeypatch.setattr(cpu_isa, "cpuinfo_flags", lambda: frozenset())
    sve_cpu = cpu_isa.arm_features(hwcap=HWCAP_ASIMD | HWCAP_SVE)
    neon_cpu = cpu_isa.arm_features(hwcap=HWCAP_ASIMD)
    assert supported_levels("DEFAULT", machine, sve_cpu) == ("sve", "neon", "portable")
    assert supported_levels("DEFAULT", machine, neon_cpu) == ("neon", "portable")
    assert resolve_isa({}, "DEFAULT", machine, features=sve_cpu).name == "sve"
    assert resolve_isa({}, "DEFAULT", machine, features=neon_cpu).name == "neon"
    # an op whose sources have no SVE code gets NEON on an SVE CPU
    assert resolve_isa({}, "DEFAULT", machine, implemented=("neon",), features=sve_cpu).name == "neon"
    # forced levels: sve and neon are accepted names; sve on a CPU without it is refused, naming what runs
    assert resolve_isa({"ANYACCEL_CPU_ISA": "SVE"}, "DEFAULT", machine, features=sve_cpu).name == "sve"
    assert resolve_isa({"ANYACCEL_CPU_ISA": "neon"}, "DEFAULT", machine, features=sve_cpu).name == "neon"
    with pytest.raises(ISAError, match=r"ANYACCEL_CPU_ISA=sve is not supported .*supported levels: neon, portable"):
        resolve_isa({"ANYACCEL_CPU_ISA": "sve"}, "DEFAULT", machine, features=neon_cpu)


def test_arm_levels_never_apply_on_x86(monkeypatch):
    monkeypatch.setattr(cpu_isa, "cpuinfo_flags", lambda: frozenset({"avx2", "fma", "f16c"}))
    assert "sve" not in supported_levels("AVX512", "x86_64", frozenset({"sve"}))
    with pytest.raises(ISAError, match="not supported"):
        resolve_isa({"ANYACCEL_CPU_ISA": "sve"}, "AVX2", "x86_64")


def test_features_of_another_machine_are_not_read_from_this_one(monkeypatch):
    # asking for aarch64 levels on x86 must not read this CPU's AT_HWCAP (x86 bits mean other things)
    monkeypatch.setattr(cpu_isa, "platform", type("P", (), {"machine": staticmethod(lambda: "x86_64")}))

    def boom() -> int:
        raise AssertionError("read this machine's hwcap for another machine")

    monkeypatch.setattr(cpu_isa, "_read_hwcap", boom)
    assert supported_levels("DEFAULT", "aarch64") == ("neon", "portable")


def test_this_aarch64_machine_reads_its_own_features(monkeypatch):
    monkeypatch.setattr(cpu_isa, "platform", type("P", (), {"machine": staticmethod(lambda: "aarch64")}))
    monkeypatch.setattr(cpu_isa, "_read_hwcap", lambda: HWCAP_ASIMD | HWCAP_SVE)
    assert supported_levels() == ("sve", "neon", "portable")
    monkeypatch.setattr(cpu_isa, "_read_hwcap", lambda: None)
    monkeypatch.setattr(cpu_isa, "_read_proc_cpuinfo", lambda: CPUINFO_NEON)
    assert supported_levels() == ("neon", "portable")
