"""The build driver of the stable-ABI ops (anyaccel/op_builder/toolchains/ninja.py): the ninja file, a real
build, the wall-time bound ``ANYACCEL_BUILD_TIMEOUT`` and what a timeout leaves behind.

The slow "compiler" is a shell script that starts a background ``sleep`` and waits: the timeout must kill
it and its child, never let them outlive the build. Nothing here measures time; the bound is the driver's.
"""

from __future__ import annotations

import json
import math
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from opb_helpers import REAL_CXX, make_wrapper, unique
from toy_builder import ToyBuilder

from anyaccel.op_builder.errors import BuildError, OpBuilderError, SettingError
from anyaccel.op_builder.toolchains import ninja as nj
from anyaccel.op_builder.toolchains.host import require_ninja

#: The bound used for the slow-compiler tests: long enough for ninja to have started the compiler.
TIMEOUT_S = 2.0

# --------------------------------------------------------------------------------------------------------
# ANYACCEL_BUILD_TIMEOUT
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw,expected", [("", nj.DEFAULT_TIMEOUT_S), ("  ", nj.DEFAULT_TIMEOUT_S), ("10", 10.0),
                                          (" 2.5 ", 2.5), ("1e9", 1e9), ("0.001", 0.001)])
def test_timeout_variable(raw: str, expected: float) -> None:
    assert nj.build_timeout_s({nj.TIMEOUT_ENV: raw}) == expected
    assert nj.build_timeout_s({}) == nj.DEFAULT_TIMEOUT_S == 3600.0


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "1e308", "1e10", "-1", "0", "-0.0", "x", "10s", "1,5"])
def test_bad_timeout_values_are_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(ValueError) as err:
        nj.build_timeout_s({nj.TIMEOUT_ENV: raw})
    assert f"{nj.TIMEOUT_ENV}={raw.strip()!r}" in str(err.value) and "unset it" in str(err.value)


def test_the_variable_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(nj.TIMEOUT_ENV, "42")
    assert nj.build_timeout_s() == 42.0
    monkeypatch.setenv(nj.TIMEOUT_ENV, "nan")
    with pytest.raises(ValueError, match=nj.TIMEOUT_ENV):
        nj.build_timeout_s()


@pytest.mark.parametrize("raw", ["nan", "inf", "1e308", "-1", "x"])
def test_a_bad_timeout_fails_a_build_naming_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(nj.TIMEOUT_ENV, raw)
    with pytest.raises(ValueError, match=nj.TIMEOUT_ENV):
        ToyBuilder(unique()).load()


# --------------------------------------------------------------------------------------------------------
# The ninja file and a real build
# --------------------------------------------------------------------------------------------------------


def test_build_file_compiles_each_step_and_links_the_objects(tmp_path: Path) -> None:
    src_dir = tmp_path / "my src$dir"  # a space and a dollar: escaped for ninja
    src_dir.mkdir()
    steps = [nj.CompileStep(src_dir / "a.cpp", tmp_path / "0_a.o", ("c++", "-O2", "-DX=$Y")),
             nj.CompileStep(src_dir / "b.cu", tmp_path / "1_b.o", ("nvcc", "-arch=sm_90"))]
    path = nj.write_build_file(tmp_path, steps, ["c++", "-shared", "-L/lib", "-ltorch_cpu"], tmp_path / "op.so")
    text = path.read_text()
    assert path == tmp_path / "build.ninja" and text.startswith("ninja_required_version")
    assert "rule compile_0" in text and "rule compile_1" in text and "rule link" in text
    assert f"command = c++ -O2 '-DX=$$Y' -c '{src_dir}/a.cpp'".replace("$dir", "$$dir") in text
    assert "description = compile b.cu" in text and "nvcc -arch=sm_90 -c" in text
    assert f"build {tmp_path}/0_a.o: compile_0 {tmp_path}/my$ src$$dir/a.cpp" in text  # paths escaped for ninja
    link = next(line for line in text.splitlines() if line.startswith("  command = c++ ") and "-shared" in line)
    args = shlex.split(link.removeprefix("  command = "))
    assert args == ["c++", str(tmp_path / "0_a.o"), str(tmp_path / "1_b.o"), "-o", str(tmp_path / "op.so"),
                    "-shared", "-L/lib", "-ltorch_cpu"], "objects first, libraries after them"
    assert f"default {tmp_path}/op.so" in text


