"""Correctness of the cpu_adam kernel and of ``anyaccel.ops.CPUAdam``.

References: torch.optim.Adam/AdamW for what torch can do (fp32, bias correction on), and a float64
re-implementation of the documented update rule that rounds to the storage dtypes where the kernel does
(checked against torch in float64 by ``test_reference_matches_torch``) for the rest.
"""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
import torch

from anyaccel.ops import CPUAdam

HYPER = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
TAIL_SIZES = [1, 7, 15, 17, 33, 0, 1000, 4099]
STATE_COMBOS = [
    (torch.float32, torch.float32),
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.float32),
    (torch.bfloat16, torch.bfloat16),
    (torch.float16, torch.float16),
]


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
    sizes: list[int],
    param_dtype: torch.dtype,
    state_dtype: torch.dtype,
    steps: int,
    weight_decay: float,
    bias_correction: bool,
    adamw_mode: bool,
    seed: int,
) -> None:
    """Runs ``steps`` kernel steps on fresh random data and compares with the float64 reference."""
    gen = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=gen).to(param_dtype) for s in sizes]
    exp_avgs = [torch.zeros(s, dtype=state_dtype) for s in sizes]
    exp_avg_sqs = [torch.zeros(s, dtype=state_dtype) for s in sizes]
    ref = [(p.double(), m.double(), v.double()) for p, m, v in zip(params, exp_avgs, exp_avg_sqs)]
    for step in range(1, steps + 1):
        grads = [torch.randn(s, generator=gen).to(param_dtype) for s in sizes]
        adam_step(params, grads, exp_avgs, exp_avg_sqs, step, HYPER["lr"], HYPER["beta1"], HYPER["beta2"],
                  HYPER["eps"], weight_decay, bias_correction, adamw_mode)
        new_ref = []
        for (rp, rm, rv), g in zip(ref, grads):
            p, m, v = reference_adam_step(rp, g, rm, rv, step, HYPER["lr"], HYPER["beta1"], HYPER["beta2"],
                                          HYPER["eps"], weight_decay, bias_correction, adamw_mode)
            new_ref.append((round_to(p, param_dtype), round_to(m, state_dtype), round_to(v, state_dtype)))
        ref = new_ref
    for i, (p, m, v) in enumerate(zip(params, exp_avgs, exp_avg_sqs)):
        assert p.dtype == param_dtype and m.dtype == state_dtype and v.dtype == state_dtype
        assert_close_to_reference(p, ref[i][0], param_dtype, f"params[{i}] (numel {p.numel()})")
        assert_close_to_reference(m, ref[i][1], state_dtype, f"exp_avgs[{i}]")
        assert_close_to_reference(v, ref[i][2], state_dtype, f"exp_avg_sqs[{i}]")


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
        for a, b in zip(ours, theirs):
            g = torch.randn(a.shape, generator=gen)
            a.grad = g.clone()
            b.grad = g.clone()
        opt.step()
        ref.step()
    for a, b in zip(ours, theirs):
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
           for p, s in zip(params, sizes)]
    for step in range(1, 5):
        grads = [torch.randn(s, generator=gen).to(param_dtype) for s in sizes]
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
        ref = [tuple(round_to(t, d) for t, d in zip(
                   reference_adam_step(rp, g, rm, rv, step, HYPER["lr"], 0.9, 0.999, 1e-8, 0.01, True, True),
                   (param_dtype, state_dtype, state_dtype)))
               for (rp, rm, rv), g in zip(ref, grads)]
    for p, (rp, rm, rv) in zip(params, ref):
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
    cpu_adam_module.adam_step([p], [g], [m], [v], 1, 0.0, 0.9, 0.999, 1e-8, 0.0, True, True)
    assert torch.equal(p, before)
    # m = 0.1 * g computed in fp32, then rounded: must equal torch's fp32 -> bf16 cast (nearest even).
    expected_m = (g.float() * torch.tensor(0.1, dtype=torch.float32)).to(torch.bfloat16)
    mismatch = (m != expected_m).sum().item()
    # fma(0.1, g - 0, 0) is one rounding of 0.1*g, as torch's multiply: identical bits expected.
    assert mismatch == 0, f"{mismatch} of 1037 exp_avg elements differ from torch's bf16 rounding"


