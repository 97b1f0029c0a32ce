"""Correctness of the cpu_lion kernel and of ``anyaccel.ops.lion.CPULion``.

References: a float64 implementation of Lion (Chen et al. 2023, Algorithm 2) that rounds to the storage
dtypes where the kernel does, and a plain torch implementation written with foreach ops (as one would write
Lion without a kernel), which the float64 reference is itself checked against.

sign() makes Lion discontinuous at c == 0: an fp32 rounding of c can flip sign(c) when |c| is within a few
fp32 roundings of zero. Comparisons therefore compute, from the float64 reference, a "tie" mask of elements
whose |c| is below 1e-6 of the magnitude of its two terms (about 8 fp32 ulps, well above the kernel's
rounding error of about 2 ulps) and allow those elements to differ by up to 2 * lr; everything else must match
to a few units in the last place, and ties must stay rare (so the allowance cannot hide a wrong sign).

The kernel takes the op spec's schema (anyaccel/ops/lion/spec.py): ``lion_step(params, grads, exp_avgs,
model_copies, lr, beta1, beta2, weight_decay)`` and any of the spec's nine dtype combinations per tensor in one
call; with ``model_copies``, ``params`` are fp32 masters and the kernel also writes the 16-bit copies.
"""

from __future__ import annotations

import io
import math
from typing import Any

import pytest
import torch

from anyaccel.ops.lion import CPULion
from anyaccel.ops.lion.spec import SPEC

LR = 1e-2
BETAS = (0.9, 0.99)
TAIL_SIZES = [0, 1, 7, 17, 33, 1000003]
DTYPE = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "none": None}
#: The spec's combinations as torch dtypes: (param, grad, state, model copy or None).
COMBOS = [tuple(DTYPE[d] for d in c.as_tuple()) for c in SPEC.dtypes]
NO_COPY = [c for c in COMBOS if c[3] is None]
WITH_COPY = [c for c in COMBOS if c[3] is not None]
TIE_REL = 1e-6
F32_EPS = torch.finfo(torch.float32).eps


def _combo_id(c: tuple) -> str:
    return "-".join(str(d).removeprefix("torch.") for d in c)


# --------------------------------------------------------------------------------------------------------
# References
# --------------------------------------------------------------------------------------------------------


