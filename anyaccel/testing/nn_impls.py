"""Test parametrisation of the model ops: which (device, implementation) pairs run on this machine.

- ``("cpu", "torch")``: the portable implementation, always;
- ``("cpu", "triton_interpreter")``: the Triton kernels in Triton's interpreter, when Triton is installed
  and ``TRITON_INTERPRET=1`` (the test suites' ``conftest.py`` sets it on machines without a CUDA device,
  before any kernel module is imported: Triton reads it when ``@triton.jit`` runs);
- ``("cuda", "triton")`` and ``("cuda", "torch")``: marked ``gpu``, skipped without a CUDA device.

Imports pytest (for the parameter marks); for test suites only.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

HAS_TRITON = importlib.util.find_spec("triton") is not None
HAS_CUDA = bool(torch.get_device_module("cuda").is_available())
#: The model ops' dtypes.
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def use_interpreter_without_gpu() -> None:
    """Set ``TRITON_INTERPRET=1`` when Triton is installed and no CUDA device is present (call it from a
    ``conftest.py``, before any Triton kernel module is imported)."""
    if HAS_TRITON and not HAS_CUDA:
        os.environ.setdefault("TRITON_INTERPRET", "1")


def interpreter() -> bool:
    """Whether the Triton kernels run in the interpreter here (Triton installed, ``TRITON_INTERPRET=1``, no
    CUDA device, and an interpreter that runs them with this NumPy: `interpreter_reason`)."""
    return HAS_TRITON and not HAS_CUDA and os.environ.get("TRITON_INTERPRET") == "1" and \
        interpreter_reason() == ""


def interpreter_reason() -> str:
    """Why the interpreter cannot run the kernels here ("" when it can, or when it is not switched on)."""
    if not HAS_TRITON or HAS_CUDA or os.environ.get("TRITON_INTERPRET") != "1":
        return ""
    from anyaccel._compat.triton_interpreter import scalar_loop_bounds

    works, reason = scalar_loop_bounds()
    return "" if works else reason


def gpu_marks(need_triton: bool = False) -> list[pytest.MarkDecorator]:
    """``gpu`` plus the skip conditions of a test needing a CUDA device (and Triton)."""
    marks = [pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")]
    if need_triton:
        marks.append(pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed"))
    return marks


def impl_params() -> list[object]:
    """The (device, implementation) pairs every correctness test runs on, as pytest params."""
    return [
        pytest.param(("cpu", "torch"), id="cpu-torch"),
        pytest.param(("cpu", "triton_interpreter"), id="cpu-triton_interpreter",
                     marks=pytest.mark.skipif(not interpreter(), reason=interpreter_reason() or
                                              "needs triton, TRITON_INTERPRET=1, no GPU")),
        pytest.param(("cuda", "triton"), id="cuda-triton", marks=gpu_marks(need_triton=True)),
        pytest.param(("cuda", "torch"), id="cuda-torch", marks=gpu_marks()),
    ]


def round_like(t: torch.Tensor, dtype: torch.dtype, impl: str) -> torch.Tensor:
    """``t`` rounded to ``dtype`` as the implementation rounds: to nearest even, except that Triton's
    interpreter converts float32 to bfloat16 by truncation (it emulates bfloat16 with bit shifts; GPUs round
    to nearest even), which the references of ops that round intermediates must model."""
    if impl == "triton_interpreter" and dtype == torch.bfloat16:
        bits = t.detach().float().cpu().view(torch.int32) & -65536
        return bits.view(torch.float32).to(torch.bfloat16)
    return t.detach().cpu().to(dtype)
