"""Fixtures of the override-mode tests: on a machine without a CUDA device the Triton kernels run in
Triton's interpreter (``TRITON_INTERPRET=1`` set before any kernel module is imported) and the mode
replaces the CPU's aten kernels."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from anyaccel.testing import nn_impls

nn_impls.use_interpreter_without_gpu()
FAMILIES = ("rms_norm", "layer_norm", "softmax", "swiglu", "rope", "cross_entropy")


@pytest.fixture
def interpreter_impls(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Force the Triton-interpreter implementation of every family (CPU), so the mode has kernels that are
    not aten's to register."""
    if not nn_impls.interpreter():
        pytest.skip("needs triton and TRITON_INTERPRET=1 on a machine without a GPU")
    for f in FAMILIES:
        monkeypatch.setenv(f"ANYACCEL_IMPL_{f.upper()}", "triton_interpreter")
    yield
    from anyaccel.ops.override import mode

    mode.disable()