def reference_lion_step(
    p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, lr: float, beta1: float, beta2: float, weight_decay: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One Lion step in float64 (paper's Algorithm 2, decoupled decay).

    Returns:
        Unrounded ``(p, m, c, c_scale)``: the new parameter and momentum, the interpolation ``c`` whose sign
        is the update, and ``|beta1 * m| + |(1 - beta1) * g|`` (the size of c's terms, for the tie mask).
    """
    p, g, m = (t.to(torch.float64) for t in (p, g, m))
    c = beta1 * m + (1 - beta1) * g
    c_scale = (beta1 * m).abs() + ((1 - beta1) * g).abs()
    p = p * (1 - lr * weight_decay) - lr * torch.sign(c)
    m = beta2 * m + (1 - beta2) * g
    return p, m, c, c_scale


def torch_lion_step(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor], lr: float,
                    beta1: float, beta2: float, weight_decay: float) -> list[torch.Tensor]:
    """Lion as plain torch foreach ops, in the tensors' own dtype; returns each element's c (before sign)."""
    torch._foreach_mul_(params, 1 - lr * weight_decay)
    cs = torch._foreach_mul(exp_avgs, beta1)
    torch._foreach_add_(cs, grads, alpha=1 - beta1)
    torch._foreach_add_(params, torch._foreach_sign(cs), alpha=-lr)
    torch._foreach_mul_(exp_avgs, beta2)
    torch._foreach_add_(exp_avgs, grads, alpha=1 - beta2)
    return cs


def round_to(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Rounds float64 ``x`` as the kernel stores it: to fp32 (its compute type), then to ``dtype``."""
    return x.to(torch.float32).to(dtype).to(torch.float64)


def assert_within(actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor, what: str) -> None:
    """Asserts ``|actual - expected| <= bound`` elementwise, reporting the worst element on failure."""
    err = (actual.to(torch.float64) - expected).abs()
    excess = err - bound
    if excess.numel() and (excess > 0).any():
        i = int(excess.argmax())
        raise AssertionError(f"{what}: {int((excess > 0).sum())} of {err.numel()} elements out of bounds; worst "
                             f"index {i}: actual {actual.flatten()[i].item()!r}, expected "
                             f"{expected.flatten()[i].item()!r}, bound {bound.flatten()[i].item()!r}")


def check_against_reference(
    before: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    after: tuple[torch.Tensor, torch.Tensor],
    lr: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
    what: str,
) -> int:
    """Checks one kernel step (``before`` = p, g, m; ``after`` = p, m) against the float64 reference.

    Bounds: each stored value is within 2 ulps of its storage dtype of the reference rounded the way the
    kernel rounds, plus 4 fp32 ulps of the size of the terms that produced it (fp32 fma with constants
    rounded to fp32); tie elements (see the module docstring) additionally get 2 * lr on the parameter.

    Returns:
        The number of tie elements.
    """
    p0, g, m0 = before
    p1, m1 = after
    rp, rm, c, c_scale = reference_lion_step(p0, g, m0, lr, beta1, beta2, weight_decay)
    ties = c.abs() <= TIE_REL * c_scale
    p_eps, m_eps = torch.finfo(p1.dtype).eps, torch.finfo(m1.dtype).eps
    p_terms = p0.double().abs() * (1 - lr * weight_decay) + lr
    p_bound = 2 * p_eps * rp.abs() + 4 * F32_EPS * p_terms + torch.finfo(p1.dtype).smallest_normal
    p_bound = p_bound + ties * (2 * lr)
    m_terms = beta2 * m0.double().abs() + (1 - beta2) * g.double().abs()
    m_bound = 2 * m_eps * rm.abs() + 4 * F32_EPS * m_terms + torch.finfo(m1.dtype).smallest_normal
    assert_within(p1, round_to(rp, p1.dtype), p_bound, f"{what} params")
    assert_within(m1, round_to(rm, m1.dtype), m_bound, f"{what} exp_avgs")
    return int(ties.sum())


def run_kernel_vs_reference(lion_step: Any, sizes: list[int], combos: list[tuple], steps: int, weight_decay: float,
                            seed: int) -> None:
    """Runs ``steps`` kernel calls on fresh random data; each step is checked against the reference.

    Tensor ``i`` has the spec combination ``combos[i % len(combos)]`` (param, grad, state, copy dtype or None),
    so one call can mix them (a call has model copies for every tensor or for none). The momentum starts
    random (not zero) so that the first step already exercises the interpolation. Model copies start NaN:
    each must end as its fp32 master rounded once to the copy's dtype.
    """
    gen = torch.Generator().manual_seed(seed)
    per = [combos[i % len(combos)] for i in range(len(sizes))]
    has_copy = per[0][3] is not None
    assert all((c[3] is not None) == has_copy for c in per), "model copies: all or none"
    params = [torch.randn(s, generator=gen).to(c[0]) for s, c in zip(sizes, per, strict=True)]
    exp_avgs = [(0.1 * torch.randn(s, generator=gen)).to(c[2]) for s, c in zip(sizes, per, strict=True)]
    copies = [torch.full((s,), math.nan, dtype=c[3]) for s, c in zip(sizes, per, strict=True)] if has_copy else []
    total = sum(sizes)
    ties = 0
    for step in range(steps):
        grads = [(0.1 * torch.randn(s, generator=gen)).to(c[1]) for s, c in zip(sizes, per, strict=True)]
        before = [(p.clone(), g, m.clone()) for p, g, m in zip(params, grads, exp_avgs, strict=True)]
        lion_step(params, grads, exp_avgs, copies, LR, BETAS[0], BETAS[1], weight_decay)
        for i, (b, p, m) in enumerate(zip(before, params, exp_avgs, strict=True)):
            what = f"step {step}, tensor {i} (numel {p.numel()}, {_combo_id(per[i])})"
            assert p.dtype == per[i][0] and m.dtype == per[i][2]
            ties += check_against_reference(b, (p, m), LR, BETAS[0], BETAS[1], weight_decay, what)
            if has_copy:
                assert copies[i].dtype == per[i][3] and torch.equal(copies[i], p.to(per[i][3])), f"{what} copy"
    assert ties <= 1e-4 * total * steps + 2, f"{ties} near-zero c values in {total * steps}: the data is not random"


# --------------------------------------------------------------------------------------------------------
# The references themselves
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_reference_matches_plain_torch_float64(weight_decay: float) -> None:
    gen = torch.Generator().manual_seed(1)
    p = torch.randn(1031, dtype=torch.float64, generator=gen)
    m = torch.randn(1031, dtype=torch.float64, generator=gen)
    tp, tm = p.clone(), m.clone()
    for _ in range(5):
        g = torch.randn(1031, dtype=torch.float64, generator=gen)
        p, m, _, _ = reference_lion_step(p, g, m, LR, BETAS[0], BETAS[1], weight_decay)
        torch_lion_step([tp], [g], [tm], LR, BETAS[0], BETAS[1], weight_decay)
    torch.testing.assert_close(p, tp, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(m, tm, rtol=1e-13, atol=1e-15)
    assert not torch.equal(p, torch.randn(1031, dtype=torch.float64, generator=torch.Generator().manual_seed(1)))


# --------------------------------------------------------------------------------------------------------
# The kernel against the float64 reference
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("combo", COMBOS, ids=_combo_id)
def test_kernel_vs_reference(cpu_lion_module: Any, combo: tuple, weight_decay: float) -> None:
    """Each spec combination (fp32 masters writing 16-bit copies included), on odd and empty sizes."""
    run_kernel_vs_reference(cpu_lion_module.lion_step, TAIL_SIZES, [combo], steps=3, weight_decay=weight_decay,
                            seed=10 + COMBOS.index(combo))


@pytest.mark.parametrize("group", ["no_copy", "with_copy"])
def test_many_tensors_mixed_sizes_and_dtypes(cpu_lion_module: Any, group: str) -> None:
    """200 tensors of random sizes (some empty) and all combinations of the group, in one call across thread
    ranges."""
    gen = torch.Generator().manual_seed(20)
    sizes = torch.randint(0, 6000, (200,), generator=gen).tolist()
    sizes[5] = sizes[100] = sizes[199] = 0
    run_kernel_vs_reference(cpu_lion_module.lion_step, sizes, NO_COPY if group == "no_copy" else WITH_COPY, steps=3,
                            weight_decay=0.05, seed=21)


def test_sign_of_zero_and_nan(cpu_lion_module: Any) -> None:
    """sign(c) is torch.sign: c == 0 leaves p only decayed; a NaN gradient propagates to p and m."""
    gen = torch.Generator().manual_seed(22)
    n = 67  # vector lanes and a scalar tail on every ISA level
    p = torch.randn(n, generator=gen)
    m = torch.randn(n, generator=gen)
    g = torch.randn(n, generator=gen)
    zero = torch.zeros(n, dtype=torch.bool)
    zero[::5] = True
    m[zero] = 0.0
    g[zero] = 0.0
    g[3] = float("nan")  # a vector lane
    g[-1] = float("nan")  # the scalar tail (67 = 4 * 16 + 3)
    p0 = p.clone()
    cpu_lion_module.lion_step([p], [g], [m], [], LR, BETAS[0], BETAS[1], 0.5)
    decay = torch.tensor(1 - LR * 0.5, dtype=torch.float32)
    assert torch.equal(p[zero], p0[zero] * decay), "elements with c == 0 must only be decayed (sign(0) == 0)"
    nan = torch.isnan(g)
    moved = ~zero & ~nan
    assert ((p[moved] - p0[moved] * decay).abs() - LR).abs().max() < 1e-6
    assert torch.isnan(p[nan]).all() and torch.isnan(m[nan]).all()
    assert not torch.isnan(p[~nan]).any() and not torch.isnan(m[~nan]).any()


@pytest.mark.parametrize("beta1,beta2", [(0.0, 1.0), (1.0, 0.0)])
def test_boundary_betas(cpu_lion_module: Any, beta1: float, beta2: float) -> None:
    """beta1=0: the update is sign(g); beta2=1: m is kept; beta1=1: the update is sign(m); beta2=0: m = g."""
    gen = torch.Generator().manual_seed(23)
    p, m, g = (torch.randn(100, generator=gen) for _ in range(3))
    p0, m0 = p.clone(), m.clone()
    cpu_lion_module.lion_step([p], [g], [m], [], LR, beta1, beta2, 0.0)
    direction = g if beta1 == 0.0 else m0
    torch.testing.assert_close(p, p0 - LR * torch.sign(direction), rtol=0, atol=1e-7)
    assert torch.equal(m, m0 if beta2 == 1.0 else g)


# --------------------------------------------------------------------------------------------------------
# Every vector ISA level this CPU runs
# --------------------------------------------------------------------------------------------------------


def _runnable_isa_levels() -> list[str]:
    capability = torch.backends.cpu.get_cpu_capability()
    return ["portable"] + {"AVX512": ["avx2", "avx512"], "AVX2": ["avx2"]}.get(capability, [])


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
def test_kernel_each_isa(isa: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if isa not in _runnable_isa_levels():
        pytest.skip(f"this CPU cannot run {isa} code (torch reports {torch.backends.cpu.get_cpu_capability()})")
    from anyaccel.op_builder import CPULionBuilder

    monkeypatch.setenv("ANYACCEL_CPU_ISA", isa)
    module = CPULionBuilder().load()
    assert module.isa == isa
    assert getattr(torch.ops, module.namespace).isa() == isa
    sizes = [1, 7, 17, 33, 1000, 4099, 0]
    for weight_decay in (0.0, 0.1):
        for group in (NO_COPY, WITH_COPY):  # every size with every combination of the group
            run_kernel_vs_reference(module.lion_step, [s for s in sizes for _ in group], group, steps=2,
                                    weight_decay=weight_decay, seed=30 + int(weight_decay * 10))


# --------------------------------------------------------------------------------------------------------
# The optimizer
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_cpulion_matches_plain_torch_fp32(weight_decay: float) -> None:
    """CPULion vs the foreach torch implementation over several steps (each side keeps its own state)."""
    gen = torch.Generator().manual_seed(40)
    shapes = [(1,), (7,), (17, 3), (33,), (0,), (1000003,)]
    ours = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
    theirs = [p.detach().clone() for p in ours]
    their_m = [torch.zeros(s) for s in shapes]
    opt = CPULion(ours, lr=LR, betas=BETAS, weight_decay=weight_decay)
    steps = 4
    tie = [torch.zeros(s, dtype=torch.bool) for s in shapes]
    for _ in range(steps):
        grads = [torch.randn(s, generator=gen) for s in shapes]
        for p, g in zip(ours, grads, strict=True):
            p.grad = g.clone()
        before_m = [m.clone() for m in their_m]
        opt.step()
        torch_lion_step(theirs, grads, their_m, LR, BETAS[0], BETAS[1], weight_decay)
        for t, m, g in zip(tie, before_m, grads, strict=True):
            c_scale = BETAS[0] * m.abs() + (1 - BETAS[0]) * g.abs()
            t |= (BETAS[0] * m + (1 - BETAS[0]) * g).abs() <= 1e-5 * c_scale
    for p, q, m, t in zip(ours, theirs, their_m, tie, strict=True):
        assert opt.state[p]["step"] == steps
        bound = 1e-6 * q.abs() + 1e-7 + t * (2 * LR * steps)
        assert_within(p.detach(), q.double(), bound.double(), "params vs torch")
        torch.testing.assert_close(opt.state[p]["exp_avg"], m, rtol=1e-5, atol=1e-7)
    assert sum(int(t.sum()) for t in tie) < 50


@pytest.mark.parametrize("param_dtype,fp32_optimizer_states", [
    (torch.bfloat16, True), (torch.float16, True), (torch.bfloat16, False), (torch.float16, False)])
def test_cpulion_16bit(param_dtype: torch.dtype, fp32_optimizer_states: bool) -> None:
    gen = torch.Generator().manual_seed(41)
    sizes = [3, 17, 64, 1000, 70001]
    params = [torch.nn.Parameter(torch.randn(s, generator=gen).to(param_dtype)) for s in sizes]
    opt = CPULion(params, lr=LR, betas=BETAS, weight_decay=0.01, fp32_optimizer_states=fp32_optimizer_states)
    state_dtype = torch.float32 if fp32_optimizer_states else param_dtype
    for step in range(4):
        grads = [torch.randn(s, generator=gen).to(param_dtype) for s in sizes]
        before = []
        for p, g in zip(params, grads, strict=True):
            p.grad = g
            m = opt.state[p]["exp_avg"].clone() if p in opt.state else torch.zeros(p.shape, dtype=state_dtype)
            before.append((p.detach().clone(), g, m))
        opt.step()
        for i, (p, b) in enumerate(zip(params, before, strict=True)):
            m = opt.state[p]["exp_avg"]
            assert p.dtype == param_dtype and m.dtype == state_dtype
            check_against_reference(b, (p.detach(), m), LR, BETAS[0], BETAS[1], 0.01, f"step {step} param {i}")


def _train(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], grads: list[list[torch.Tensor]]) -> None:
    for step_grads in grads:
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.clone()
        opt.step()


@pytest.mark.parametrize("param_dtype", [torch.float32, torch.bfloat16])
def test_state_dict_round_trip(param_dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(42)
    shapes = [(31,), (4, 5), (1000,)]
    init = [torch.randn(s, generator=gen).to(param_dtype) for s in shapes]
    grads = [[torch.randn(s, generator=gen).to(param_dtype) for s in shapes] for _ in range(6)]
    groups = lambda ps: [{"params": ps[:1], "weight_decay": 0.1}, {"params": ps[1:], "lr": 3e-3}]  # noqa: E731

    straight = [torch.nn.Parameter(t.clone()) for t in init]
    opt = CPULion(groups(straight), lr=1e-2)
    _train(opt, straight, grads)

    first = [torch.nn.Parameter(t.clone()) for t in init]
    opt1 = CPULion(groups(first), lr=1e-2)
    _train(opt1, first, grads[:3])
    buffer = io.BytesIO()
    torch.save({"params": [p.detach() for p in first], "opt": opt1.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    resumed = [torch.nn.Parameter(t.clone()) for t in saved["params"]]
    opt2 = CPULion(groups(resumed), lr=5.0, betas=(0.5, 0.5))  # lr and betas restored from the state dict
    opt2.load_state_dict(saved["opt"])
    assert opt2.state[resumed[0]]["exp_avg"].dtype == torch.float32
    _train(opt2, resumed, grads[3:])

    for a, b in zip(straight, resumed, strict=True):
        assert torch.equal(a, b)
        assert torch.equal(opt.state[a]["exp_avg"], opt2.state[b]["exp_avg"])
        assert opt.state[a]["step"] == opt2.state[b]["step"] == 6


def test_closure_grad_none_and_lazy_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = torch.Generator().manual_seed(43)
    used = torch.nn.Parameter(torch.randn(50, generator=gen))
    unused = torch.nn.Parameter(torch.randn(20, generator=gen))
    used_before, unused_before = used.detach().clone(), unused.detach().clone()
    target = torch.randn(50, generator=gen)
    opt = CPULion([used, unused], lr=0.1)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = ((used - target) ** 2).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert isinstance(loss, torch.Tensor) and loss.item() > 0
    # Lion moves every element with a non-zero gradient by exactly lr (no decay here).
    torch.testing.assert_close((used.detach() - used_before).abs(), torch.full((50,), 0.1), rtol=0, atol=1e-6)
    assert torch.equal(unused.detach(), unused_before) and unused not in opt.state

    class Loaded(Exception):
        pass

    def refuse(*args: Any) -> None:
        raise Loaded

    from anyaccel.ops import dispatch

    monkeypatch.setattr(dispatch, "load", refuse)
    p = torch.nn.Parameter(torch.randn(3, generator=gen))
    lazy = CPULion([p])
    assert lazy.step() is None  # no gradient: the kernel is not loaded
    p.grad = torch.randn(3, generator=gen)
    with pytest.raises(Loaded):
        lazy.step()


def test_registry_and_accelerator_find_the_builder() -> None:
    from anyaccel import get_accelerator
    from anyaccel.op_builder import CPULionBuilder
    from anyaccel.op_builder.classes import builder_class
    from anyaccel.ops.registry import get_builder_class

    assert CPULionBuilder is builder_class("lion", "cpu_lion") and CPULionBuilder.SPEC == SPEC
    for accel in ("cpu", "cuda", "xpu", "npu", "mps"):
        assert get_builder_class("CPULionBuilder", accel) is CPULionBuilder
        assert get_builder_class("cpu_lion", accel) is CPULionBuilder
    assert isinstance(get_accelerator().create_op_builder("CPULionBuilder"), CPULionBuilder)
    from anyaccel.ops import dispatch

    kernel = dispatch.load("lion", "cpu", "cpu")
    assert dispatch.choose("lion", "cpu").name == "cpu" and kernel.namespace.startswith("anyaccel_cpu_lion_")
    assert kernel is CPULionBuilder().load()


# --------------------------------------------------------------------------------------------------------
# Errors: the optimizer
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,name,error", [
    ({"lr": -1e-3}, "lr", ValueError), ({"lr": float("inf")}, "lr", ValueError),
    ({"betas": (1.5, 0.99)}, r"betas\[0\]", ValueError), ({"betas": (0.9, float("nan"))}, r"betas\[1\]", ValueError),
    ({"betas": (0.9, -0.1)}, r"betas\[1\]", ValueError), ({"weight_decay": -0.1}, "weight_decay", ValueError),
    ({"betas": "0.9"}, "betas", TypeError), ({"weight_decay": torch.tensor(0.1)}, "weight_decay", TypeError)])
def test_bad_hyper_parameters_rejected(kwargs: dict[str, Any], name: str, error: type[Exception]) -> None:
    with pytest.raises(error, match=f"^CPULion: {name}=.* is invalid; accepted"):
        CPULion([torch.nn.Parameter(torch.randn(3))], **kwargs)


def test_boundary_betas_are_accepted_by_the_optimizer() -> None:
    CPULion([torch.nn.Parameter(torch.randn(3))], betas=(0.0, 1.0))
    CPULion([torch.nn.Parameter(torch.randn(3))], betas=(1.0, 0.0))


@pytest.mark.parametrize("kwargs", [{"lr": 1e39}, {"weight_decay": 1e39}])
def test_values_the_kernel_refuses_are_refused_at_construction(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="representable in float32"):
        CPULion([torch.nn.Parameter(torch.randn(3))], **kwargs)


def test_bad_group_hyper_parameter_rejected_at_step() -> None:
    p = torch.nn.Parameter(torch.randn(3))
    opt = CPULion([p])
    opt.param_groups[0]["weight_decay"] = -0.5
    p.grad = torch.randn(3)
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['weight_decay'\]=-0\.5"):
        opt.step()


def _optimizer_error(param: torch.Tensor, grad: torch.Tensor) -> None:
    p = torch.nn.Parameter(param)
    if grad.dtype != param.dtype:
        p.grad_dtype = None  # torch >= 2.10 refuses a gradient of another dtype unless told so
    p.grad = grad
    CPULion([p]).step()


@pytest.mark.parametrize("param,grad,pattern", [
    (torch.empty(8, device="meta"), torch.empty(8, device="meta"), r"params'\]\[0\] is on meta; CPULion.*FusedLion"),
    (torch.randn(10), torch.randn(10).to_sparse(), "layout torch.sparse_coo.*SparseAdam"),
    (torch.randn(6, 4).t(), torch.randn(6, 4).t(), r"params'\]\[0\] is not contiguous"),
    (torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64), "dtype torch.float64; accepted"),
    (torch.randn(5), torch.randn(5).half(), r"the gradient of param_groups\[0\]\['params'\]\[0\] is a "
     r"torch.float16 tensor"),
])
def test_optimizer_rejects_bad_params(param: torch.Tensor, grad: torch.Tensor, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        _optimizer_error(param, grad)


def test_a_non_contiguous_gradient_is_read_through_a_contiguous_copy() -> None:
    p = torch.nn.Parameter(torch.randn(6, 4))
    q = torch.nn.Parameter(p.detach().clone())
    p.grad = torch.randn(4, 6).t()
    q.grad = p.grad.contiguous()
    CPULion([p], lr=0.1).step()
    CPULion([q], lr=0.1).step()
    assert torch.equal(p, q)


# --------------------------------------------------------------------------------------------------------
# Errors: the kernel validates every entry itself (raises, never crashes), before writing anything, with the
# spec's messages
# --------------------------------------------------------------------------------------------------------


def _kernel_args(n: int = 3, size: int = 10) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(50)
    return {
        "params": [torch.randn(size, generator=gen) for _ in range(n)],
        "grads": [torch.randn(size, generator=gen) for _ in range(n)],
        "exp_avgs": [torch.randn(size, generator=gen) for _ in range(n)],
        "model_copies": [],
        "lr": 1e-3, "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.0,
    }


def _call(module: Any, a: dict[str, Any]) -> None:
    module.lion_step(a["params"], a["grads"], a["exp_avgs"], a["model_copies"], a["lr"], a["beta1"], a["beta2"],
                     a["weight_decay"])


ACCEPTED = SPEC.accepted_dtypes_text().replace("(", r"\(").replace(")", r"\)")


@pytest.mark.parametrize("key,index,value,pattern", [
    ("grads", 1, torch.randn(20)[::2], r"^lion_step: grads\[1\] is not contiguous \(sizes \[10\], "
     r"strides \[2\]\); pass contiguous tensors"),
    ("params", 2, torch.randn(10, 2)[:, 0], r"params\[2\] is not contiguous"),
    ("exp_avgs", 0, torch.randn(20)[::2], r"exp_avgs\[0\] is not contiguous"),
    ("grads", 0, torch.randn(10, dtype=torch.bfloat16),
     r"params\[0\] has the dtype combination \(param, grad, state, model_copy\) = \(float32, bfloat16, float32, "
     rf"none\), which is not supported; accepted: {ACCEPTED}$"),
    ("exp_avgs", 2, torch.randn(11), r"exp_avgs\[2\] has shape \[11\] but params\[2\] has shape \[10\]; they "
     r"must have the same shape"),
    ("grads", 1, torch.randn(2, 5), r"grads\[1\] has shape \[2, 5\]"),
    ("exp_avgs", 1, torch.randn(10).to(torch.bfloat16),
     r"params\[1\] has the dtype combination \(param, grad, state, model_copy\) = \(float32, float32, bfloat16, "
     r"none\), which is not supported"),
    ("grads", 2, torch.randn(10).to_sparse(),
     r"grads\[2\] has (a non-strided layout|layout torch\.sparse_coo); only dense \(strided\) tensors are "
     r"accepted, sparse gradients are not supported"),
    ("grads", 0, torch.randn(10, device="meta"),
     r"^lion_step: grads\[0\] is on device meta; the CPU kernel takes CPU tensors \(use FusedLion for accelerator "
     r"tensors, or move the tensor to the CPU\)$"),
    ("exp_avgs", 1, torch.randn(10, device="meta"), r"exp_avgs\[1\] is on device meta"),
    ("model_copies", -1, [torch.zeros(10, dtype=torch.bfloat16)] * 2,
     r"got 3 params, 3 grads, 3 exp_avgs and 2 model_copies; grads and every state list need one entry per "
     r"parameter, model_copies none or one per parameter"),
    ("model_copies", -1, [torch.zeros(10)] * 3, r"= \(float32, float32, float32, float32\), which is not supported"),
    ("lr", -1, -1e-3, r"^lion_step: lr=-0\.001 is invalid; accepted: a finite lr >= 0 representable in "
     r"float32$"),
    ("lr", -1, float("inf"), r"lr=inf is invalid"),
    ("lr", -1, 1e39, r"lion_step: lr=1e\+39 is invalid; accepted: a finite lr >= 0 representable in float32$"),
    ("beta1", -1, 1.5, r"beta1=1\.5 is invalid; accepted: a finite 0 <= beta1 <= 1 representable in float32$"),
    ("beta2", -1, float("nan"), r"beta2=nan is invalid; accepted: a finite 0 <= beta2 <= 1"),
    ("beta2", -1, -0.1, r"beta2=-0\.1 is invalid"),
    ("weight_decay", -1, -0.5, r"weight_decay=-0\.5 is invalid; accepted: a finite weight_decay >= 0"),
    ("weight_decay", -1, 1e39, r"weight_decay=1e\+39 is invalid"),
])
def test_kernel_rejects_bad_input(cpu_lion_module: Any, key: str, index: int, value: Any, pattern: str) -> None:
    args = _kernel_args()
    if index < 0:
        args[key] = value
    else:
        args[key][index] = value
    before = [t.clone() for t in args["params"] + args["exp_avgs"] if t.device.type == "cpu"]
    with pytest.raises(RuntimeError, match=pattern) as err:
        _call(cpu_lion_module, args)
    assert str(err.value).startswith("lion_step: "), str(err.value)  # no C++ source-line prefix
    after = [t for t in args["params"] + args["exp_avgs"] if t.device.type == "cpu"]
    for a, b in zip(after, before, strict=True):
        if a.shape == b.shape and a.dtype == b.dtype:
            assert torch.equal(a, b), "validation must happen before any update"


def test_kernel_rejects_meta_params(cpu_lion_module: Any) -> None:
    args = _kernel_args(n=2)
    args["params"] = [torch.empty(10, device="meta") for _ in range(2)]
    args["exp_avgs"] = [torch.empty(10, device="meta") for _ in range(2)]
    with pytest.raises(RuntimeError, match=r"^lion_step: params\[0\] is on device meta"):
        _call(cpu_lion_module, args)


@pytest.mark.parametrize("drop", ["grads", "exp_avgs"])
def test_kernel_rejects_list_length_mismatch(cpu_lion_module: Any, drop: str) -> None:
    args = _kernel_args()
    args[drop] = args[drop][:2]
    counts = {"grads": 3, "exp_avgs": 3, drop: 2}
    with pytest.raises(RuntimeError, match=f"got 3 params, {counts['grads']} grads, {counts['exp_avgs']} exp_avgs "
                                           "and 0 model_copies"):
        _call(cpu_lion_module, args)


def test_kernel_empty_tensors(cpu_lion_module: Any) -> None:
    args = _kernel_args(n=2, size=0)
    _call(cpu_lion_module, args)
    assert all(p.numel() == 0 for p in args["params"])
    args = _kernel_args(n=2, size=0)
    args["model_copies"] = [torch.zeros(0, dtype=torch.float16)] * 2
    _call(cpu_lion_module, args)


# --------------------------------------------------------------------------------------------------------
# torch.library contract (schema, fake, torch.compile tracing)
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("combo", COMBOS, ids=_combo_id)
def test_opcheck(cpu_lion_module: Any, combo: tuple) -> None:
    gen = torch.Generator().manual_seed(60)
    sizes = [5, 40, 0]
    param, grad, state, copy_dtype = combo
    args = (
        [torch.randn(s, generator=gen).to(param) for s in sizes],
        [torch.randn(s, generator=gen).to(grad) for s in sizes],
        [torch.randn(s, generator=gen).to(state) for s in sizes],
        [torch.zeros(s, dtype=copy_dtype) for s in sizes] if copy_dtype is not None else [],
        1e-3, 0.9, 0.99, 0.01,
    )
    torch.library.opcheck(cpu_lion_module.lion_step, args)


def test_schema_is_the_specs(cpu_lion_module: Any) -> None:
    schema = str(cpu_lion_module.lion_step.default._schema)
    assert schema == f"{cpu_lion_module.namespace}::{SPEC.function('lion_step').full_schema}"
