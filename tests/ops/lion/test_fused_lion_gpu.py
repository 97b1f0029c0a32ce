"""FusedLion / the lion family's GPU implementations on a CUDA GPU (CUDA C++ and Triton).

Against a float64 reference on fresh random data, odd and empty sizes, unaligned views, every dtype
combination of the op spec in one call, poisoned model copies, CUDA/Triton agreement, the spec's error
messages (RuntimeError, the same from both implementations) and opcheck. Skipped without a GPU (marker
``gpu``).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from anyaccel.ops.lion.spec import SPEC

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

IMPLS = ["cuda", pytest.param("triton", marks=pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="triton is not installed"))]
SIZES = [1, 7, 4095, 4097, 16385, 100_003, 0, 262_147]
DTYPE = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "none": None}
COMBOS = [tuple(DTYPE[d] for d in c.as_tuple()) for c in SPEC.dtypes]


def _op(impl: str):
    from anyaccel.ops import dispatch

    return dispatch.load("lion", "cuda", impl)


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
    refs = [_ref_step(p, g, m, 1e-3, 0.9, 0.99, 0.1) for p, g, m in zip(ps, gs, ms, strict=True)]
    op.lion_step(ps, gs, ms, [], 1e-3, 0.9, 0.99, 0.1)
    for (rp, rm, cabs), p, m, n in zip(refs, ps, ms, SIZES, strict=True):
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
    refs = [_ref_step(p, g, m, 1e-2, 0.9, 0.99, 0.0) for p, g, m in zip(ps, gs, ms, strict=True)]
    op.lion_step(ps, gs, ms, [], 1e-2, 0.9, 0.99, 0.0)
    for (rp, rm, cabs), p, m in zip(refs, ps, ms, strict=True):
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
    refs = [_ref_step(p, g, m, 1e-3, 0.95, 0.98, 0.01) for p, g, m in zip(ps, gs, ms, strict=True)]
    op.lion_step(ps, gs, ms, copies, 1e-3, 0.95, 0.98, 0.01)
    for (rp, rm, cabs), p, m, c, n in zip(refs, ps, ms, copies, sizes, strict=True):
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
    c = [(0.9 * m + 0.1 * g).abs() for m, g in zip(base[2], base[1], strict=True)]
    for a, b, ca in zip(out[0][0], out[1][0], c, strict=True):
        sure = ca > 1e-6
        assert torch.allclose(a[sure], b[sure], rtol=1e-6, atol=1e-7)
    for a, b in zip(out[0][1], out[1][1], strict=True):
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
    err = (p.detach().double() - ref_p).abs()
    assert err.max() < 1e-5 or err.gt(1e-5).float().mean() < 1e-3  # sign ties only


def _bad_calls():
    """(name, call(op), expected message regex): the op spec's rules, RuntimeError from every implementation."""
    p, g, m = (_rand(64) for _ in range(3))
    return [
        ("short state", lambda op: op.lion_step([p], [g], [], [], 1e-3, 0.9, 0.99, 0.0),
         r"^lion_step: got 1 params, 1 grads, 0 exp_avgs and 0 model_copies"),
        ("grad dtype", lambda op: op.lion_step([p], [g.half()], [m], [], 1e-3, 0.9, 0.99, 0.0),
         r"^lion_step: params\[0\] has the dtype combination \(param, grad, state, model_copy\) = \(float32, "
         r"float16, float32, none\), which is not supported"),
        ("beta", lambda op: op.lion_step([p], [g], [m], [], 1e-3, 1.5, 0.99, 0.0),
         r"^lion_step: beta1=1\.5 is invalid; accepted: a finite 0 <= beta1 <= 1 representable in float32$"),
        ("float32 overflow", lambda op: op.lion_step([p], [g], [m], [], 1e-3, 0.9, 0.99, 1e39),
         r"^lion_step: weight_decay=1e\+39 is invalid"),
        ("cpu state", lambda op: op.lion_step([p], [g], [m.cpu()], [], 1e-3, 0.9, 0.99, 0.0),
         r"^lion_step: exp_avgs\[0\] is on device cpu; "),
        ("copy length", lambda op: op.lion_step([p], [g], [m], [_rand(64, torch.bfloat16)] * 2, 1e-3, 0.9, 0.99, 0.0),
         r"^lion_step: got 1 params, 1 grads, 1 exp_avgs and 2 model_copies"),
    ]


