"""``anyaccel._compat.triton_interpreter``: the interpreter check, and the probe that reports its reason."""

from __future__ import annotations

import importlib.util

import pytest

from anyaccel._compat import triton_interpreter
from anyaccel.ops.nn import probes


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_the_check_answers_with_a_reason() -> None:
    works, reason = triton_interpreter.scalar_loop_bounds()
    assert isinstance(works, bool) and reason
    if not works:
        assert "Triton" in reason and "NumPy" in reason and "numpy<2.4" in reason


def test_the_probe_reports_an_interpreter_that_cannot_run_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(triton_interpreter, "scalar_loop_bounds", lambda: (False, "Triton 3.6.0 ... NumPy 2.4.6"))
    assert probes.triton_interpreter() == (False, "Triton 3.6.0 ... NumPy 2.4.6")
    monkeypatch.setattr(triton_interpreter, "scalar_loop_bounds", lambda: (True, "fine"))
    assert probes.triton_interpreter()[0] is True
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert probes.triton_interpreter()[0] is False