def test_many_tensors_mixed_sizes(cpu_adam_module: Any) -> None:
    """~200 tensors crossing thread-range boundaries, with empty ones, in one call."""
    gen = torch.Generator().manual_seed(6)
    sizes = torch.randint(0, 6000, (200,), generator=gen).tolist()
    sizes[5] = 0
    sizes[100] = 0
    run_kernel_vs_reference(cpu_adam_module.adam_step, sizes, torch.float32, torch.float32, steps=3,
                            weight_decay=0.01, bias_correction=True, adamw_mode=True, seed=7)


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
    if isa not in _runnable_isa_levels():
        pytest.skip(f"this CPU cannot run {isa} code (torch reports {torch.backends.cpu.get_cpu_capability()})")
    from anyaccel.op_builder import CPUAdamBuilder

    monkeypatch.setenv("ANYACCEL_CPU_ISA", isa)
    module = CPUAdamBuilder().load()
    assert module.isa == isa
    for index, (param_dtype, state_dtype) in enumerate(STATE_COMBOS):
        for adamw_mode, weight_decay in ((True, 0.03), (False, 0.03), (True, 0.0)):
            run_kernel_vs_reference(module.adam_step, TAIL_SIZES, param_dtype, state_dtype, steps=3,
                                    weight_decay=weight_decay, bias_correction=True, adamw_mode=adamw_mode,
                                    seed=100 + index)


def test_isa_op_answers(cpu_adam_module: Any) -> None:
    assert cpu_adam_module.isa in ("avx512", "avx2", "neon", "portable")


# --------------------------------------------------------------------------------------------------------
# Optimizer behaviour
# --------------------------------------------------------------------------------------------------------


def _train(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], grads: list[list[torch.Tensor]]) -> None:
    for step_grads in grads:
        for p, g in zip(params, step_grads):
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

    for a, b in zip(straight, resumed):
        assert torch.equal(a, b)
    for a, b in zip(straight, resumed):
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

    def refuse(cls: type) -> None:
        raise Loaded

    monkeypatch.setattr(CPUAdam, "_kernel", classmethod(refuse))
    p = torch.nn.Parameter(torch.randn(3))
    opt = CPUAdam([p])
    opt.step()
    with pytest.raises(Loaded):
        p.grad = torch.randn(3)
        opt.step()


# --------------------------------------------------------------------------------------------------------
# Errors: the optimizer
# --------------------------------------------------------------------------------------------------------


def test_amsgrad_is_rejected() -> None:
    with pytest.raises(NotImplementedError, match=r"amsgrad.*torch\.optim\.AdamW"):
        CPUAdam([torch.nn.Parameter(torch.randn(3))], amsgrad=True)


@pytest.mark.parametrize("kwargs,name", [
    ({"lr": -1e-3}, "lr"), ({"betas": (1.0, 0.999)}, r"betas\[0\]"), ({"betas": (0.9, float("nan"))}, r"betas\[1\]"),
    ({"eps": 0.0}, "eps"), ({"weight_decay": -0.1}, "weight_decay"), ({"lr": float("inf")}, "lr")])
def test_bad_hyper_parameters_rejected(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError, match=f"{name}=.*invalid; accepted"):
        CPUAdam([torch.nn.Parameter(torch.randn(3))], **kwargs)


def test_bad_group_hyper_parameter_rejected_at_step() -> None:
    p = torch.nn.Parameter(torch.randn(3))
    opt = CPUAdam([p])
    opt.param_groups[0]["lr"] = -0.5
    p.grad = torch.randn(3)
    with pytest.raises(ValueError, match=r"lr=-0\.5"):
        opt.step()