def test_a_real_build_through_ninja(tmp_path: Path) -> None:
    (tmp_path / "a.cpp").write_text("extern \"C\" int anyaccel_answer() { return 42; }\n")
    build = tmp_path / "build"
    build.mkdir()
    steps = [nj.CompileStep(tmp_path / "a.cpp", build / "0_a.o", (REAL_CXX, "-fPIC", "-O1"))]
    nj.write_build_file(build, steps, [REAL_CXX, "-shared"], build / "op.so")
    result = nj.run_ninja(require_ninja(), build, 2, dict(os.environ), 120.0)
    assert result.returncode == 0, result.output
    assert (build / "op.so").is_file() and "compile a.cpp" in result.output
    import ctypes

    assert ctypes.CDLL(str(build / "op.so")).anyaccel_answer() == 42
    again = nj.run_ninja(require_ninja(), build, 2, dict(os.environ), 120.0)
    assert again.returncode == 0 and "no work to do" in again.output


def test_a_failing_compiler_is_reported_not_raised(tmp_path: Path) -> None:
    (tmp_path / "bad.cpp").write_text("int broken( { return 0; }\n")
    steps = [nj.CompileStep(tmp_path / "bad.cpp", tmp_path / "0_bad.o", (REAL_CXX, "-fPIC"))]
    nj.write_build_file(tmp_path, steps, [REAL_CXX, "-shared"], tmp_path / "op.so")
    result = nj.run_ninja(require_ninja(), tmp_path, 1, dict(os.environ), 120.0)
    assert result.returncode != 0 and "FAILED:" in result.output and "bad.cpp" in result.output


# --------------------------------------------------------------------------------------------------------
# The wall-time bound
# --------------------------------------------------------------------------------------------------------


def _slow_compiler(directory: Path) -> tuple[Path, Path]:
    """A compiler that never finishes: records "<its pid> <its child's pid>", then waits on a long sleep."""
    pids = directory / "pids"
    script = make_wrapper(directory, f"""sleep 300 &
echo "$$ $!" > "{pids}.part" && mv "{pids}.part" "{pids}"
wait
""", name="slow-cxx")
    return script, pids


def _dead_within(pids: list[int], bound_s: float) -> list[int]:
    """The pids still running after waiting up to ``bound_s`` for them to exit (a zombie counts as exited).

    Waits on pidfds (an event, not a sleep) when the platform has them.
    """
    fds = {}
    for pid in pids:
        try:
            fds[pid] = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
    try:
        pending = dict(fds)
        while pending:
            ready, _, _ = select.select(list(pending.values()), [], [], bound_s)
            if not ready:
                break
            pending = {p: fd for p, fd in pending.items() if fd not in ready}
        return sorted(pending)
    finally:
        for fd in fds.values():
            os.close(fd)