@pytest.mark.parametrize("impl", IMPLS)
def test_bad_inputs_raise_the_specs_errors(impl):
    op = _op(impl)
    for _, call, pattern in _bad_calls():
        with pytest.raises(RuntimeError, match=pattern):
            call(op)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_cuda_and_triton_fail_with_the_same_words():
    for name, call, _ in _bad_calls():
        if name == "cpu state":
            continue  # test_a_cpu_tensor_is_reported_alike
        messages = []
        for impl in ("cuda", "triton"):
            with pytest.raises(RuntimeError) as err:
                call(_op(impl))
            messages.append(str(err.value))
        assert messages[0] == messages[1], name


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_a_cpu_tensor_is_reported_alike():
    p, g, m = (_rand(64) for _ in range(3))
    messages = []
    for impl in ("cuda", "triton"):
        with pytest.raises(RuntimeError) as err:
            _op(impl).lion_step([p], [g], [m.cpu()], [], 1e-3, 0.9, 0.99, 0.0)
        messages.append(str(err.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("group", ["no_copy", "with_copy"])
def test_every_spec_combination_in_one_call(impl, group):
    op = _op(impl)
    combos = [c for c in COMBOS if (c[3] is None) == (group == "no_copy")]
    tensors = [(n, c) for n in (1, 7, 4097, 0, 70_001) for c in combos]
    ps = [_rand(n, c[0]) for n, c in tensors]
    gs = [_rand(n, c[1]) for n, c in tensors]
    ms = [_rand(n, c[2]) for n, c in tensors]
    copies = [torch.full((n,), float("nan"), dtype=c[3], device="cuda") for n, c in tensors] if group == "with_copy" \
        else []
    refs = [_ref_step(p, g, m, 1e-2, 0.9, 0.99, 0.01) for p, g, m in zip(ps, gs, ms, strict=True)]
    op.lion_step(ps, gs, ms, copies, 1e-2, 0.9, 0.99, 0.01)
    for i, ((rp, rm, cabs), (n, c)) in enumerate(zip(refs, tensors, strict=True)):
        if n == 0:
            continue
        sure = cabs > 1e-3
        p_ulp, m_ulp = torch.finfo(c[0]).eps, torch.finfo(c[2]).eps
        assert ((ps[i].double() - rp).abs()[sure] <= p_ulp * rp.abs()[sure] * 1.01 + 1e-6).all(), (n, c)
        assert ((ms[i].double() - rm).abs() <= m_ulp * rm.abs() * 1.01 + 1e-6).all(), (n, c)
        if copies:
            assert torch.equal(copies[i], ps[i].to(c[3])), (n, c)


@pytest.mark.parametrize("impl", IMPLS)
def test_meta_tensors_run_the_validating_fake(impl):
    meta = [torch.empty(10, device="meta")]
    with pytest.raises(RuntimeError, match=r"^lion_step: params\[0\] is on device meta; this kernel takes cuda"):
        _op(impl).lion_step(meta, meta, meta, [], 1e-3, 0.9, 0.99, 0.0)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: "-".join(str(d).removeprefix("torch.") for d in c))
def test_opcheck(impl, combo):
    sizes = (5, 4099, 0)
    param, grad, state, copy = combo
    args = ([_rand(n, param) for n in sizes], [_rand(n, grad) for n in sizes], [_rand(n, state) for n in sizes],
            [torch.zeros(n, dtype=copy, device="cuda") for n in sizes] if copy is not None else [],
            1e-3, 0.9, 0.99, 0.01)
    torch.library.opcheck(_op(impl).lion_step, args)


@pytest.mark.parametrize("impl", IMPLS)
def test_state_in_param_dtype(impl):
    """bf16 params and bf16 momentum: the momentum is the fp32 update rounded once to bf16."""
    op = _op(impl)
    sizes = [5, 4099, 65_537]
    ps, gs, ms = ([_rand(n, torch.bfloat16) for n in sizes] for _ in range(3))
    refs = [_ref_step(p, g, m, 1e-2, 0.9, 0.99, 0.0) for p, g, m in zip(ps, gs, ms, strict=True)]
    op.lion_step(ps, gs, ms, [], 1e-2, 0.9, 0.99, 0.0)
    for (rp, rm, cabs), p, m in zip(refs, ps, ms, strict=True):
        assert m.dtype == torch.bfloat16
        ulp = torch.finfo(torch.bfloat16).eps
        # one bf16 rounding of the fp32 result, plus fp32's absolute error where beta2 * m + (1 - beta2) * g cancels
        assert ((m.double() - rm).abs() <= ulp * rm.abs() * 1.01 + 1e-6).all()
        sure = cabs > 1e-3
        assert ((p.double() - rp).abs()[sure] <= ulp * rp.abs()[sure] * 1.01 + 1e-6).all()
