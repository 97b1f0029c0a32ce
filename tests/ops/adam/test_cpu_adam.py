"""Correctness of the cpu_adam kernel and of ``anyaccel.ops.CPUAdam``.

References: torch.optim.Adam/AdamW for what torch can do (fp32, bias correction on), and a float64
re-implementation of the documented update rule that rounds to the storage dtypes where the kernel does
(checked against torch in float64 by ``test_reference_matches_torch``) for the rest.

The kernel takes the op spec's schema (anyaccel/ops/adam/spec.py): ``adam_step(params, grads, exp_avgs,
exp_avg_sqs, model_copies, step, lr, beta1, beta2, eps, weight_decay, bias_correction, adamw_mode)``, and any
of the spec's nine dtype combinations per tensor in one call: with ``model_copies``, ``params`` are fp32
masters (16-bit gradients allowed) and the kernel also writes the rounded result into the 16-bit copy.
"""

from __future__ import annotations

import copy
import io
import json
import math
import subprocess
import sys
from typing import Any

import pytest
import torch

from anyaccel.ops import CPUAdam
from anyaccel.ops.adam.spec import SPEC

HYPER = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
TAIL_SIZES = [1, 7, 15, 17, 33, 0, 1000, 4099]
DTYPE = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "none": None}
#: The spec's combinations as torch dtypes: (param, grad, state, model copy or None).
COMBOS = [tuple(DTYPE[d] for d in c.as_tuple()) for c in SPEC.dtypes]
NO_COPY = [c for c in COMBOS if c[3] is None]
WITH_COPY = [c for c in COMBOS if c[3] is not None]


def _combo_id(c: tuple) -> str:
    return "-".join(str(d).removeprefix("torch.") for d in c)


# --------------------------------------------------------------------------------------------------------
# float64 reference
# --------------------------------------------------------------------------------------------------------