def test_non_cpu_param_rejected() -> None:
    p = torch.nn.Parameter(torch.empty(8, device="meta"))
    p.grad = torch.empty(8, device="meta")
    opt = CPUAdam([p])
    with pytest.raises(RuntimeError, match=r"params'\]\[0\] is on device meta.*FusedAdam"):
        opt.step()


def test_sparse_grad_rejected() -> None:
    p = torch.nn.Parameter(torch.randn(10))
    p.grad = torch.randn(10).to_sparse()
    with pytest.raises(RuntimeError, match="sparse gradient.*SparseAdam"):
        CPUAdam([p]).step()


def test_non_contiguous_param_rejected() -> None:
    p = torch.nn.Parameter(torch.randn(6, 4).t())
    p.grad = torch.randn(6, 4).t()
    with pytest.raises(RuntimeError, match="not contiguous"):
        CPUAdam([p]).step()


def test_unsupported_param_dtype_rejected() -> None:
    p = torch.nn.Parameter(torch.randn(5, dtype=torch.float64))
    p.grad = torch.randn(5, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="dtype torch.float64; accepted"):
        CPUAdam([p]).step()


# --------------------------------------------------------------------------------------------------------
# Errors: the kernel validates every entry itself (P17)
# --------------------------------------------------------------------------------------------------------


def _kernel_args(n: int = 3, size: int = 10) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(12)
    return {
        "params": [torch.randn(size, generator=gen) for _ in range(n)],
        "grads": [torch.randn(size, generator=gen) for _ in range(n)],
        "exp_avgs": [torch.rand(size, generator=gen) for _ in range(n)],
        "exp_avg_sqs": [torch.rand(size, generator=gen) for _ in range(n)],
        "step": 1, "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0,
        "bias_correction": True, "adamw_mode": True,
    }


def _call(module: Any, args: dict[str, Any]) -> None:
    module.adam_step(args["params"], args["grads"], args["exp_avgs"], args["exp_avg_sqs"], args["step"],
                     args["lr"], args["beta1"], args["beta2"], args["eps"], args["weight_decay"],
                     args["bias_correction"], args["adamw_mode"])


def _mutate(args: dict[str, Any], key: str, index: int, value: Any) -> dict[str, Any]:
    if index < 0:
        args[key] = value
    else:
        args[key][index] = value
    return args


@pytest.mark.parametrize("key,index,value,pattern", [
    ("grads", 1, torch.randn(20)[::2], r"grads\[1\] is not contiguous"),
    ("params", 2, torch.randn(10, 2)[:, 0], r"params\[2\] is not contiguous"),
    ("grads", 0, torch.randn(10, dtype=torch.bfloat16),
     r"grads\[0\] has dtype BFloat16 but params\[0\] has dtype Float"),
    ("exp_avgs", 2, torch.randn(11), r"exp_avgs\[2\] has shape \[11\] but params\[2\] has shape \[10\]"),
    ("exp_avg_sqs", 1, torch.randn(2, 5), r"exp_avg_sqs\[1\] has shape \[2, 5\]"),
    ("exp_avg_sqs", 0, torch.rand(10, dtype=torch.float64),
     r"exp_avgs\[0\] has dtype Float but exp_avg_sqs\[0\] has dtype Double"),
    ("step", -1, 0, r"step=0 is invalid; accepted: step >= 1"),
    ("lr", -1, -1e-3, r"lr=-0\.001 is invalid; accepted"),
    ("beta1", -1, 1.0, r"beta1=1 is invalid; accepted: 0 <= beta1 < 1"),
    ("beta2", -1, float("nan"), r"beta2=nan is invalid"),
    ("eps", -1, 0.0, r"eps=0 is invalid; accepted: a finite eps > 0"),
    ("weight_decay", -1, -0.5, r"weight_decay=-0\.5 is invalid"),
])
def test_kernel_rejects_bad_input(cpu_adam_module: Any, key: str, index: int, value: Any, pattern: str) -> None:
    args = _mutate(_kernel_args(), key, index, value)
    before = [p.clone() for p in args["params"]]
    with pytest.raises(RuntimeError, match=pattern):
        _call(cpu_adam_module, args)
    # Validation happens before any update: nothing was written.
    for a, b in zip(args["params"], before):
        if a.is_contiguous() and a.shape == b.shape:
            assert torch.equal(a, b)


