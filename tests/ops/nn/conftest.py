"""Fixtures of the model-op tests: which (device, implementation) pairs run here.

- ``("cpu", "torch")``: the portable implementation, always;
- ``("cpu", "triton_interpreter")``: the Triton kernels in Triton's interpreter, when Triton is installed;
  on a machine without a CUDA device this module sets ``TRITON_INTERPRET=1`` before any kernel module is
  imported (Triton reads it when ``@triton.jit`` runs);
- ``("cuda", "triton")`` and ``("cuda", "torch")``: marked ``gpu``, skipped without a CUDA device.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

HAS_TRITON = importlib.util.find_spec("triton") is not None
HAS_CUDA = torch.cuda.is_available()
if HAS_TRITON and not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
INTERPRETER = HAS_TRITON and os.environ.get("TRITON_INTERPRET") == "1"

_gpu = [pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")]

#: (device, implementation) pairs every correctness test runs on.
IMPLS = [
    pytest.param(("cpu", "torch"), id="cpu-torch"),
    pytest.param(("cpu", "triton_interpreter"), id="cpu-triton_interpreter",
                 marks=pytest.mark.skipif(not INTERPRETER, reason="needs triton and TRITON_INTERPRET=1 (no GPU)")),
    pytest.param(("cuda", "triton"), id="cuda-triton",
                 marks=[*_gpu, pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")]),
    pytest.param(("cuda", "torch"), id="cuda-torch", marks=_gpu),
]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(params=IMPLS)
def device_impl(request: pytest.FixtureRequest) -> tuple[str, str]:
    """One (device, implementation) pair."""
    return request.param


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def round_like(t: torch.Tensor, dtype: torch.dtype, impl: str) -> torch.Tensor:
    """``t`` rounded to ``dtype`` as the implementation rounds: to nearest even, except that Triton's
    interpreter converts float32 to bfloat16 by truncation (it emulates bfloat16 with bit shifts; GPUs round
    to nearest even), which the references of ops that round intermediates must model."""
    if impl == "triton_interpreter" and dtype == torch.bfloat16:
        bits = t.detach().float().cpu().view(torch.int32) & -65536
        return bits.view(torch.float32).to(torch.bfloat16)
    return t.detach().cpu().to(dtype)
