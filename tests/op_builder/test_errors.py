"""Failed builds explain themselves: every diagnosis code, the log kept, same error again, env unchanged."""

from __future__ import annotations

import os

import pytest
from opb_helpers import REAL_CXX, make_wrapper, unique
from toy_builder import ToyBuilder

import anyaccel.op_builder.core.builder as builder_mod
from anyaccel.op_builder.errors import DIAGNOSES, BuildError, ToolchainError, diagnose, first_error_lines

# A fixture log line per code, as gcc / clang / ld / ninja / torch print them.
LOGS = {
    "killed": "c++: fatal error: Killed signal terminated program cc1plus\ncompilation terminated.",
    "unsupported_isa": "c++: error: unrecognized command-line option '-mavx512f'",
    "python_headers_missing": "pybind11/detail/common.h:274:10: fatal error: Python.h: No such file or directory",
    "header_missing": "toy.cpp:1:10: fatal error: foo.h: No such file or directory",
    "library_missing": "/usr/bin/ld: cannot find -lcurand: No such file or directory",
    "cuda_mismatch": "RuntimeError: The detected CUDA version (12.1) mismatches the version that was used to "
                     "compile PyTorch (11.8).",
    "ninja_missing": "RuntimeError: Ninja is required to load C++ extensions",
    "compiler_missing": "/bin/sh: 1: c++: command not found",
    "compile_error": "toy.cpp:3:12: error: expected ')' before '{' token",
}


@pytest.mark.parametrize("code", sorted(LOGS))
def test_every_diagnosis_from_a_fixture_log(code):
    assert diagnose(LOGS[code]).code == code
    assert DIAGNOSES[code].fix


@pytest.mark.parametrize("log", [
    # aarch64 GCC without SVE support, and an x86 GCC given the aarch64 flag (GCC 12, UTF-8 quotes)
    "cc1plus: error: invalid feature modifier \u2018sve\u2019 in \u2018-march=armv8.2-a+sve\u2019",
    "cc1plus: error: unknown value \u2018armv9.9-a\u2019 for \u2018-march\u2019",
    "cc1plus: error: bad value \u2018armv8.2-a+sve\u2019 for \u2018-march=\u2019 switch",
])
def test_rejected_arm_march_flags_are_unsupported_isa(log):
    assert diagnose(log).code == "unsupported_isa"


def test_killed_from_return_code():
    assert diagnose("", returncode=-9).code == "killed"
    assert diagnose("Killed", returncode=137).code == "killed"


def test_first_error_lines_skip_commands():
    text = "[1/2] c++ -c a.cpp -o a.o\nFAILED: a.o\nc++ -c a.cpp\na.cpp:1: error: boom\nninja: build stopped"
    assert first_error_lines(text) == ("a.cpp:1: error: boom",)


def _fail(builder: ToyBuilder) -> BuildError:
    with pytest.raises(BuildError) as err:
        builder.load()
    return err.value


def test_compile_error_is_explained_and_raised_again():
    before = dict(os.environ)
    b = ToyBuilder(unique(), source="broken.cpp")
    err = _fail(b)
    assert err.code == "compile_error" and err.op == "toy"
    assert "broken.cpp" in err.command and err.returncode not in (None, 0)
    assert any("error" in line for line in err.error_lines)
    assert err.log_path.is_file() and "broken.cpp" in err.log_path.read_text()
    assert str(err.log_path) in str(err) and DIAGNOSES["compile_error"].fix in str(err)
    assert _fail(ToyBuilder(b.variant, source="broken.cpp")) is err, "a second attempt raises the same error"
    assert dict(os.environ) == before, "a failed build must leave os.environ unchanged"


def test_header_missing():
    err = _fail(ToyBuilder(unique(), source="missing_header.cpp"))
    assert err.code == "header_missing" and "anyaccel_no_such_header.h" in "\n".join(err.error_lines)


def test_compiler_missing_without_running_anything(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    err = _fail(ToyBuilder(unique()))
    assert err.code == "compiler_missing" and "no-such-c++" in str(err) and err.log_path.is_file()


def test_ninja_missing(monkeypatch):
    def no_ninja():
        raise ToolchainError("ninja_missing", "ninja is neither installed as a Python package nor on PATH")

    monkeypatch.setattr(builder_mod, "require_ninja", no_ninja)
    assert _fail(ToyBuilder(unique())).code == "ninja_missing"


def test_unsupported_isa_and_killed_from_real_compiler_runs(monkeypatch, tmp_path):
    before = dict(os.environ)
    refuse = make_wrapper(tmp_path, "case \" $* \" in *\" -mavx512f \"*|*\" -mavx2 \"*) "
                                    "echo \"c++: error: unrecognized command-line option '-mavx2'\" >&2; "
                                    "exit 1;; esac\n"
                                    f'exec {REAL_CXX} "$@"\n', name="refusing-cxx")
    monkeypatch.setenv("CXX", str(refuse))
    if ToyBuilder().isa() in ("avx512", "avx2"):
        assert _fail(ToyBuilder(unique())).code == "unsupported_isa"
    killer = make_wrapper(tmp_path, 'case " $* " in *" -c "*) kill -9 $$;; esac\n' f'exec {REAL_CXX} "$@"\n',
                          name="killed-cxx")
    monkeypatch.setenv("CXX", str(killer))
    err = _fail(ToyBuilder(unique()))
    assert err.code == "killed" and "MAX_JOBS" in str(err)
    monkeypatch.delenv("CXX")
    assert dict(os.environ) == before


def test_error_is_picklable():
    import pickle

    err = BuildError("toy", DIAGNOSES["killed"], command="c++ x", returncode=137, error_lines=("Killed",))
    again = pickle.loads(pickle.dumps(err))
    assert again.code == "killed" and again.returncode == 137 and str(again) == str(err)


def test_every_code_has_a_summary_and_a_fix_and_timeout_is_one():
    assert {"timeout", "load_error", "compile_error", "killed"} <= set(DIAGNOSES)
    for code, d in DIAGNOSES.items():
        assert d.code == code and d.summary and d.fix
    assert "ANYACCEL_BUILD_TIMEOUT" in DIAGNOSES["timeout"].summary + DIAGNOSES["timeout"].fix


def test_a_library_that_does_not_load_is_a_load_error_with_the_loaders_words(tmp_path):
    """A published entry whose library the dynamic loader refuses: BuildError ``load_error`` naming the file and
    the loader's own message (torch.ops.load_library hides it)."""
    from anyaccel.op_builder.core.cache import Cache
    from anyaccel.op_builder.core.integrity import library_record
    from anyaccel.op_builder.core.manifest import compute_key, write_manifest

    b = ToyBuilder(unique())
    inputs = b.key_inputs()
    key = compute_key(inputs)
    entry = Cache.open().entry("toy", key)
    entry.mkdir(parents=True)
    (entry / "op.so").write_bytes(b"\x7fELF" + b"\0" * 60)  # an ELF header and nothing else
    write_manifest(entry, {"key": key, "namespace": b.namespace(key), "isa": b.isa(), "inputs": inputs,
                           **library_record(entry / "op.so")})
    err = _fail(b)
    assert err.code == "load_error" and str(entry / "op.so") in str(err)
    assert "file too short" in err.detail or "ELF" in err.detail, err.detail  # the dynamic loader's own words
