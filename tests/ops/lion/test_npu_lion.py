"""The NPU implementation of ``lion_step`` (anyaccel/ops/lion/npu.py: torch ``_foreach_*`` ops, which
torch_npu fuses), run on the CPU against the paper's update in float64 and for the spec's validation."""

from __future__ import annotations

import pytest
import torch

from anyaccel.ops.lion.npu import lion_step


def _params(dtype: torch.dtype, n: int = 3) -> list[torch.Tensor]:
    return [torch.randn(s, dtype=dtype) for s in (7, 33, 129)[:n]]


def _moments(ps: list[torch.Tensor], beta1: float) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Random momenta and gradients whose update direction ``beta1 * m + (1 - beta1) * g`` is at least 0.05 away
    from 0. Near 0 its sign depends on the order of the rounding steps: the op computes it as ``lerp(m, g, 1 -
    beta1)``, a reference as a weighted sum, and both are right. Such draws are moved, not skipped, so every
    element is still checked."""
    ms, gs = [], []
    for p in ps:
        m, g = torch.randn(p.shape).to(p.dtype), torch.randn(p.shape).to(p.dtype)
        near_zero = (beta1 * m.double() + (1 - beta1) * g.double()).abs() < 0.05
        m = torch.where(near_zero, m + 0.25, m)
        assert (beta1 * m.double() + (1 - beta1) * g.double()).abs().min() >= 0.05
        ms.append(m)
        gs.append(g)
    return ms, gs


@pytest.mark.parametrize("copy_dtype", [torch.float16, torch.bfloat16])
def test_lion_step_matches_the_paper_and_writes_the_copies(copy_dtype: torch.dtype) -> None:
    lr, b1, b2, wd = 1e-3, 0.9, 0.99, 0.1
    ps = _params(torch.float32)
    ms, gs = _moments(ps, b1)
    exp_p = [p.double() * (1 - lr * wd) - lr * torch.sign(b1 * m.double() + (1 - b1) * g.double())
             for p, m, g in zip(ps, ms, gs, strict=True)]
    exp_m = [b2 * m.double() + (1 - b2) * g.double() for m, g in zip(ms, gs, strict=True)]
    copies = [torch.full_like(p, float("nan"), dtype=copy_dtype) for p in ps]
    lion_step(ps, gs, ms, copies, lr, b1, b2, wd)
    for p, m, c, ep, em in zip(ps, ms, copies, exp_p, exp_m, strict=True):
        torch.testing.assert_close(p.double(), ep, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(m.double(), em, rtol=1e-6, atol=1e-6)
        assert torch.equal(c, p.to(copy_dtype))


def test_16bit_params_and_state_round_once() -> None:
    lr, b1, b2 = 1e-2, 0.9, 0.99
    ps = [p.to(torch.bfloat16) for p in _params(torch.float32)]
    ms, gs = _moments(ps, b1)
    exp_p = [(p.float() - lr * torch.sign(b1 * m.float() + (1 - b1) * g.float())).to(torch.bfloat16)
             for p, m, g in zip(ps, ms, gs, strict=True)]
    lion_step(ps, gs, ms, [], lr, b1, b2, 0.0)
    for p, e in zip(ps, exp_p, strict=True):
        assert p.dtype == torch.bfloat16
        torch.testing.assert_close(p, e, rtol=torch.finfo(torch.bfloat16).eps, atol=1e-6)


@pytest.mark.parametrize("call,pattern", [
    (lambda ps, z: lion_step(ps, z, z, [], 1e-3, 1.5, 0.99, 0.0),
     r"^lion_step: beta1=1\.5 is invalid; accepted: a finite 0 <= beta1 <= 1 representable in float32$"),
    (lambda ps, z: lion_step(ps, z, z, [], 1e-3, 0.9, 0.99, float("inf")), r"^lion_step: weight_decay=inf is invalid"),
    (lambda ps, z: lion_step([], [], [], [], 1e-3, 0.9, 0.99, 0.0), r"^lion_step: params is empty"),
    (lambda ps, z: lion_step(ps, z, z[:1], [], 1e-3, 0.9, 0.99, 0.0),
     r"^lion_step: got 2 params, 2 grads, 1 exp_avgs and 0 model_copies"),
    (lambda ps, z: lion_step(ps, [z[0], torch.zeros(5)], z, [], 1e-3, 0.9, 0.99, 0.0),
     r"^lion_step: grads\[1\] has shape \[5\] but params\[1\] has shape \[33\]"),
    (lambda ps, z: lion_step(ps, z, z, [t.double() for t in z], 1e-3, 0.9, 0.99, 0.0),
     r"^lion_step: params\[0\] has the dtype combination \(param, grad, state, model_copy\) = \(float32, float32, "
     r"float32, float64\), which is not supported"),
])
def test_npu_lion_checks_arguments_like_the_other_kernels(call, pattern) -> None:
    ps = _params(torch.float32, 2)
    z = [torch.zeros_like(p) for p in ps]
    before = [p.clone() for p in ps]
    with pytest.raises(RuntimeError, match=pattern):
        call(ps, z)
    assert all(torch.equal(a, b) for a, b in zip(ps, before, strict=True))
