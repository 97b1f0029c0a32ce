"""FusedAdam / the fused_adam op on a CUDA GPU, both implementations (CUDA C++ and Triton).

Against a float64 reference and torch.optim.AdamW(fused=True) on fresh random data; odd sizes, empty
tensors, unaligned views, many tensors of mixed sizes; poisoned model copies; CUDA and Triton agree;
errors for bad inputs. Skipped without a GPU (marker ``gpu``).
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

IMPLS = ["cuda", pytest.param("triton", marks=pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="triton is not installed"))]
SIZES = [1, 3, 7, 8, 4095, 4096, 4097, 16383, 16384, 16385, 100_003, 0, 262_147]


def _op(impl: str):
    from anyaccel.ops import dispatch as implementations

    return implementations.load("fused_adam", "cuda", impl)


def _ref_step(p, g, m, v, step, lr, b1, b2, eps, wd, bias_correction, adamw):
    """One Adam/AdamW step in float64 (torch.optim.AdamW's formula); returns new (p, m, v)."""
    p, g, m, v = (t.double() for t in (p, g, m, v))
    if adamw:
        p = p * (1 - lr * wd)
    else:
        g = g + wd * p
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    bc1 = 1 - b1**step if bias_correction else 1.0
    bc2 = 1 - b2**step if bias_correction else 1.0
    p = p - (lr / bc1) * m / (v.sqrt() / math.sqrt(bc2) + eps)
    return p, m, v


def _rand(n, dtype=torch.float32, scale=1.0):
    return (torch.randn(n, device="cuda") * scale).to(dtype)


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("adamw,bias_correction", [(True, True), (False, True), (True, False)])
def test_fp32_matches_float64_reference(impl, adamw, bias_correction):
    op = _op(impl)
    ps = [_rand(n) for n in SIZES]
    ms = [_rand(n, scale=0.1) for n in SIZES]
    vs = [_rand(n).abs() * 0.01 for n in SIZES]
    ref = [(p.double(), m.double(), v.double()) for p, m, v in zip(ps, ms, vs)]
    hp = dict(lr=1e-2, b1=0.9, b2=0.99, eps=1e-8, wd=0.05)
    for step in (1, 2, 3):
        gs = [_rand(n) for n in SIZES]
        op.adam_step(ps, gs, ms, vs, [], step, hp["lr"], hp["b1"], hp["b2"], hp["eps"], hp["wd"],
                     bias_correction, adamw)
        ref = [_ref_step(*r[:1], g, *r[1:], step, *hp.values(), bias_correction, adamw) for r, g in zip(ref, gs)]
    for (rp, rm, rv), p, m, v, n in zip(ref, ps, ms, vs, SIZES):
        if n == 0:
            continue
        assert _rel(p, rp) < 1e-5, n  # fp32 arithmetic, a few ulps over 3 steps (1-element tensors too)
        assert _rel(m, rm) < 1e-5, n
        assert _rel(v, rv) < 1e-5, n


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_params(impl, dtype):
    op = _op(impl)
    sizes = [5, 4099, 65_537]
    ps = [_rand(n, dtype) for n in sizes]
    gs = [_rand(n, dtype) for n in sizes]
    ms = [_rand(n, scale=0.1) for n in sizes]
    vs = [_rand(n).abs() * 0.01 for n in sizes]
    ref = [_ref_step(p, g, m, v, 4, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, True) for p, g, m, v in zip(ps, gs, ms, vs)]
    op.adam_step(ps, gs, ms, vs, [], 4, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, True)
    for (rp, rm, rv), p, m, v in zip(ref, ps, ms, vs):
        # the result is the fp32 update rounded once to the parameter dtype: within one ulp of the reference
        ulp = torch.finfo(dtype).eps * rp.abs().clamp_min(torch.finfo(dtype).tiny)
        assert ((p.double() - rp).abs() <= ulp * 1.01).all()
        assert _rel(m, rm) < 1e-5 and _rel(v, rv) < 1e-5


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("grad_dtype", [torch.float32, torch.bfloat16])
def test_master_weights_write_poisoned_model_copy(impl, grad_dtype):
    op = _op(impl)
    sizes = [1, 9, 4096, 70_001, 0]
    masters = [_rand(n) for n in sizes]
    gs = [_rand(n, grad_dtype) for n in sizes]
    ms = [_rand(n, scale=0.1) for n in sizes]
    vs = [_rand(n).abs() * 0.01 for n in sizes]
    copies = [torch.full((n,), float("nan"), dtype=torch.bfloat16, device="cuda") for n in sizes]
    ref = [_ref_step(p, g, m, v, 2, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True) for p, g, m, v in zip(masters, gs, ms, vs)]
    op.adam_step(masters, gs, ms, vs, copies, 2, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    for (rp, _, _), p, c, n in zip(ref, masters, copies, sizes):
        if n == 0:
            continue
        assert _rel(p, rp) < 1e-6
        assert not torch.isnan(c).any(), "model copy has unwritten elements"
        assert torch.equal(c, p.to(torch.bfloat16))


@pytest.mark.parametrize("impl", IMPLS)
def test_unaligned_views_and_many_tensors(impl):
    op = _op(impl)
    gen = torch.Generator().manual_seed(torch.seed() % 2**31)
    sizes = torch.randint(1, 20_000, (300,), generator=gen).tolist()
    flat = [_rand(sum(sizes) + 300) for _ in range(4)]
    views = [[], [], [], []]
    off = 1  # odd element offsets: no tensor is 8-element aligned
    for n in sizes:
        for k in range(4):
            views[k].append(flat[k][off:off + n])
        off += n + 1
    ps, gs, ms, vs = views
    for v in vs:
        v.abs_()
    ref = [_ref_step(p, g, m, v, 1, 1e-3, 0.8, 0.9, 1e-6, 0.1, True, False) for p, g, m, v in zip(ps, gs, ms, vs)]
    op.adam_step(ps, gs, ms, vs, [], 1, 1e-3, 0.8, 0.9, 1e-6, 0.1, True, False)
    for (rp, rm, rv), p, m, v in zip(ref, ps, ms, vs):
        assert _rel(p, rp) < 1e-5 and _rel(m, rm) < 1e-5 and _rel(v, rv) < 1e-5


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_cuda_and_triton_agree():
    sizes = [3, 4096, 123_457, 1_000_001]
    inputs = [[_rand(n) for n in sizes] for _ in range(3)]
    inputs[2] = [t.abs() for t in inputs[2]]
    results = []
    for impl in ("cuda", "triton"):
        ps, ms, vs = ([t.clone() for t in lst] for lst in inputs)
        for step in (1, 2):
            torch.manual_seed(step)
            gs = [_rand(n) for n in sizes]
            _op(impl).adam_step(ps, gs, ms, vs, [], step, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, True)
        results.append(ps + ms + vs)
    for a, b in zip(*results):
        assert _rel(a, b) < 1e-6


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("adam_w_mode", [True, False])
def test_optimizer_matches_torch_fused(impl, adam_w_mode):
    from anyaccel.ops.fused_adam import FusedAdam

    shapes = [(33, 65), (1000,), (7,), (4, 4096)]
    ref = [torch.nn.Parameter(torch.randn(s, device="cuda")) for s in shapes]
    ours = [torch.nn.Parameter(p.detach().clone()) for p in ref]
    cls = torch.optim.AdamW if adam_w_mode else torch.optim.Adam
    topt = cls(ref, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05, fused=True)
    opt = FusedAdam(ours, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05, adam_w_mode=adam_w_mode,
                    impl=impl)
    for _ in range(5):
        for a, b in zip(ref, ours):
            g = torch.randn_like(a)
            a.grad, b.grad = g, g.clone()
        topt.step()
        opt.step()
    for a, b in zip(ref, ours):
        assert _rel(b, a) < 1e-5


@pytest.mark.parametrize("impl", IMPLS)
def test_optimizer_master_weights_bf16(impl):
    from anyaccel.ops.fused_adam import FusedAdam

    p = torch.nn.Parameter(torch.randn(10_001, device="cuda").to(torch.bfloat16))
    master = p.detach().float().clone()
    m = torch.zeros_like(master)
    v = torch.zeros_like(master)
    opt = FusedAdam([p], lr=1e-3, master_weights=True, impl=impl)
    for step in (1, 2, 3):
        g = torch.randn(10_001, device="cuda").to(torch.bfloat16)
        p.grad = g
        opt.step()
        master, m, v = (t.float() for t in _ref_step(master, g.float(), m, v, step, 1e-3, 0.9, 0.999, 1e-8, 0.0,
                                                    True, True))
    assert _rel(opt.state[p]["master"], master) < 1e-5
    assert torch.equal(p.detach(), opt.state[p]["master"].to(torch.bfloat16))


@pytest.mark.parametrize("impl", IMPLS)
def test_bad_inputs_raise_clear_errors(impl):
    op = _op(impl)
    p, g, m, v = (_rand(100) for _ in range(4))
    with pytest.raises(ValueError, match="grads"):
        op.adam_step([p], [], [m], [v], [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    with pytest.raises(ValueError, match="device|cpu"):
        op.adam_step([p], [g.cpu()], [m], [v], [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    with pytest.raises(TypeError, match="dtype"):
        op.adam_step([p], [g], [m.double()], [v], [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    with pytest.raises(ValueError, match="contiguous"):
        q = _rand(200)[::2]
        op.adam_step([q], [g], [m], [v], [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    with pytest.raises(ValueError, match="elements"):
        op.adam_step([p], [_rand(99)], [m], [v], [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    with pytest.raises(ValueError, match="step"):
        op.adam_step([p], [g], [m], [v], [], 0, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)


def _within_ulps(x, ref, dtype, ulps=1.01, atol=1e-6):
    """|x - ref| within one 16-bit rounding of ref, plus ``atol`` for fp32 arithmetic on values that cancel
    (e.g. beta1 * m + (1 - beta1) * g close to 0, where fp32's absolute error exceeds the 16-bit ulp of the
    tiny result)."""
    ulp = torch.finfo(dtype).eps * ref.abs().clamp_min(torch.finfo(dtype).tiny)
    return ((x.double() - ref).abs() <= ulp * ulps + atol).all()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_state_in_param_dtype(impl, dtype):
    """16-bit params with 16-bit moments: each result is the fp32 update rounded once (nearest even)."""
    op = _op(impl)
    sizes = [3, 4101, 70_003, 0]
    ps = [_rand(n, dtype) for n in sizes]
    gs = [_rand(n, dtype) for n in sizes]
    ms = [_rand(n, dtype, scale=0.1) for n in sizes]
    vs = [(_rand(n).abs() * 0.01).to(dtype) for n in sizes]
    ref = [_ref_step(p, g, m, v, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, True) for p, g, m, v in zip(ps, gs, ms, vs)]
    op.adam_step(ps, gs, ms, vs, [], 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, True)
    for (rp, rm, rv), p, m, v, n in zip(ref, ps, ms, vs, sizes):
        if n == 0:
            continue
        assert m.dtype == dtype and v.dtype == dtype
        assert _within_ulps(p, rp, dtype) and _within_ulps(m, rm, dtype) and _within_ulps(v, rv, dtype)
    with pytest.raises(TypeError, match="state"):  # 16-bit state with fp32 masters is not a supported mode
        masters = [_rand(10)]
        op.adam_step(masters, [_rand(10)], [_rand(10, dtype)], [_rand(10, dtype)], [_rand(10, dtype)], 1, 1e-3,
                     0.9, 0.999, 1e-8, 0.0, True, True)


@pytest.mark.parametrize("impl", IMPLS)
def test_optimizer_bf16_state_matches_torch_fused(impl):
    from anyaccel.ops.fused_adam import FusedAdam

    shapes = [(33, 65), (1000,), (7,), (4, 4096)]
    ref = [torch.nn.Parameter(torch.randn(s, device="cuda").to(torch.bfloat16)) for s in shapes]
    ours = [torch.nn.Parameter(p.detach().clone()) for p in ref]
    start = [p.detach().clone() for p in ref]
    topt = torch.optim.AdamW(ref, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05, fused=True)
    opt = FusedAdam(ours, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05, fp32_optimizer_states=False,
                    impl=impl)
    for _ in range(4):
        for a, b in zip(ref, ours):
            g = torch.randn_like(a)
            a.grad, b.grad = g, g.clone()
        topt.step()
        opt.step()
    for a, b, s in zip(ref, ours, start):
        assert opt.state[b]["exp_avg"].dtype == torch.bfloat16 and opt.state[b]["exp_avg_sq"].dtype == torch.bfloat16
        assert _rel(b, s) > 1e-3  # it moved
        assert _rel(b, a) < 2e-3  # and like torch's fused AdamW with bf16 state (rounding differences only)
        assert _rel(opt.state[b]["exp_avg"], topt.state[a]["exp_avg"]) < 1e-2