@pytest.mark.parametrize("key,index,value,pattern", [
    ("grads", 2, torch.randn(10).to_sparse(), r"grads\[2\] has layout Sparse.*sparse gradients are not supported"),
    ("grads", 0, torch.randn(10, device="meta"), r"grads\[0\] is on device meta.*CPU tensors only"),
    ("exp_avg_sqs", 1, torch.randn(10, device="meta"), r"exp_avg_sqs\[1\] is on device meta"),
])
def test_kernel_rejects_sparse_and_meta_entries(cpu_adam_module: Any, key: str, index: int, value: Any,
                                                pattern: str) -> None:
    """A sparse or meta entry reroutes the dispatcher (SparseCPU kernel, fake); both still validate."""
    args = _mutate(_kernel_args(), key, index, value)
    before = [p.clone() for p in args["params"]]
    with pytest.raises(RuntimeError, match=pattern):
        _call(cpu_adam_module, args)
    assert all(torch.equal(a, b) for a, b in zip(args["params"], before))


def test_kernel_rejects_all_meta_call(cpu_adam_module: Any) -> None:
    """All-meta tensors dispatch to the fake only; it must refuse rather than silently do nothing."""
    args = _kernel_args(n=2)
    for key in ("params", "grads", "exp_avgs", "exp_avg_sqs"):
        args[key] = [torch.empty(10, device="meta") for _ in range(2)]
    with pytest.raises(RuntimeError, match=r"params\[0\] is on device meta"):
        _call(cpu_adam_module, args)


def test_kernel_rejects_list_length_mismatch(cpu_adam_module: Any) -> None:
    args = _kernel_args()
    args["exp_avgs"] = args["exp_avgs"][:2]
    with pytest.raises(RuntimeError, match="got 3 params, 3 grads, 2 exp_avgs and 3 exp_avg_sqs"):
        _call(cpu_adam_module, args)


def test_kernel_rejects_unsupported_state_combo(cpu_adam_module: Any) -> None:
    args = _kernel_args(n=1)
    args["exp_avgs"] = [torch.rand(10).to(torch.bfloat16)]
    args["exp_avg_sqs"] = [torch.rand(10).to(torch.bfloat16)]
    pattern = r"params\[0\] has dtype Float with optimizer state of dtype BFloat16.*Accepted"
    with pytest.raises(RuntimeError, match=pattern):
        _call(cpu_adam_module, args)


def test_kernel_empty_tensors(cpu_adam_module: Any) -> None:
    # (Lists with no tensor at all cannot be dispatched by torch; CPUAdam never makes such a call.)
    args = _kernel_args(n=2, size=0)
    _call(cpu_adam_module, args)
    assert all(p.numel() == 0 for p in args["params"])


# --------------------------------------------------------------------------------------------------------
# torch.library contract (schema, fake, torch.compile tracing)
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("param_dtype,state_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.float32)])
def test_opcheck(cpu_adam_module: Any, param_dtype: torch.dtype, state_dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(13)
    sizes = [5, 40]
    args = (
        [torch.randn(s, generator=gen).to(param_dtype) for s in sizes],
        [torch.randn(s, generator=gen).to(param_dtype) for s in sizes],
        [torch.randn(s, generator=gen).to(state_dtype) for s in sizes],
        [torch.rand(s, generator=gen).to(state_dtype) for s in sizes],
        3, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, True,
    )
    torch.library.opcheck(cpu_adam_module.adam_step, args)