def round_to(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Rounds float64 ``x`` as the kernel stores it: to fp32 (its compute type), then to ``dtype``."""
    return x.to(torch.float32).to(dtype).to(torch.float64)


def reference_adam_step(
    p: torch.Tensor,
    g: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    step: int,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    bias_correction: bool,
    adamw_mode: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One Adam(W) step in float64 following the torch.optim docs; returns unrounded (p, m, v)."""
    p, g, m, v = (t.to(torch.float64) for t in (p, g, m, v))
    if weight_decay != 0 and not adamw_mode:
        g = g + weight_decay * p
    if adamw_mode:
        p = p * (1 - lr * weight_decay)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    bc1 = 1 - beta1**step if bias_correction else 1.0
    bc2 = 1 - beta2**step if bias_correction else 1.0
    p = p - (lr / bc1) * m / (v.sqrt() / bc2**0.5 + eps)
    return p, m, v


def ulp_tolerance(dtype: torch.dtype) -> float:
    """Relative spacing of ``dtype`` (machine epsilon): 2**-7 for bf16, 2**-10 for fp16, 2**-23 for fp32."""
    return torch.finfo(dtype).eps


def assert_close_to_reference(actual: torch.Tensor, expected64: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """Checks ``actual`` against the rounded float64 reference within two units in the last place.

    The kernel computes in fp32 and the reference in float64, both rounding to ``dtype`` at the same
    points. When the exact value lies within an fp32 rounding error of a ``dtype`` rounding boundary the
    two can round to neighbouring values (1 ulp); that difference feeds back into later steps only through
    the weight-decay term and ``p``'s own value, so after a few steps 2 ulps bound it. For fp32 storage the
    bound is a few fp32 ulps of the value plus a few ulps of the per-step update (atol).
    """
    rtol = 2 * ulp_tolerance(dtype)
    atol = 1e-6 if dtype == torch.float32 else 2 * ulp_tolerance(dtype) * 1e-3
    torch.testing.assert_close(actual.to(torch.float64), expected64, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def run_kernel_vs_reference(
    adam_step: Any,
    tensors: list[tuple[int, tuple]],
    steps: int,
    weight_decay: float,
    bias_correction: bool,
    adamw_mode: bool,
    seed: int,
) -> None:
    """Runs ``steps`` kernel calls on fresh random data and compares with the float64 reference.

    Args:
        tensors: ``(size, (param, grad, state, copy dtype or None))`` per tensor of the call; a call has
            model copies for every tensor or for none.
    """
    gen = torch.Generator().manual_seed(seed)
    has_copy = bool(tensors) and tensors[0][1][3] is not None
    assert all((c[3] is not None) == has_copy for _, c in tensors), "model copies: all or none"
    params = [torch.randn(s, generator=gen).to(c[0]) for s, c in tensors]
    exp_avgs = [torch.zeros(s, dtype=c[2]) for s, c in tensors]
    exp_avg_sqs = [torch.zeros(s, dtype=c[2]) for s, c in tensors]
    # poisoned copies: an element the kernel does not write stays NaN
    copies = [torch.full((s,), math.nan, dtype=c[3]) for s, c in tensors] if has_copy else []
    ref = [(p.double(), m.double(), v.double()) for p, m, v in zip(params, exp_avgs, exp_avg_sqs, strict=True)]
    for step in range(1, steps + 1):
        grads = [torch.randn(s, generator=gen).to(c[1]) for s, c in tensors]
        adam_step(params, grads, exp_avgs, exp_avg_sqs, copies, step, HYPER["lr"], HYPER["beta1"], HYPER["beta2"],
                  HYPER["eps"], weight_decay, bias_correction, adamw_mode)
        new_ref = []
        for (rp, rm, rv), g, (_, c) in zip(ref, grads, tensors, strict=True):
            p, m, v = reference_adam_step(rp, g, rm, rv, step, HYPER["lr"], HYPER["beta1"], HYPER["beta2"],
                                          HYPER["eps"], weight_decay, bias_correction, adamw_mode)
            new_ref.append((round_to(p, c[0]), round_to(m, c[2]), round_to(v, c[2])))
        ref = new_ref
    for i, ((_, c), p, m, v) in enumerate(zip(tensors, params, exp_avgs, exp_avg_sqs, strict=True)):
        what = f"[{i}] (numel {p.numel()}, {_combo_id(c)})"
        assert p.dtype == c[0] and m.dtype == c[2] and v.dtype == c[2]
        assert_close_to_reference(p, ref[i][0], c[0], f"params{what}")
        assert_close_to_reference(m, ref[i][1], c[2], f"exp_avgs{what}")
        assert_close_to_reference(v, ref[i][2], c[2], f"exp_avg_sqs{what}")
        if has_copy:
            # the copy is the fp32 master rounded once to nearest even, exactly as torch casts
            assert copies[i].dtype == c[3] and torch.equal(copies[i], p.to(c[3])), f"model_copies{what}"


def every_size_of_each(combos: list[tuple], sizes: list[int] = TAIL_SIZES) -> list[tuple[int, tuple]]:
    """Every size with every combination, interleaved, for one call."""
    return [(s, c) for s in sizes for c in combos]


# --------------------------------------------------------------------------------------------------------
# The reference itself
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("adamw_mode", [True, False])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_reference_matches_torch(adamw_mode: bool, weight_decay: float) -> None:
    gen = torch.Generator().manual_seed(1)
    p = torch.randn(257, dtype=torch.float64, generator=gen)
    torch_p = p.clone().requires_grad_()
    cls = torch.optim.AdamW if adamw_mode else torch.optim.Adam
    opt = cls([torch_p], lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]), eps=HYPER["eps"],
              weight_decay=weight_decay)
    m = torch.zeros_like(p)
    v = torch.zeros_like(p)
    for step in range(1, 6):
        g = torch.randn(257, dtype=torch.float64, generator=gen)
        torch_p.grad = g.clone()
        opt.step()
        p, m, v = reference_adam_step(p, g, m, v, step, HYPER["lr"], HYPER["beta1"], HYPER["beta2"], HYPER["eps"],
                                      weight_decay, True, adamw_mode)
    torch.testing.assert_close(p, torch_p.detach(), rtol=1e-12, atol=1e-13)


# --------------------------------------------------------------------------------------------------------
# CPUAdam against torch (fp32)
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("adamw_mode", [True, False])
@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_cpuadam_matches_torch_fp32(adamw_mode: bool, weight_decay: float) -> None:
    gen = torch.Generator().manual_seed(2)
    sizes = [(1,), (7,), (15,), (17, 3), (33,), (0,), (1000003,)]
    ours = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in sizes]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    opt = CPUAdam(ours, lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]), eps=HYPER["eps"],
                  weight_decay=weight_decay, adamw_mode=adamw_mode)
    cls = torch.optim.AdamW if adamw_mode else torch.optim.Adam
    ref = cls(theirs, lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]), eps=HYPER["eps"],
              weight_decay=weight_decay)
    for _ in range(4):
        for a, b in zip(ours, theirs, strict=True):
            g = torch.randn(a.shape, generator=gen)
            a.grad = g.clone()
            b.grad = g.clone()
        opt.step()
        ref.step()
    for a, b in zip(ours, theirs, strict=True):
        # fp32 on both sides; the kernel uses fma and one reciprocal where torch divides, so results differ
        # by a few fp32 roundings of values of order 1 and of updates of order lr.
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(opt.state[a]["exp_avg"], ref.state[b]["exp_avg"], rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(opt.state[a]["exp_avg_sq"], ref.state[b]["exp_avg_sq"], rtol=1e-5, atol=1e-8)
        assert opt.state[a]["step"] == 4


@pytest.mark.parametrize("adamw_mode", [True, False])
def test_cpuadam_bias_correction_off(adamw_mode: bool) -> None:
    gen = torch.Generator().manual_seed(3)
    p0 = torch.randn(1031, generator=gen)
    p = torch.nn.Parameter(p0.clone())
    p_bc = torch.nn.Parameter(p0.clone())
    opt = CPUAdam([p], lr=HYPER["lr"], bias_correction=False, weight_decay=0.02, adamw_mode=adamw_mode)
    opt_bc = CPUAdam([p_bc], lr=HYPER["lr"], bias_correction=True, weight_decay=0.02, adamw_mode=adamw_mode)
    rp, rm, rv = p0.double(), torch.zeros(1031, dtype=torch.float64), torch.zeros(1031, dtype=torch.float64)
    for step in range(1, 4):
        g = torch.randn(1031, generator=gen)
        p.grad = g
        p_bc.grad = g.clone()
        opt.step()
        opt_bc.step()
        rp, rm, rv = (round_to(t, torch.float32) for t in reference_adam_step(
            rp, g, rm, rv, step, HYPER["lr"], 0.9, 0.999, 1e-8, 0.02, False, adamw_mode))
    assert_close_to_reference(p.detach(), rp, torch.float32, "param")
    # Without bias correction the first steps are much smaller: the flag must reach the kernel.
    assert not torch.allclose(p.detach(), p_bc.detach(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("param_dtype,fp32_optimizer_states", [
    (torch.bfloat16, True), (torch.float16, True), (torch.bfloat16, False), (torch.float16, False)])
def test_cpuadam_16bit(param_dtype: torch.dtype, fp32_optimizer_states: bool) -> None:
    gen = torch.Generator().manual_seed(4)
    sizes = [3, 17, 64, 1000, 70001]
    params = [torch.nn.Parameter(torch.randn(s, generator=gen).to(param_dtype)) for s in sizes]
    opt = CPUAdam(params, lr=HYPER["lr"], weight_decay=0.01, fp32_optimizer_states=fp32_optimizer_states)
    state_dtype = torch.float32 if fp32_optimizer_states else param_dtype
    ref = [(p.detach().double(), torch.zeros(s, dtype=torch.float64), torch.zeros(s, dtype=torch.float64))
           for p, s in zip(params, sizes, strict=True)]
    for step in range(1, 5):
        grads = [torch.randn(s, generator=gen).to(param_dtype) for s in sizes]
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        opt.step()
        ref = [tuple(round_to(t, d) for t, d in zip(
                   reference_adam_step(rp, g, rm, rv, step, HYPER["lr"], 0.9, 0.999, 1e-8, 0.01, True, True),
                   (param_dtype, state_dtype, state_dtype), strict=True))
               for (rp, rm, rv), g in zip(ref, grads, strict=True)]
    for p, (rp, rm, rv) in zip(params, ref, strict=True):
        assert p.dtype == param_dtype
        assert opt.state[p]["exp_avg"].dtype == state_dtype
        assert_close_to_reference(p.detach(), rp, param_dtype, "param")
        assert_close_to_reference(opt.state[p]["exp_avg"], rm, state_dtype, "exp_avg")
        assert_close_to_reference(opt.state[p]["exp_avg_sq"], rv, state_dtype, "exp_avg_sq")


def test_bf16_rounding_is_nearest_even(cpu_adam_module: Any) -> None:
    """With lr=0 the parameter is only rounded; values between bf16 neighbours must round like torch."""
    gen = torch.Generator().manual_seed(5)
    # bf16 values: with lr=0 and no decay the stored p must be unchanged bit for bit (exactly representable).
    p = torch.randn(1037, generator=gen).to(torch.bfloat16)
    before = p.clone()
    m = torch.zeros(1037, dtype=torch.bfloat16)
    v = torch.zeros(1037, dtype=torch.bfloat16)
    g = torch.randn(1037, generator=gen).to(torch.bfloat16)
    cpu_adam_module.adam_step([p], [g], [m], [v], [], 1, 0.0, 0.9, 0.999, 1e-8, 0.0, True, True)
    assert torch.equal(p, before)
    # m = 0.1 * g computed in fp32, then rounded: must equal torch's fp32 -> bf16 cast (nearest even).
    expected_m = (g.float() * torch.tensor(0.1, dtype=torch.float32)).to(torch.bfloat16)
    mismatch = (m != expected_m).sum().item()
    # fma(0.1, g - 0, 0) is one rounding of 0.1*g, as torch's multiply: identical bits expected.
    assert mismatch == 0, f"{mismatch} of 1037 exp_avg elements differ from torch's bf16 rounding"


@pytest.mark.parametrize("copy_dtype", [torch.bfloat16, torch.float16])
def test_model_copy_rounding_is_nearest_even(cpu_adam_module: Any, copy_dtype: torch.dtype) -> None:
    """With lr=0 the fp32 masters keep their values; the copy must be torch's cast of them, bit for bit, also
    for values exactly halfway between two 16-bit neighbours (ties to even)."""
    gen = torch.Generator().manual_seed(14)
    master = torch.randn(4099, generator=gen)
    eps16 = torch.finfo(copy_dtype).eps
    master[:64] = 1.0 + eps16 * (torch.arange(64) + 0.5)  # ties: 1 + (k + 1/2) ulp
    before = master.clone()
    m, v = torch.zeros(4099), torch.zeros(4099)
    copies = [torch.full((4099,), math.nan, dtype=copy_dtype)]
    cpu_adam_module.adam_step([master], [torch.randn(4099, generator=gen)], [m], [v], copies, 1, 0.0, 0.9, 0.999,
                              1e-8, 0.0, True, True)
    assert torch.equal(master, before)
    assert torch.equal(copies[0], before.to(copy_dtype))


def test_many_tensors_mixed_sizes(cpu_adam_module: Any) -> None:
    """~200 tensors crossing thread-range boundaries, with empty ones, in one call."""
    gen = torch.Generator().manual_seed(6)
    sizes = torch.randint(0, 6000, (200,), generator=gen).tolist()
    sizes[5] = 0
    sizes[100] = 0
    run_kernel_vs_reference(cpu_adam_module.adam_step, [(s, COMBOS[0]) for s in sizes], steps=3,
                            weight_decay=0.01, bias_correction=True, adamw_mode=True, seed=7)


@pytest.mark.parametrize("group", ["no_copy", "with_copy"])
def test_many_tensors_of_mixed_dtype_combinations_in_one_call(cpu_adam_module: Any, group: str) -> None:
    """200 tensors of random sizes (some empty), each with one of the spec's combinations, in one call."""
    combos = NO_COPY if group == "no_copy" else WITH_COPY
    gen = torch.Generator().manual_seed(15)
    sizes = torch.randint(0, 6000, (200,), generator=gen).tolist()
    sizes[3] = sizes[150] = 0
    run_kernel_vs_reference(cpu_adam_module.adam_step, [(s, combos[i % len(combos)]) for i, s in enumerate(sizes)],
                            steps=3, weight_decay=0.02, bias_correction=True, adamw_mode=True, seed=16)


@pytest.mark.parametrize("combo", WITH_COPY, ids=_combo_id)
@pytest.mark.parametrize("adamw_mode,weight_decay", [(True, 0.03), (False, 0.03)])
def test_fp32_masters_write_16bit_model_copies(cpu_adam_module: Any, combo: tuple, adamw_mode: bool,
                                               weight_decay: float) -> None:
    """fp32 masters with fp32 or 16-bit gradients: the masters follow the reference in fp32 and every
    element of each (NaN-poisoned) copy is the updated master rounded once to the copy's dtype."""
    run_kernel_vs_reference(cpu_adam_module.adam_step, every_size_of_each([combo]), steps=3,
                            weight_decay=weight_decay, bias_correction=True, adamw_mode=adamw_mode, seed=17)


def test_mixed_dtypes_in_one_group() -> None:
    gen = torch.Generator().manual_seed(8)
    p32 = torch.nn.Parameter(torch.randn(123, generator=gen))
    p16 = torch.nn.Parameter(torch.randn(77, generator=gen).to(torch.bfloat16))
    opt = CPUAdam([p32, p16], lr=HYPER["lr"])
    r32 = (p32.detach().double(), torch.zeros(123, dtype=torch.float64), torch.zeros(123, dtype=torch.float64))
    r16 = (p16.detach().double(), torch.zeros(77, dtype=torch.float64), torch.zeros(77, dtype=torch.float64))
    for step in range(1, 4):
        g32, g16 = torch.randn(123, generator=gen), torch.randn(77, generator=gen).to(torch.bfloat16)
        p32.grad, p16.grad = g32, g16
        opt.step()
        r32 = tuple(round_to(t, torch.float32) for t in reference_adam_step(*r32[:1], g32, *r32[1:], step,
                    HYPER["lr"], 0.9, 0.999, 1e-8, 0.0, True, True))
        r16p, r16m, r16v = reference_adam_step(r16[0], g16, r16[1], r16[2], step, HYPER["lr"], 0.9, 0.999, 1e-8,
                                               0.0, True, True)
        r16 = (round_to(r16p, torch.bfloat16), round_to(r16m, torch.float32), round_to(r16v, torch.float32))
    assert_close_to_reference(p32.detach(), r32[0], torch.float32, "fp32 param")
    assert_close_to_reference(p16.detach(), r16[0], torch.bfloat16, "bf16 param")


# --------------------------------------------------------------------------------------------------------
# Every ISA level this CPU runs
# --------------------------------------------------------------------------------------------------------


def _runnable_isa_levels() -> list[str]:
    capability = torch.backends.cpu.get_cpu_capability()
    levels = ["portable"]
    if capability in ("AVX2", "AVX512"):
        levels.append("avx2")
    if capability == "AVX512":
        levels.append("avx512")
    return levels


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
def test_kernel_each_isa(isa: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every combination of the spec, every tail size, both weight-decay modes, at each SIMD level."""
    if isa not in _runnable_isa_levels():
        pytest.skip(f"this CPU cannot run {isa} code (torch reports {torch.backends.cpu.get_cpu_capability()})")
    from anyaccel.op_builder import CPUAdamBuilder

    monkeypatch.setenv("ANYACCEL_CPU_ISA", isa)
    module = CPUAdamBuilder().load()
    assert module.isa == isa and getattr(torch.ops, module.namespace).isa() == isa
    for index, group in enumerate((NO_COPY, WITH_COPY)):
        for adamw_mode, weight_decay in ((True, 0.03), (False, 0.03), (True, 0.0)):
            run_kernel_vs_reference(module.adam_step, every_size_of_each(group), steps=3,
                                    weight_decay=weight_decay, bias_correction=True, adamw_mode=adamw_mode,
                                    seed=100 + index)


def test_isa_op_answers(cpu_adam_module: Any) -> None:
    assert cpu_adam_module.isa in ("avx512", "avx2", "sve", "neon", "portable")
    assert getattr(torch.ops, cpu_adam_module.namespace).isa() == cpu_adam_module.isa


# --------------------------------------------------------------------------------------------------------
# Optimizer behaviour
# --------------------------------------------------------------------------------------------------------


def _train(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], grads: list[list[torch.Tensor]]) -> None:
    for step_grads in grads:
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.clone()
        opt.step()


@pytest.mark.parametrize("param_dtype", [torch.float32, torch.bfloat16])
def test_state_dict_round_trip(param_dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(9)
    shapes = [(31,), (4, 5), (1000,)]
    init = [torch.randn(s, generator=gen).to(param_dtype) for s in shapes]
    grads = [[torch.randn(s, generator=gen).to(param_dtype) for s in shapes] for _ in range(6)]
    groups = lambda ps: [{"params": ps[:1], "weight_decay": 0.1}, {"params": ps[1:], "lr": 3e-3}]  # noqa: E731

    straight = [torch.nn.Parameter(t.clone()) for t in init]
    opt = CPUAdam(groups(straight), lr=1e-2)
    _train(opt, straight, grads)

    first = [torch.nn.Parameter(t.clone()) for t in init]
    opt1 = CPUAdam(groups(first), lr=1e-2)
    _train(opt1, first, grads[:3])
    buffer = io.BytesIO()
    torch.save({"params": [p.detach() for p in first], "opt": opt1.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    resumed = [torch.nn.Parameter(t.clone()) for t in saved["params"]]
    opt2 = CPUAdam(groups(resumed), lr=5.0)  # lr restored from the state dict
    opt2.load_state_dict(saved["opt"])
    assert opt2.state[resumed[0]]["exp_avg"].dtype == torch.float32
    _train(opt2, resumed, grads[3:])

    for a, b in zip(straight, resumed, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(straight, resumed, strict=True):
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(opt.state[a][key], opt2.state[b][key])
        assert opt.state[a]["step"] == opt2.state[b]["step"] == 6


def test_load_torch_adamw_state_dict() -> None:
    """A torch.optim.AdamW state dict (tensor ``step``) continues training identically under CPUAdam."""
    gen = torch.Generator().manual_seed(10)
    p = torch.nn.Parameter(torch.randn(513, generator=gen))
    torch_opt = torch.optim.AdamW([p], lr=1e-2, weight_decay=0.01)
    _train(torch_opt, [p], [[torch.randn(513, generator=gen)] for _ in range(2)])
    ours_p = torch.nn.Parameter(p.detach().clone())
    ours = CPUAdam([ours_p], lr=1e-2, weight_decay=0.01)
    ours.load_state_dict(copy.deepcopy(torch_opt.state_dict()))
    assert ours.state[ours_p]["step"] == 2
    assert ours.param_groups[0]["adamw_mode"] is True and ours.param_groups[0]["bias_correction"] is True
    more = [[torch.randn(513, generator=gen)] for _ in range(2)]
    _train(torch_opt, [p], more)
    _train(ours, [ours_p], more)
    torch.testing.assert_close(ours_p.detach(), p.detach(), rtol=1e-5, atol=1e-6)


def test_closure_grad_none_and_zero_grad() -> None:
    gen = torch.Generator().manual_seed(11)
    used = torch.nn.Parameter(torch.randn(50, generator=gen))
    unused = torch.nn.Parameter(torch.randn(20, generator=gen))
    unused_before = unused.detach().clone()
    used_before = used.detach().clone()
    target = torch.randn(50, generator=gen)
    opt = CPUAdam([used, unused], lr=0.1)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = ((used - target) ** 2).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert isinstance(loss, torch.Tensor) and loss.item() > 0
    assert not torch.equal(used.detach(), used_before)
    assert torch.equal(unused.detach(), unused_before)
    assert unused not in opt.state
    opt.zero_grad()
    assert used.grad is None
    assert opt.step() is None  # no gradients: nothing to do


def test_kernel_is_loaded_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    """Construction and a step without gradients never load the kernel; the first real step does."""

    class Loaded(Exception):
        pass

    def refuse(*args: Any) -> None:
        raise Loaded

    from anyaccel.ops import dispatch

    monkeypatch.setattr(dispatch, "load", refuse)
    p = torch.nn.Parameter(torch.randn(3))
    opt = CPUAdam([p])
    opt.step()
    with pytest.raises(Loaded):
        p.grad = torch.randn(3)
        opt.step()


def test_the_kernel_is_the_adam_familys_cpu_implementation() -> None:
    from anyaccel.op_builder import CPUAdamBuilder
    from anyaccel.ops import dispatch

    p = torch.nn.Parameter(torch.randn(3))
    p.grad = torch.randn(3)
    opt = CPUAdam([p])
    opt.step()
    kernel = dispatch.load("adam", "cpu", "cpu")
    assert dispatch.choose("adam", "cpu").name == "cpu" and kernel.namespace.startswith("anyaccel_cpu_adam_")
    assert kernel is CPUAdamBuilder().load()  # the one loaded module, whichever path asks


# --------------------------------------------------------------------------------------------------------
# Errors: the optimizer
# --------------------------------------------------------------------------------------------------------


def test_amsgrad_is_rejected() -> None:
    with pytest.raises(NotImplementedError, match=r"CPUAdam: amsgrad=True is not implemented"):
        CPUAdam([torch.nn.Parameter(torch.randn(3))], amsgrad=True)
    p = torch.nn.Parameter(torch.randn(3))
    opt = CPUAdam([p])
    opt.param_groups[0]["amsgrad"] = True
    p.grad = torch.randn(3)
    with pytest.raises(NotImplementedError, match=r"param_groups\[0\]\['amsgrad'\]=True is not implemented"):
        opt.step()


@pytest.mark.parametrize("kwargs,name,error", [
    ({"lr": -1e-3}, "lr", ValueError), ({"betas": (1.0, 0.999)}, r"betas\[0\]", ValueError),
    ({"betas": (0.9, float("nan"))}, r"betas\[1\]", ValueError), ({"eps": 0.0}, "eps", ValueError),
    ({"weight_decay": -0.1}, "weight_decay", ValueError), ({"lr": float("inf")}, "lr", ValueError),
    ({"betas": (0.9,)}, "betas", TypeError), ({"weight_decay": torch.tensor(0.1)}, "weight_decay", TypeError)])
def test_bad_hyper_parameters_rejected(kwargs: dict[str, Any], name: str, error: type[Exception]) -> None:
    with pytest.raises(error, match=f"^CPUAdam: {name}=.* is invalid; accepted"):
        CPUAdam([torch.nn.Parameter(torch.randn(3))], **kwargs)


@pytest.mark.parametrize("kwargs", [{"lr": 1e39}, {"eps": 1e39}, {"weight_decay": 1e39}])
def test_values_the_kernel_refuses_are_refused_at_construction(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="representable in float32"):
        CPUAdam([torch.nn.Parameter(torch.randn(3))], **kwargs)


def test_a_refused_step_changes_no_state() -> None:
    p = torch.nn.Parameter(torch.randn(5))
    opt = CPUAdam([p])
    p.grad = torch.randn(5)
    opt.step()
    before = {k: v.clone() for k, v in opt.state[p].items()}
    opt.param_groups[0]["lr"] = 1e39  # refused before anything changes
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['lr'\]=1e\+39 is invalid"):
        opt.step()
    assert all(torch.equal(opt.state[p][k], v) for k, v in before.items())
    assert int(opt.state[p]["step"]) == 1


def test_bad_group_hyper_parameter_rejected_at_step() -> None:
    p = torch.nn.Parameter(torch.randn(3))
    opt = CPUAdam([p])
    opt.param_groups[0]["lr"] = -0.5
    p.grad = torch.randn(3)
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['lr'\]=-0\.5"):
        opt.step()


def test_non_cpu_param_rejected() -> None:
    p = torch.nn.Parameter(torch.empty(8, device="meta"))
    with pytest.raises(ValueError, match=r"params'\]\[0\] is on meta; CPUAdam updates CPU tensors only.*FusedAdam"):
        CPUAdam([p])


def test_sparse_grad_rejected() -> None:
    p = torch.nn.Parameter(torch.randn(10))
    p.grad = torch.randn(10).to_sparse()
    with pytest.raises(ValueError, match="has layout torch.sparse_coo.*SparseAdam"):
        CPUAdam([p]).step()


def test_non_contiguous_param_rejected() -> None:
    p = torch.nn.Parameter(torch.randn(6, 4).t())
    with pytest.raises(ValueError, match=r"params'\]\[0\] is not contiguous"):
        CPUAdam([p])


def test_non_contiguous_grad_is_read_through_a_contiguous_copy() -> None:
    p = torch.nn.Parameter(torch.randn(6, 4))
    q = torch.nn.Parameter(p.detach().clone())
    p.grad = torch.randn(4, 6).t()
    q.grad = p.grad.contiguous()
    CPUAdam([p]).step()
    CPUAdam([q]).step()
    assert torch.equal(p, q)


def test_unsupported_param_dtype_rejected() -> None:
    p = torch.nn.Parameter(torch.randn(5, dtype=torch.float64))
    with pytest.raises(ValueError, match="dtype torch.float64; accepted"):
        CPUAdam([p])


def test_a_gradient_of_another_dtype_is_refused() -> None:
    p = torch.nn.Parameter(torch.randn(5))
    p.grad_dtype = None  # torch >= 2.10 refuses a gradient of another dtype unless told so
    p.grad = torch.randn(5).to(torch.bfloat16)
    with pytest.raises(ValueError, match=r"the gradient of param_groups\[0\]\['params'\]\[0\] is a torch.bfloat16"):
        CPUAdam([p]).step()


# --------------------------------------------------------------------------------------------------------
# Errors: the kernel validates every entry itself (a bad entry raises, never crashes), with the spec's messages
# --------------------------------------------------------------------------------------------------------


def _kernel_args(n: int = 3, size: int = 10) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(12)
    return {
        "params": [torch.randn(size, generator=gen) for _ in range(n)],
        "grads": [torch.randn(size, generator=gen) for _ in range(n)],
        "exp_avgs": [torch.rand(size, generator=gen) for _ in range(n)],
        "exp_avg_sqs": [torch.rand(size, generator=gen) for _ in range(n)],
        "model_copies": [],
        "step": 1, "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0,
        "bias_correction": True, "adamw_mode": True,
    }


ARG_ORDER = ("params", "grads", "exp_avgs", "exp_avg_sqs", "model_copies", "step", "lr", "beta1", "beta2", "eps",
             "weight_decay", "bias_correction", "adamw_mode")


def _call(module: Any, args: dict[str, Any]) -> None:
    module.adam_step(*(args[k] for k in ARG_ORDER))


def _mutate(args: dict[str, Any], key: str, index: int, value: Any) -> dict[str, Any]:
    if index < 0:
        args[key] = value
    else:
        args[key][index] = value
    return args


ACCEPTED = SPEC.accepted_dtypes_text().replace("(", r"\(").replace(")", r"\)")

BAD_INPUTS = [
    ("grads", 1, torch.randn(20)[::2], r"grads\[1\] is not contiguous \(sizes \[10\], strides \[2\]\); pass "
     r"contiguous tensors"),
    ("params", 2, torch.randn(10, 2)[:, 0], r"params\[2\] is not contiguous"),
    ("grads", 0, torch.randn(10, dtype=torch.bfloat16),
     r"params\[0\] has the dtype combination \(param, grad, state, model_copy\) = \(float32, bfloat16, float32, "
     rf"none\), which is not supported; accepted: {ACCEPTED}$"),
    ("exp_avgs", 2, torch.randn(11), r"exp_avgs\[2\] has shape \[11\] but params\[2\] has shape \[10\]; they must "
     r"have the same shape"),
    ("exp_avg_sqs", 1, torch.randn(2, 5), r"exp_avg_sqs\[1\] has shape \[2, 5\]"),
    ("exp_avg_sqs", 0, torch.rand(10, dtype=torch.float64),
     r"the optimizer states of params\[0\] have different dtypes \(exp_avgs\[0\] float32, exp_avg_sqs\[0\] "
     r"float64\); every state list must share one dtype"),
    ("step", -1, 0, r"adam_step: step=0(\.0)? is invalid; accepted: a finite step >= 1$"),  # see test_adam_fakes
    ("lr", -1, -1e-3, r"adam_step: lr=-0\.001 is invalid; accepted: a finite lr >= 0 representable in float32$"),
    ("lr", -1, 1e39, r"adam_step: lr=1e\+39 is invalid; accepted: a finite lr >= 0 representable in float32$"),
    ("lr", -1, float("inf"), r"lr=inf is invalid"),
    ("beta1", -1, 1.0, r"beta1=1(\.0)? is invalid; accepted: a finite 0 <= beta1 < 1 representable in float32$"),
    ("beta1", -1, -0.1, r"beta1=-0\.1 is invalid"),
    ("beta2", -1, float("nan"), r"beta2=nan is invalid; accepted: a finite 0 <= beta2 < 1"),
    ("eps", -1, 0.0, r"eps=0(\.0)? is invalid; accepted: a finite eps > 0 representable in float32$"),
    ("eps", -1, 1e39, r"eps=1e\+39 is invalid"),
    ("weight_decay", -1, -0.5, r"weight_decay=-0\.5 is invalid; accepted: a finite weight_decay >= 0"),
    ("weight_decay", -1, float("-inf"), r"weight_decay=-inf is invalid"),
]


@pytest.mark.parametrize("key,index,value,pattern", BAD_INPUTS)
def test_kernel_rejects_bad_input(cpu_adam_module: Any, key: str, index: int, value: Any, pattern: str) -> None:
    args = _mutate(_kernel_args(), key, index, value)
    before = [t.clone() for t in args["params"] + args["exp_avgs"] + args["exp_avg_sqs"]]
    with pytest.raises(RuntimeError, match=pattern) as err:
        _call(cpu_adam_module, args)
    assert isinstance(err.value, RuntimeError) and not isinstance(err.value, NotImplementedError)
    # the kernel's words alone: no "<function>, <file>:<line>, " prefix of a C++ source line
    assert str(err.value).startswith("adam_step: "), str(err.value)
    # Validation happens before any update: nothing was written.
    after = args["params"] + args["exp_avgs"] + args["exp_avg_sqs"]
    for a, b in zip(after, before, strict=True):
        if a.shape == b.shape and a.dtype == b.dtype:
            assert torch.equal(a, b), "validation must happen before any update"


@pytest.mark.parametrize("copies,pattern", [
    ([torch.zeros(10, dtype=torch.bfloat16)] * 2, r"got 3 params, 3 grads, 3 exp_avgs, 3 exp_avg_sqs and 2 "
     r"model_copies; grads and every state list need one entry per parameter, model_copies none or one per "
     r"parameter"),
    ([torch.zeros(10)] * 3, r"params\[0\] has the dtype combination \(param, grad, state, model_copy\) = "
     r"\(float32, float32, float32, float32\)"),
    ([torch.zeros(10, dtype=torch.bfloat16), torch.zeros(9, dtype=torch.bfloat16),
      torch.zeros(10, dtype=torch.bfloat16)], r"model_copies\[1\] has shape \[9\] but params\[1\] has shape \[10\]"),
    ([torch.zeros(10, dtype=torch.bfloat16), torch.zeros(10, dtype=torch.bfloat16),
      torch.zeros(20, dtype=torch.bfloat16)[::2]], r"model_copies\[2\] is not contiguous"),
])
def test_kernel_rejects_bad_model_copies(cpu_adam_module: Any, copies: list[torch.Tensor], pattern: str) -> None:
    args = _kernel_args()
    args["model_copies"] = copies
    before = [p.clone() for p in args["params"]]
    with pytest.raises(RuntimeError, match=pattern):
        _call(cpu_adam_module, args)
    assert all(torch.equal(a, b) for a, b in zip(args["params"], before, strict=True))


def test_model_copies_of_16bit_params_are_refused(cpu_adam_module: Any) -> None:
    args = _kernel_args(n=1)
    args["params"] = [args["params"][0].to(torch.bfloat16)]
    args["grads"] = [args["grads"][0].to(torch.bfloat16)]
    args["model_copies"] = [torch.zeros(10, dtype=torch.bfloat16)]
    with pytest.raises(RuntimeError, match=r"= \(bfloat16, bfloat16, float32, bfloat16\), which is not supported"):
        _call(cpu_adam_module, args)


@pytest.mark.parametrize("key,index,value,pattern", [
    ("grads", 2, torch.randn(10).to_sparse(),
     r"grads\[2\] has (a non-strided layout|layout torch\.sparse_coo); only dense \(strided\) tensors are accepted, "
     r"sparse gradients are not supported"),
    ("grads", 0, torch.randn(10, device="meta"),
     r"^adam_step: grads\[0\] is on device meta; the CPU kernel takes CPU tensors \(use FusedAdam for accelerator "
     r"tensors, or move the tensor to the CPU\)$"),
    ("exp_avg_sqs", 1, torch.randn(10, device="meta"), r"exp_avg_sqs\[1\] is on device meta"),
])
def test_kernel_rejects_sparse_and_meta_entries(cpu_adam_module: Any, key: str, index: int, value: Any,
                                                pattern: str) -> None:
    """A sparse or meta entry reroutes the dispatcher (SparseCPU kernel, fake); both still validate."""
    args = _mutate(_kernel_args(), key, index, value)
    before = [p.clone() for p in args["params"]]
    with pytest.raises(RuntimeError, match=pattern):
        _call(cpu_adam_module, args)
    assert all(torch.equal(a, b) for a, b in zip(args["params"], before, strict=True))


def test_kernel_rejects_all_meta_call(cpu_adam_module: Any) -> None:
    """All-meta tensors dispatch to the fake only; it must refuse rather than silently do nothing."""
    args = _kernel_args(n=2)
    for key in ("params", "grads", "exp_avgs", "exp_avg_sqs"):
        args[key] = [torch.empty(10, device="meta") for _ in range(2)]
    with pytest.raises(RuntimeError, match=r"^adam_step: params\[0\] is on device meta; the CPU kernel takes CPU"):
        _call(cpu_adam_module, args)


@pytest.mark.parametrize("drop,counts", [
    ("exp_avgs", "got 3 params, 3 grads, 2 exp_avgs, 3 exp_avg_sqs and 0 model_copies"),
    ("grads", "got 3 params, 2 grads, 3 exp_avgs, 3 exp_avg_sqs and 0 model_copies"),
    ("exp_avg_sqs", "got 3 params, 3 grads, 3 exp_avgs, 2 exp_avg_sqs and 0 model_copies"),
])
def test_kernel_rejects_list_length_mismatch(cpu_adam_module: Any, drop: str, counts: str) -> None:
    args = _kernel_args()
    args[drop] = args[drop][:2]
    with pytest.raises(RuntimeError, match=counts):
        _call(cpu_adam_module, args)


def test_kernel_rejects_unsupported_state_combo(cpu_adam_module: Any) -> None:
    args = _kernel_args(n=1)
    args["exp_avgs"] = [torch.rand(10).to(torch.bfloat16)]
    args["exp_avg_sqs"] = [torch.rand(10).to(torch.bfloat16)]
    pattern = r"params\[0\] has the dtype combination \(param, grad, state, model_copy\) = \(float32, float32, " \
              r"bfloat16, none\), which is not supported; accepted: \(float32, float32, float32, none\)"
    with pytest.raises(RuntimeError, match=pattern):
        _call(cpu_adam_module, args)


def test_kernel_empty_tensors(cpu_adam_module: Any) -> None:
    # (Lists with no tensor at all cannot be dispatched by torch; CPUAdam never makes such a call.)
    args = _kernel_args(n=2, size=0)
    _call(cpu_adam_module, args)
    assert all(p.numel() == 0 for p in args["params"])


_HOSTILE = """
import json, sys, torch
from anyaccel.op_builder import CPUAdamBuilder
m = CPUAdamBuilder().load()
z = lambda ts, dt=None: [torch.zeros_like(t, dtype=dt or t.dtype) for t in ts]
out = {}
# 0-dim tensors, empty tensors of several shapes, and an empty model-copy list entry
p = [torch.tensor(1.5), torch.zeros(0, 5), torch.randn(3, 0, 2), torch.randn(1)]
g = [torch.tensor(0.5), torch.zeros(0, 5), torch.randn(3, 0, 2), torch.randn(1)]
m.adam_step(p, g, z(p), z(p), z(p, torch.bfloat16), 1, 0.1, 0.9, 0.999, 1e-8, 0.0, True, True)
out["scalar"] = p[0].item()
# 10000 one-element tensors in one call (one thread range spans thousands of tensors)
n = 10000
p = [torch.randn(1) for _ in range(n)]
g = [torch.randn(1) for _ in range(n)]
c = [torch.zeros(1, dtype=torch.float16) for _ in range(n)]
m.adam_step(p, g, z(p), z(p), c, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
out["copies"] = all(torch.equal(a.half(), b) for a, b in zip(p, c))
# an empty call: refused with the op's own message (the build's fallback kernel), not by a crash
try:
    m.adam_step([], [], [], [], [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    out["empty"] = "accepted"
except (RuntimeError, NotImplementedError) as exc:
    out["empty"] = str(exc)
# a huge step count (pow underflow of beta**step)
p = [torch.randn(7)]
m.adam_step(p, [torch.randn(7)], z(p), z(p), [], 2**62, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
out["huge_step_finite"] = bool(torch.isfinite(p[0]).all())
print(json.dumps(out))
"""


def test_hostile_but_valid_calls_in_a_subprocess(cpu_adam_module: Any) -> None:
    """Shapes a kernel could mishandle (0-dim, empty, 10,000 tiny tensors, an empty call, a huge step),
    in a child process so a crash fails this test instead of the session."""
    proc = subprocess.run([sys.executable, "-c", _HOSTILE], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"the kernel crashed (rc {proc.returncode}): {proc.stderr[-3000:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"scalar": pytest.approx(1.4), "copies": True, "huge_step_finite": True,
                   "empty": "adam_step: every tensor list is empty; pass at least one parameter (anyaccel's "
                            "optimizers skip a step that has nothing to update)"}


# --------------------------------------------------------------------------------------------------------
# torch.library contract (schema, fake, torch.compile tracing)
# --------------------------------------------------------------------------------------------------------


def _opcheck_args(combo: tuple, sizes: tuple[int, ...] = (5, 40, 0)) -> tuple:
    gen = torch.Generator().manual_seed(13)
    param, grad, state, copy_dtype = combo
    return (
        [torch.randn(s, generator=gen).to(param) for s in sizes],
        [torch.randn(s, generator=gen).to(grad) for s in sizes],
        [torch.randn(s, generator=gen).to(state) for s in sizes],
        [torch.rand(s, generator=gen).to(state) for s in sizes],
        [torch.zeros(s, dtype=copy_dtype) for s in sizes] if copy_dtype is not None else [],
        3, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, True,
    )


@pytest.mark.parametrize("combo", COMBOS, ids=_combo_id)
def test_opcheck(cpu_adam_module: Any, combo: tuple) -> None:
    torch.library.opcheck(cpu_adam_module.adam_step, _opcheck_args(combo))


def test_schema_is_the_specs(cpu_adam_module: Any) -> None:
    schema = str(cpu_adam_module.adam_step.default._schema)
    assert schema == f"{cpu_adam_module.namespace}::{SPEC.function('adam_step').full_schema}"
    assert str(getattr(torch.ops, cpu_adam_module.namespace).isa.default._schema).endswith("::isa() -> str")


def test_torch_compile_traces_the_op_without_a_graph_break(cpu_adam_module: Any) -> None:
    args = _opcheck_args(COMBOS[0], sizes=(5, 40))
    eager = [[t.clone() for t in lst] if isinstance(lst, list) else lst for lst in args]
    cpu_adam_module.adam_step(*eager)

    def step(*a: Any) -> None:
        cpu_adam_module.adam_step(*a)

    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(step, backend="eager", fullgraph=True)  # fullgraph: a graph break would raise
    compiled(*args)
    for a, b in zip(args[:4], eager[:4], strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)


@pytest.mark.parametrize("beta1", [0.0, 0.3, 0.5, 0.9])
def test_first_moment_is_torch_lerp_even_when_exp_avg_dwarfs_the_gradient(cpu_adam_module: Any, beta1: float) -> None:
    """exp_avg follows ``torch.lerp(exp_avg, grad, 1 - beta1)`` bit for bit, including its two formulas (weight
    below and at least 0.5): ``exp_avg + w * (grad - exp_avg)`` would cancel to 0.0 for beta1=0 with
    exp_avg=3e38 (the gradient lost); torch.lerp gives the gradient. Sizes cover the SIMD body and the tail."""
    n = 37
    gen = torch.Generator().manual_seed(int(beta1 * 10))
    g = torch.randn(n, generator=gen) * 0.1
    m0 = torch.full((n,), 3e38)
    m0[::3] = torch.randn(len(m0[::3]), generator=gen)  # ordinary moments in between
    p, m, v = torch.randn(n, generator=gen), m0.clone(), torch.zeros(n)
    cpu_adam_module.adam_step([p], [g], [m], [v], [], 1, 1e-3, beta1, 0.999, 1e-8, 0.0, True, True)
    torch.testing.assert_close(m, torch.lerp(m0, g, 1 - beta1), rtol=0, atol=0)
    if beta1 == 0.0:
        torch.testing.assert_close(m, g, rtol=0, atol=0)
