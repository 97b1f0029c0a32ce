"""Build progress (in the build layer): a build shows the op, its variant, the elapsed time and the steps done on a
terminal, and exactly one line per op build elsewhere; never on stdout."""

from __future__ import annotations

import io
import json

import pytest
from integrity_support import BUILDER, LOAD_SCRIPT, child_env, load_in_child, make_wrapper, run_python

from anyaccel.op_builder.core.progress import BuildProgress


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_line_is_redrawn_with_steps_and_time():
    clock, out = FakeClock(), Terminal()
    progress = BuildProgress("cpu_adam", "avx2", stream=out, clock=clock)
    progress.start()
    clock.now += 1.3
    progress.on_line("ninja: Entering directory `/tmp/x'")
    progress.on_line("[1/3] compile cpu_adam_kernel.cpp")
    clock.now += 0.1
    progress.on_tick()  # too soon: no redraw
    clock.now += 1.0
    progress.on_tick()
    progress.on_line("[3/3] link op.so")
    line = progress.finish(True)
    text = out.getvalue()
    frames = text.split("\r\x1b[K")
    assert "anyaccel: building cpu_adam [avx2]    0.0 s" in frames[1]
    assert "1.3 s  [1/3] compile cpu_adam_kernel.cpp" in frames[2]
    assert "2.4 s  [1/3] compile cpu_adam_kernel.cpp" in frames[3]
    assert "[3/3] link op.so" in frames[4]
    assert len(frames) == 6 and frames[-1] == line + "\n"
    assert line == "anyaccel: built op cpu_adam [avx2] in 2.4 s (3 steps)"


def test_not_a_terminal_one_line_per_build():
    clock, out = FakeClock(), io.StringIO()
    progress = BuildProgress("cpu_lion", "portable", stream=out, clock=clock)
    progress.start()
    for k in (1, 2, 3):
        progress.on_line(f"[{k}/3] compile x{k}.cpp")
        clock.now += 1
        progress.on_tick()
    progress.finish(False, "compile_error")
    assert out.getvalue() == "anyaccel: building op cpu_lion [portable] failed after 3.0 s [compile_error]\n"


@pytest.mark.slow
def test_a_real_build_prints_one_line_on_stderr(tmp_path):
    cxx = make_wrapper(tmp_path)
    (result,), stderr = load_in_child(child_env(tmp_path / "cache", cxx))
    assert result["ok"] and result["source"] == "built", result
    lines = [line for line in stderr.splitlines() if line.startswith("anyaccel:")]
    assert len(lines) == 1 and lines[0].startswith("anyaccel: built op cpu_lion [portable] in "), stderr
    assert lines[0].endswith("(3 steps)") and "\r" not in stderr
    (warm,), stderr = load_in_child(child_env(tmp_path / "cache", cxx))
    assert warm["source"] == "cache" and "anyaccel:" not in stderr, "a warm load prints nothing"


@pytest.mark.slow
def test_a_build_is_one_line_also_where_logging_shows_info(tmp_path):
    """``anyaccel build`` configures logging at INFO: a build there showed the progress line and two INFO lines
    (building..., built ... in another number of seconds)."""
    cxx = make_wrapper(tmp_path)
    code = ("import logging; logging.basicConfig(level=logging.INFO, "
            "format='anyaccel: %(levelname)s: %(message)s')\n" + LOAD_SCRIPT.format(builder=BUILDER))
    proc = run_python(code, child_env(tmp_path / "cache", cxx))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])[0]
    assert result["ok"] and result["source"] == "built", result
    lines = [line for line in proc.stderr.splitlines() if "built op" in line or "building op" in line]
    assert len(lines) == 1 and lines[0].startswith("anyaccel: built op cpu_lion [portable] in "), proc.stderr
