"""The Triton Adam kernel (anyaccel/ops/adam/triton.py) on the CPU through Triton's interpreter
(``TRITON_INTERPRET=1``), so CI checks the Triton code without a GPU.

The interpreter accepts CPU tensors and reads their memory directly, so the multi-tensor pointer table
(``multi_tensor.work_table``: every tensor addressed as its distance in elements from the first tensor of
its list) works as on a GPU. Against a float64 reference on fresh random data: odd sizes, a 1-element and
an empty tensor, a tensor spanning several programs, fp32, 16-bit params, fp32 masters with bf16 copies.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from anyaccel.testing.references import adam_step_float64

HAS_TRITON = importlib.util.find_spec("triton") is not None
if HAS_TRITON and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytestmark = pytest.mark.skipif(not (HAS_TRITON and os.environ.get("TRITON_INTERPRET") == "1"
                                     and not torch.cuda.is_available()),
                                reason="needs triton and TRITON_INTERPRET=1 on a machine without a GPU")
SIZES = [37, 1, 0, 4099, 8]


def _ref(p, g, m, v, step, lr, b1, b2, eps, wd, adamw):
    return adam_step_float64(p, g, m, v, step=step, lr=lr, beta1=b1, beta2=b2, eps=eps, weight_decay=wd,
                             adamw=adamw)


@pytest.mark.parametrize("adamw", [True, False])
def test_fp32_steps_match_float64(adamw: bool) -> None:
    from anyaccel.ops.adam.triton import adam_step

    ps = [torch.randn(n) for n in SIZES]
    ms = [torch.randn(n) * 0.1 for n in SIZES]
    vs = [torch.rand(n) * 0.01 for n in SIZES]
    ref = [(p.double(), m.double(), v.double()) for p, m, v in zip(ps, ms, vs, strict=True)]
    for step in (1, 2):
        gs = [torch.randn(n) for n in SIZES]
        adam_step(ps, gs, ms, vs, [], step, 1e-2, 0.9, 0.99, 1e-8, 0.05, True, adamw)
        ref = [_ref(r[0], g, r[1], r[2], step, 1e-2, 0.9, 0.99, 1e-8, 0.05, adamw)
               for r, g in zip(ref, gs, strict=True)]
    for (rp, rm, rv), p, m, v in zip(ref, ps, ms, vs, strict=True):
        torch.testing.assert_close(p.double(), rp, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(m.double(), rm, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(v.double(), rv, rtol=1e-5, atol=1e-7)


def test_fp32_masters_with_bf16_model_copies() -> None:
    from anyaccel.ops.adam.triton import adam_step

    ps = [torch.randn(n) for n in SIZES]
    copies = [torch.empty(n, dtype=torch.bfloat16) for n in SIZES]
    gs = [torch.randn(n).bfloat16() for n in SIZES]
    ms, vs = [torch.zeros(n) for n in SIZES], [torch.zeros(n) for n in SIZES]
    want = [_ref(p, g.float(), m, v, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True)[0] for p, g, m, v in
            zip(ps, gs, ms, vs, strict=True)]
    adam_step(ps, gs, ms, vs, copies, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    for p, c, w in zip(ps, copies, want, strict=True):
        torch.testing.assert_close(p.double(), w, rtol=1e-5, atol=1e-6)
        # the interpreter converts float32 to bfloat16 by truncation (GPUs round to nearest): one bf16 ulp
        torch.testing.assert_close(c.double(), w, rtol=0.008, atol=1e-6)


def test_bad_list_is_refused_like_the_cuda_kernel() -> None:
    from anyaccel.ops.adam.triton import adam_step

    p = [torch.randn(4)]
    with pytest.raises(RuntimeError, match="grads"):
        adam_step(p, [], [torch.zeros(4)], [torch.zeros(4)], [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
