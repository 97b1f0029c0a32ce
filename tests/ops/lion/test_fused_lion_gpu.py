"""FusedLion / the fused_lion op on a CUDA GPU, both implementations (CUDA C++ and Triton).

Against a float64 reference on fresh random data, odd and empty sizes, unaligned views, poisoned model
copies, CUDA/Triton agreement and input errors. Skipped without a GPU (marker ``gpu``).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

IMPLS = ["cuda", pytest.param("triton", marks=pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="triton is not installed"))]
SIZES = [1, 7, 4095, 4097, 16385, 100_003, 0, 262_147]


def _op(impl: str):
    from anyaccel.ops import dispatch as implementations

    return implementations.load("fused_lion", "cuda", impl)


def _rand(n, dtype=torch.float32, scale=1.0):
    return (torch.randn(n, device="cuda") * scale).to(dtype)


def _ref_step(p, g, m, lr, b1, b2, wd):
    """One Lion step in float64; also returns |c| so near-zero signs can be excluded."""
    p, g, m = (t.double() for t in (p, g, m))
    c = b1 * m + (1 - b1) * g
    p = p * (1 - lr * wd) - lr * torch.sign(c)
    m = b2 * m + (1 - b2) * g
    return p, m, c.abs()


def _check(p, rp, m, rm, cabs, tol=1e-6):
    # where |c| is within fp32 rounding of 0 the sign may legitimately differ: exclude those elements
    sure = cabs > 1e-6
    assert sure.float().mean() > 0.99
    assert torch.allclose(p.double()[sure], rp[sure], rtol=tol, atol=tol)
    assert torch.allclose(m.double(), rm, rtol=tol, atol=tol)


@pytest.mark.parametrize("impl", IMPLS)
def test_fp32_matches_float64_reference(impl):
    op = _op(impl)
    ps, gs, ms = ([_rand(n) for n in SIZES] for _ in range(3))
    refs = [_ref_step(p, g, m, 1e-3, 0.9, 0.99, 0.1) for p, g, m in zip(ps, gs, ms)]
    op.lion_step(ps, gs, ms, [], 1e-3, 0.9, 0.99, 0.1)
    for (rp, rm, cabs), p, m, n in zip(refs, ps, ms, SIZES):
        if n:
            _check(p, rp, m, rm, cabs)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_params(impl, dtype):
    op = _op(impl)
    sizes = [3, 4099, 65_537]
    ps = [_rand(n, dtype) for n in sizes]
    gs = [_rand(n, dtype) for n in sizes]
    ms = [_rand(n) for n in sizes]
    refs = [_ref_step(p, g, m, 1e-2, 0.9, 0.99, 0.0) for p, g, m in zip(ps, gs, ms)]
    op.lion_step(ps, gs, ms, [], 1e-2, 0.9, 0.99, 0.0)
    for (rp, rm, cabs), p, m in zip(refs, ps, ms):
        sure = cabs > 1e-6
        ulp = torch.finfo(dtype).eps * rp.abs()
        assert ((p.double() - rp).abs() <= ulp * 1.01)[sure].all()
        assert torch.allclose(m.double(), rm, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
def test_master_weights_and_unaligned_views(impl):
    op = _op(impl)
    sizes = [1, 4096, 50_001, 0, 9]
    flat = [_rand(sum(sizes) + 10, dt) for dt in (torch.float32, torch.bfloat16, torch.float32)]
    views, off = [[], [], []], 1
    for n in sizes:
        for k in range(3):
            views[k].append(flat[k][off:off + n])
        off += n + 1
    ps, gs, ms = views
    copies = [torch.full((n,), float("nan"), dtype=torch.bfloat16, device="cuda") for n in sizes]
    refs = [_ref_step(p, g, m, 1e-3, 0.95, 0.98, 0.01) for p, g, m in zip(ps, gs, ms)]
    op.lion_step(ps, gs, ms, copies, 1e-3, 0.95, 0.98, 0.01)
    for (rp, rm, cabs), p, m, c, n in zip(refs, ps, ms, copies, sizes):
        if n:
            _check(p, rp, m, rm, cabs)
            assert torch.equal(c, p.to(torch.bfloat16)), "model copy has unwritten or wrong elements"


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_cuda_and_triton_agree():
    sizes = [5, 4096, 300_001]
    base = [[_rand(n) for n in sizes] for _ in range(3)]
    out = []
    for impl in ("cuda", "triton"):
        ps, gs, ms = ([t.clone() for t in lst] for lst in base)
        _op(impl).lion_step(ps, gs, ms, [], 1e-3, 0.9, 0.99, 0.1)
        out.append((ps, ms))
    c = [(0.9 * m + 0.1 * g).abs() for m, g in zip(base[2], base[1])]
    for a, b, ca in zip(out[0][0], out[1][0], c):
        sure = ca > 1e-6
        assert torch.allclose(a[sure], b[sure], rtol=1e-6, atol=1e-7)
    for a, b in zip(out[0][1], out[1][1]):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("impl", IMPLS)
def test_optimizer_steps(impl):
    from anyaccel.ops.lion import FusedLion

    p = torch.nn.Parameter(torch.randn(5000, device="cuda"))
    ref_p, ref_m = p.detach().double().clone(), torch.zeros(5000, dtype=torch.float64, device="cuda")
    opt = FusedLion([p], lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, impl=impl)
    for _ in range(3):
        p.grad = torch.randn_like(p)
        opt.step()
        ref_p, ref_m, _c = _ref_step(ref_p, p.grad, ref_m, 1e-3, 0.9, 0.99, 0.1)
    assert torch.allclose(opt.state[p]["exp_avg"].double(), ref_m, rtol=1e-5, atol=1e-6)
    assert (p.detach().double() - ref_p).abs().max() < 1e-5 or (p.detach().double() - ref_p).abs().gt(1e-5).float().mean() < 1e-3


@pytest.mark.parametrize("impl", IMPLS)
def test_bad_inputs_raise_clear_errors(impl):
    op = _op(impl)
    p, g, m = (_rand(64) for _ in range(3))
    with pytest.raises(ValueError, match="exp_avgs"):
        op.lion_step([p], [g], [], [], 1e-3, 0.9, 0.99, 0.0)
    with pytest.raises(TypeError, match="dtype"):
        op.lion_step([p], [g.half()], [m], [], 1e-3, 0.9, 0.99, 0.0)
    with pytest.raises(ValueError, match="beta"):
        op.lion_step([p], [g], [m], [], 1e-3, 1.5, 0.99, 0.0)


@pytest.mark.parametrize("impl", IMPLS)
def test_state_in_param_dtype(impl):
    """bf16 params and bf16 momentum: the momentum is the fp32 update rounded once to bf16."""
    op = _op(impl)
    sizes = [5, 4099, 65_537]
    ps, gs, ms = ([_rand(n, torch.bfloat16) for n in sizes] for _ in range(3))
    refs = [_ref_step(p, g, m, 1e-2, 0.9, 0.99, 0.0) for p, g, m in zip(ps, gs, ms)]
    op.lion_step(ps, gs, ms, [], 1e-2, 0.9, 0.99, 0.0)
    for (rp, rm, cabs), p, m in zip(refs, ps, ms):
        assert m.dtype == torch.bfloat16
        ulp = torch.finfo(torch.bfloat16).eps
        # one bf16 rounding of the fp32 result, plus fp32's absolute error where beta2 * m + (1 - beta2) * g cancels
        assert ((m.double() - rm).abs() <= ulp * rm.abs() * 1.01 + 1e-6).all()
        sure = cabs > 1e-3
        assert ((p.double() - rp).abs()[sure] <= ulp * rp.abs()[sure] * 1.01 + 1e-6).all()