def _cleanup(pids_file: Path) -> list[int]:
    """Kill (by pid) what a slow compiler of this test left running; return those pids."""
    if not pids_file.exists():
        return []
    pids = [int(x) for x in pids_file.read_text().split()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open (Linux 5.3+)")
def test_a_hung_compiler_raises_a_timeout_naming_the_variable(tmp_path: Path) -> None:
    slow, pids_file = _slow_compiler(tmp_path)
    (tmp_path / "a.cpp").write_text("")
    build = tmp_path / "build"
    build.mkdir()
    nj.write_build_file(build, [nj.CompileStep(tmp_path / "a.cpp", build / "0_a.o", (str(slow),))],
                        [str(slow), "-shared"], build / "op.so")
    try:
        with pytest.raises(nj.BuildTimeoutError) as err:
            nj.run_ninja(require_ninja(), build, 1, dict(os.environ), TIMEOUT_S)
        assert isinstance(err.value, OpBuilderError) and isinstance(err.value, TimeoutError)
        assert err.value.seconds == TIMEOUT_S and err.value.command
        assert nj.TIMEOUT_ENV in str(err.value) and "were killed" in str(err.value)
        assert pids_file.exists(), "the slow compiler had started"
    finally:
        _cleanup(pids_file)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open (Linux 5.3+)")
def test_a_timeout_leaves_no_process_behind(tmp_path: Path) -> None:
    slow, pids_file = _slow_compiler(tmp_path)
    (tmp_path / "a.cpp").write_text("")
    build = tmp_path / "build"
    build.mkdir()
    nj.write_build_file(build, [nj.CompileStep(tmp_path / "a.cpp", build / "0_a.o", (str(slow),))],
                        [str(slow), "-shared"], build / "op.so")
    try:
        with pytest.raises(nj.BuildTimeoutError):
            nj.run_ninja(require_ninja(), build, 1, dict(os.environ), TIMEOUT_S)
        pids = [int(x) for x in pids_file.read_text().split()]
        assert len(pids) == 2
        assert _dead_within(pids, 5.0) == [], "the compiler or its child outlived the build"
    finally:
        _cleanup(pids_file)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open (Linux 5.3+)")
def test_a_builder_whose_compiler_hangs_fails_with_the_timeout_diagnosis(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    slow, pids_file = _slow_compiler(tmp_path)
    monkeypatch.setenv("CXX", str(slow))
    monkeypatch.setenv(nj.TIMEOUT_ENV, str(TIMEOUT_S))
    before = dict(os.environ)
    try:
        with pytest.raises(BuildError) as err:
            ToyBuilder(unique()).load()
        assert err.value.code == "timeout" and err.value.op == "toy"
        assert nj.TIMEOUT_ENV in str(err.value) and err.value.log_path is not None and err.value.log_path.is_file()
        assert f"{TIMEOUT_S:g} s" in err.value.detail
        assert dict(os.environ) == before
    finally:
        _cleanup(pids_file)


def test_a_negative_or_nan_bound_never_reaches_ninja() -> None:
    for raw in ("nan", "-5"):
        with pytest.raises(SettingError):
            nj.build_timeout_s({nj.TIMEOUT_ENV: raw})
    assert nj.build_timeout_s({}) == nj.DEFAULT_TIMEOUT_S
    assert math.isfinite(nj.build_timeout_s({nj.TIMEOUT_ENV: "1e9"}))


# --------------------------------------------------------------------------------------------------------
# Compilers that daemonize or flood their output
# --------------------------------------------------------------------------------------------------------


def _daemonizing_compiler(directory: Path) -> tuple[Path, Path]:
    """A compiler that starts a daemon (``setsid``, out of the build's session) holding its output pipe, then
    compiles for real; the daemon appends its pid to the returned file."""
    pids = directory / "daemon-pids"
    script = make_wrapper(directory, f"""setsid sh -c 'echo $$ >> "{pids}"; exec sleep 300' &
exec {REAL_CXX} "$@"
""", name="daemon-cxx")
    return script, pids


def _tiny_build(tmp_path: Path, compiler: Path) -> Path:
    (tmp_path / "a.cpp").write_text("extern \"C\" int anyaccel_answer() { return 42; }\n")
    build = tmp_path / "build"
    build.mkdir()
    nj.write_build_file(build, [nj.CompileStep(tmp_path / "a.cpp", build / "0_a.o", (str(compiler), "-fPIC"))],
                        [str(compiler), "-shared"], build / "op.so")
    return build


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "pidfd_open") or shutil.which("setsid") is None,
                    reason="needs pidfd_open (Linux 5.3+) and setsid")
