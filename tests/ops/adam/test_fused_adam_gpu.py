"""FusedAdam / the adam family's GPU implementations on a CUDA GPU (CUDA C++ and Triton).

Against a float64 reference and torch.optim.AdamW(fused=True) on fresh random data; odd sizes, empty
tensors, unaligned views, many tensors of mixed sizes; every dtype combination of the op spec in one call;
poisoned model copies; CUDA and Triton agree; the spec's error messages (RuntimeError) for bad inputs, the
same from both implementations; opcheck. Skipped without a GPU (marker ``gpu``).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from anyaccel.ops.adam.spec import SPEC
from anyaccel.testing.references import adam_step_float64

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

IMPLS = ["cuda", pytest.param("triton", marks=pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="triton is not installed"))]
SIZES = [1, 3, 7, 8, 4095, 4096, 4097, 16383, 16384, 16385, 100_003, 0, 262_147]
DTYPE = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "none": None}
COMBOS = [tuple(DTYPE[d] for d in c.as_tuple()) for c in SPEC.dtypes]


def _op(impl: str):
    from anyaccel.ops import dispatch

    return dispatch.load("adam", "cuda", impl)


def _ref_step(p, g, m, v, step, lr, b1, b2, eps, wd, bias_correction, adamw):
    """One Adam/AdamW step in float64 (torch.optim.AdamW's formula); returns new (p, m, v)."""
    return adam_step_float64(p, g, m, v, step=step, lr=lr, beta1=b1, beta2=b2, eps=eps, weight_decay=wd,
                             bias_correction=bias_correction, adamw=adamw)


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
    ref = [(p.double(), m.double(), v.double()) for p, m, v in zip(ps, ms, vs, strict=True)]
    hp = dict(lr=1e-2, b1=0.9, b2=0.99, eps=1e-8, wd=0.05)
    for step in (1, 2, 3):
        gs = [_rand(n) for n in SIZES]
        op.adam_step(ps, gs, ms, vs, [], step, hp["lr"], hp["b1"], hp["b2"], hp["eps"], hp["wd"],
                     bias_correction, adamw)
        ref = [_ref_step(*r[:1], g, *r[1:], step, *hp.values(), bias_correction, adamw)
               for r, g in zip(ref, gs, strict=True)]
    for (rp, rm, rv), p, m, v, n in zip(ref, ps, ms, vs, SIZES, strict=True):
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
    ref = [_ref_step(p, g, m, v, 4, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, True)
           for p, g, m, v in zip(ps, gs, ms, vs, strict=True)]
    op.adam_step(ps, gs, ms, vs, [], 4, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, True)
    for (rp, rm, rv), p, m, v in zip(ref, ps, ms, vs, strict=True):
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
    ref = [_ref_step(p, g, m, v, 2, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
           for p, g, m, v in zip(masters, gs, ms, vs, strict=True)]
    op.adam_step(masters, gs, ms, vs, copies, 2, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    for (rp, _, _), p, c, n in zip(ref, masters, copies, sizes, strict=True):
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
    ref = [_ref_step(p, g, m, v, 1, 1e-3, 0.8, 0.9, 1e-6, 0.1, True, False)
           for p, g, m, v in zip(ps, gs, ms, vs, strict=True)]
    op.adam_step(ps, gs, ms, vs, [], 1, 1e-3, 0.8, 0.9, 1e-6, 0.1, True, False)
    for (rp, rm, rv), p, m, v in zip(ref, ps, ms, vs, strict=True):
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
    for a, b in zip(*results, strict=True):
        assert _rel(a, b) < 1e-6


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("adam_w_mode", [True, False])
def test_optimizer_matches_torch_fused(impl, adam_w_mode):
    from anyaccel.ops.adam import FusedAdam

    shapes = [(33, 65), (1000,), (7,), (4, 4096)]
    ref = [torch.nn.Parameter(torch.randn(s, device="cuda")) for s in shapes]
    ours = [torch.nn.Parameter(p.detach().clone()) for p in ref]
    cls = torch.optim.AdamW if adam_w_mode else torch.optim.Adam
    topt = cls(ref, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05, fused=True)
    opt = FusedAdam(ours, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05, adam_w_mode=adam_w_mode,
                    impl=impl)
    for _ in range(5):
        for a, b in zip(ref, ours, strict=True):
            g = torch.randn_like(a)
            a.grad, b.grad = g, g.clone()
        topt.step()
        opt.step()
    for a, b in zip(ref, ours, strict=True):
        assert _rel(b, a) < 1e-5


@pytest.mark.parametrize("impl", IMPLS)
def test_optimizer_master_weights_bf16(impl):
    from anyaccel.ops.adam import FusedAdam

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


def _bad_calls():
    """(name, call(op), expected message regex): the op spec's rules, RuntimeError from every implementation."""
    p, g, m, v = (_rand(100) for _ in range(4))
    hp = (1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    return [
        ("short grads", lambda op: op.adam_step([p], [], [m], [v], [], 1, *hp),
         r"^adam_step: got 1 params, 0 grads, 1 exp_avgs, 1 exp_avg_sqs and 0 model_copies; grads and every state "
         r"list need one entry per parameter"),
        ("cpu grad", lambda op: op.adam_step([p], [g.cpu()], [m], [v], [], 1, *hp),
         r"^adam_step: grads\[0\] is on device cpu; "),
        ("state dtypes", lambda op: op.adam_step([p], [g], [m.double()], [v], [], 1, *hp),
         r"^adam_step: the optimizer states of params\[0\] have different dtypes \(exp_avgs\[0\] float64, "
         r"exp_avg_sqs\[0\] float32\)"),
        ("non-contiguous", lambda op: op.adam_step([_rand(200)[::2]], [g], [m], [v], [], 1, *hp),
         r"^adam_step: params\[0\] is not contiguous \(sizes \[100\], strides \[2\]\)"),
        ("shape", lambda op: op.adam_step([p], [_rand(99)], [m], [v], [], 1, *hp),
         r"^adam_step: grads\[0\] has shape \[99\] but params\[0\] has shape \[100\]; they must have the same "
         r"shape$"),
        ("step", lambda op: op.adam_step([p], [g], [m], [v], [], 0, *hp),
         r"^adam_step: step=0 is invalid; accepted: a finite step >= 1$"),
        ("float32 overflow", lambda op: op.adam_step([p], [g], [m], [v], [], 1, 1e39, *hp[1:]),
         r"^adam_step: lr=1e\+39 is invalid; accepted: a finite lr >= 0 representable in float32$"),
        ("eps", lambda op: op.adam_step([p], [g], [m], [v], [], 1, 1e-3, 0.9, 0.999, 0.0, 0.0, True, True),
         r"^adam_step: eps=0(\.0)? is invalid; accepted: a finite eps > 0"),
        ("16-bit state with fp32 masters",
         lambda op: op.adam_step([_rand(10)], [_rand(10)], [_rand(10, torch.bfloat16)], [_rand(10, torch.bfloat16)],
                                 [_rand(10, torch.bfloat16)], 1, *hp),
         r"^adam_step: params\[0\] has the dtype combination \(param, grad, state, model_copy\) = \(float32, "
         r"float32, bfloat16, bfloat16\), which is not supported; accepted: "),
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
        if name in ("step", "cpu grad"):
            continue  # test_int_arguments_are_written_alike, test_a_cpu_tensor_is_reported_alike
        messages = []
        for impl in ("cuda", "triton"):
            with pytest.raises(RuntimeError) as err:
                call(_op(impl))
            messages.append(str(err.value))
        assert messages[0] == messages[1], name


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_int_arguments_are_written_alike():
    p, g, m, v = (_rand(100) for _ in range(4))
    messages = []
    for impl in ("cuda", "triton"):
        with pytest.raises(RuntimeError) as err:
            _op(impl).adam_step([p], [g], [m], [v], [], 0, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
        messages.append(str(err.value))
    assert messages[0] == messages[1] == "adam_step: step=0 is invalid; accepted: a finite step >= 1"


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_a_cpu_tensor_is_reported_alike():
    p, g, m, v = (_rand(100) for _ in range(4))
    messages = []
    for impl in ("cuda", "triton"):
        with pytest.raises(RuntimeError) as err:
            _op(impl).adam_step([p], [g.cpu()], [m], [v], [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
        messages.append(str(err.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("group", ["no_copy", "with_copy"])
def test_every_spec_combination_in_one_call(impl, group):
    """Each tensor of one call has its own dtype combination (the spec's nine: five without model copies, four
    with fp32 masters writing 16-bit copies); each is checked against the float64 reference."""
    op = _op(impl)
    combos = [c for c in COMBOS if (c[3] is None) == (group == "no_copy")]
    sizes = [1, 7, 4097, 16385, 0, 70_001]
    tensors = [(n, c) for n in sizes for c in combos]
    ps = [_rand(n, c[0]) for n, c in tensors]
    gs = [_rand(n, c[1]) for n, c in tensors]
    ms = [_rand(n, c[2], scale=0.1) for n, c in tensors]
    vs = [(_rand(n).abs() * 0.01).to(c[2]) for n, c in tensors]
    copies = [torch.full((n,), float("nan"), dtype=c[3], device="cuda") for n, c in tensors] if group == "with_copy" \
        else []
    ref = [_ref_step(p, g, m, v, 3, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, True)
           for p, g, m, v in zip(ps, gs, ms, vs, strict=True)]
    op.adam_step(ps, gs, ms, vs, copies, 3, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, True)
    for i, ((rp, rm, rv), (n, c)) in enumerate(zip(ref, tensors, strict=True)):
        if n == 0:
            continue
        assert _within_ulps(ps[i], rp, c[0]) and _within_ulps(ms[i], rm, c[2]) and _within_ulps(vs[i], rv, c[2]), (n, c)
        if copies:
            assert torch.equal(copies[i], ps[i].to(c[3])), (n, c)


@pytest.mark.parametrize("impl", IMPLS)
def test_meta_tensors_run_the_validating_fake(impl):
    op = _op(impl)
    meta = [torch.empty(10, device="meta")]
    with pytest.raises(RuntimeError, match=r"^adam_step: params\[0\] is on device meta; this kernel takes cuda"):
        op.adam_step(meta, meta, meta, meta, [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: "-".join(str(d).removeprefix("torch.") for d in c))
def test_opcheck(impl, combo):
    op = _op(impl)
    sizes = (5, 4099, 0)
    param, grad, state, copy = combo
    args = ([_rand(n, param) for n in sizes], [_rand(n, grad) for n in sizes], [_rand(n, state, 0.1) for n in sizes],
            [(_rand(n).abs() * 0.01).to(state) for n in sizes],
            [torch.zeros(n, dtype=copy, device="cuda") for n in sizes] if copy is not None else [],
            3, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, True)
    torch.library.opcheck(op.adam_step, args)


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
    ref = [_ref_step(p, g, m, v, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, True)
           for p, g, m, v in zip(ps, gs, ms, vs, strict=True)]
    op.adam_step(ps, gs, ms, vs, [], 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, True)
    for (rp, rm, rv), p, m, v, n in zip(ref, ps, ms, vs, sizes, strict=True):
        if n == 0:
            continue
        assert m.dtype == dtype and v.dtype == dtype
        assert _within_ulps(p, rp, dtype) and _within_ulps(m, rm, dtype) and _within_ulps(v, rv, dtype)
    with pytest.raises(RuntimeError, match="dtype combination"):  # 16-bit state with fp32 masters: not a mode
        masters = [_rand(10)]
        op.adam_step(masters, [_rand(10)], [_rand(10, dtype)], [_rand(10, dtype)], [_rand(10, dtype)], 1, 1e-3,
                     0.9, 0.999, 1e-8, 0.0, True, True)


@pytest.mark.parametrize("impl", IMPLS)
def test_optimizer_bf16_state_matches_torch_fused(impl):
    from anyaccel.ops.adam import FusedAdam

    shapes = [(33, 65), (1000,), (7,), (4, 4096)]
    ref = [torch.nn.Parameter(torch.randn(s, device="cuda").to(torch.bfloat16)) for s in shapes]
    ours = [torch.nn.Parameter(p.detach().clone()) for p in ref]
    start = [p.detach().clone() for p in ref]
    topt = torch.optim.AdamW(ref, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05, fused=True)
    opt = FusedAdam(ours, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05, fp32_optimizer_states=False,
                    impl=impl)
    for _ in range(4):
        for a, b in zip(ref, ours, strict=True):
            g = torch.randn_like(a)
            a.grad, b.grad = g, g.clone()
        topt.step()
        opt.step()
    for a, b, s in zip(ref, ours, start, strict=True):
        assert opt.state[b]["exp_avg"].dtype == torch.bfloat16 and opt.state[b]["exp_avg_sq"].dtype == torch.bfloat16
        assert _rel(b, s) > 1e-3  # it moved
        assert _rel(b, a) < 2e-3  # and like torch's fused AdamW with bf16 state (rounding differences only)
        assert _rel(opt.state[b]["exp_avg"], topt.state[a]["exp_avg"]) < 1e-2