def test_a_daemonizing_compiler_neither_holds_the_build_nor_outlives_it(tmp_path: Path) -> None:
    """Each step's daemon keeps ninja's output pipe open: the build must still end when ninja does (not at
    the timeout, which would raise), and every daemon must be dead then."""
    compiler, pids_file = _daemonizing_compiler(tmp_path)
    build = _tiny_build(tmp_path, compiler)
    try:
        result = nj.run_ninja(require_ninja(), build, 1, dict(os.environ), 60.0)
        assert result.returncode == 0 and (build / "op.so").is_file(), result.output
        pids = [int(x) for x in pids_file.read_text().split()]
        assert len(pids) == 2, "one daemon per step (compile, link)"
        assert _dead_within(pids, 5.0) == [], "a daemon the compiler started outlived the build"
    finally:
        _cleanup(pids_file)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid")
def test_the_output_is_read_only_until_the_direct_child_exits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that holds the output pipe after the direct child exited (here a daemon the driver itself
    leaves behind) cannot hold the build: the output is read for a bounded time after that exit, not until EOF
    (which would raise the timeout)."""
    pids_file = tmp_path / "daemon-pids"
    monkeypatch.setattr(nj, "_driver", lambda argv: [
        "sh", "-c", f'setsid sh -c \'echo $$ >> "{pids_file}"; exec sleep 300\' & exec "$@"', "sh", *argv])
    build = _tiny_build(tmp_path, Path(REAL_CXX))
    try:
        result = nj.run_ninja(require_ninja(), build, 1, dict(os.environ), 60.0)
        assert result.returncode == 0 and (build / "op.so").is_file(), result.output
    finally:
        _cleanup(pids_file)


CHATTY_SCRIPT = r"""
import json, os, resource, sys
sys.path.insert(0, {tests!r})
from anyaccel.op_builder.toolchains import ninja as nj
from anyaccel.op_builder.toolchains.host import require_ninja
from pathlib import Path
lines = []
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = nj.run_ninja(require_ninja(), Path({build!r}), 1, dict(os.environ), 600.0, on_line=lines.append)
grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({{"returncode": result.returncode, "output_len": len(result.output), "head": result.output[:4096],
                  "tail": result.output[-4096:], "grown_kib": grown_kib,
                  "longest_line": max(map(len, lines)), "lines": len(lines)}}))
"""


@pytest.mark.slow
def test_a_chatty_compiler_costs_linear_time_and_bounded_memory(tmp_path: Path) -> None:
    """64 MiB of output on one line: only the head and tail are kept (memory does not grow with it), the line
    passed to the progress display is cut, and the last words survive. Quadratic handling (minutes for this
    size) is caught by the child's generous timeout, not by a timed assertion."""
    size = 64 << 20
    chatty = make_wrapper(tmp_path, f"""head -c {size} /dev/zero | tr '\\0' x
echo
echo "a.cpp:1:1: error: the last words of a chatty compiler"
exit 1
""", name="chatty-cxx")
    build = _tiny_build(tmp_path, chatty)
    proc = subprocess.run([sys.executable, "-c", CHATTY_SCRIPT.format(tests=str(Path(__file__).parents[1]),
                                                                      build=str(build))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["returncode"] != 0
    assert out["output_len"] <= nj.HEAD_BYTES + nj.TAIL_BYTES + 200, "the whole output was kept"
    assert "FAILED:" in out["head"] and "bytes of build output left out" in out["tail"] + out["head"] or \
        out["output_len"] < size
    assert "the last words of a chatty compiler" in out["tail"] and "build stopped" in out["tail"]
    assert out["longest_line"] <= nj.LINE_BYTES
    assert out["grown_kib"] < 32 << 10, f"memory grew by {out['grown_kib']} KiB for {size >> 20} MiB of output"
