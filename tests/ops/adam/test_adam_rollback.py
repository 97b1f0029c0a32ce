"""The CPU Adam rollback kernel (``adam_rollback_step``, ``csrc/adam/cpu_adam_kernel.cpp``).

References, in float64: the inverse of one Adam step written from the rules in ``csrc/adam/cpu_adam.cpp``
(which, for AdamW with bias correction, are DeepSpeed 0.19.8's ``adam_rollback``), applied to the state the
kernel's own step produced; and the state before the step. Tolerances are a few fp32 units in the last place
of the magnitudes that enter each result (the rollback subtracts the step's terms again, so its absolute
error follows the size of those terms, not of the result).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

F32 = torch.finfo(torch.float32).eps
SIZES = (0, 1, 7, 17, 33, 1029)
HYPER = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}


@pytest.fixture(scope="module")
def adam(_ops_cache_dir: str) -> Any:
    from anyaccel.op_builder.classes import builder_class

    return builder_class("adam", "cpu_adam")().load()


def _state(n: int, seed: int, dtype: torch.dtype = torch.float32, state_dtype: torch.dtype = torch.float32
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    p = torch.randn(n, generator=gen).to(dtype)
    g = torch.randn(n, generator=gen).to(dtype)
    m = (torch.randn(n, generator=gen) * 0.1).to(state_dtype)
    v = (torch.rand(n, generator=gen) * 0.01).to(state_dtype)
    return p, g, m, v


def reference_rollback(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step: int, lr: float,
                       beta1: float, beta2: float, eps: float, weight_decay: float, bias_correction: bool,
                       adamw_mode: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inverse of one Adam(W) step in float64 (unrounded ``(p, m, v)`` before the step)."""
    p, g, m, v = (t.to(torch.float64) for t in (p, g, m, v))
    bc1 = 1 - beta1**step if bias_correction else 1.0
    bc2 = 1 - beta2**step if bias_correction else 1.0
    update = lr / bc1 * m / (v.sqrt() / bc2**0.5 + eps)
    p = (p + update) / (1 - lr * weight_decay) if adamw_mode else p + update
    p = torch.where(torch.isfinite(p), p, torch.zeros_like(p))
    if not adamw_mode and weight_decay:
        g = g + weight_decay * p
    m = (m - (1 - beta1) * g) / beta1
    v = ((v - (1 - beta2) * g * g) / beta2).clamp_min(0)
    return p, m, v


def _step(adam: Any, p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step: int, wd: float,
          bias_correction: bool, adamw_mode: bool, rollback: bool = False, copies: list | None = None) -> None:
    fn = adam.adam_rollback_step if rollback else adam.adam_step
    fn([p], [g], [m], [v], copies or [], step, HYPER["lr"], HYPER["beta1"], HYPER["beta2"], HYPER["eps"], wd,
       bias_correction, adamw_mode)


def _assert_within(actual: torch.Tensor, expected: torch.Tensor, scale: torch.Tensor, ulps: float, what: str) -> None:
    err = (actual.to(torch.float64) - expected.to(torch.float64)).abs()
    bound = ulps * F32 * scale.to(torch.float64) + 1e-30
    worst = (err / bound).max().item() if err.numel() else 0.0
    assert worst <= 1.0, f"{what}: error {worst:.2f}x the bound of {ulps} fp32 ulps"


MODES = list(itertools.product((True, False), (True, False), (0.0, 0.01)))


@pytest.mark.parametrize("adamw_mode,bias_correction,wd", MODES)
@pytest.mark.parametrize("n", SIZES)
def test_step_then_rollback_restores_the_state_within_fp32_rounding(adam, n, adamw_mode, bias_correction, wd):
    for step in (1, 5):
        p, g, m, v = _state(n, seed=n + step)
        before = [t.clone() for t in (p, m, v)]
        _step(adam, p, g, m, v, step, wd, bias_correction, adamw_mode)
        after = [t.clone() for t in (p, m, v)]
        _step(adam, p, g, m, v, step, wd, bias_correction, adamw_mode, rollback=True)
        # the float64 inverse of the state the kernel wrote: the rollback's own rounding only
        ref_p, ref_m, ref_v = reference_rollback(*after[:1], g, *after[1:], step, **HYPER, weight_decay=wd,
                                                 bias_correction=bias_correction, adamw_mode=adamw_mode)
        g64 = g.double().abs() + wd * before[0].double().abs() * (not adamw_mode)
        m_scale = (after[1].double().abs() + (1 - HYPER["beta1"]) * g64) / HYPER["beta1"]
        v_scale = (after[2].double().abs() + (1 - HYPER["beta2"]) * g64 * g64) / HYPER["beta2"]
        update = (after[0].double() - before[0].double()).abs()
        p_scale = before[0].double().abs() + update
        _assert_within(p, ref_p, p_scale, 4, "p vs float64 inverse")
        _assert_within(m, ref_m, m_scale, 4, "m vs float64 inverse")
        _assert_within(v, ref_v, v_scale, 4, "v vs float64 inverse")
        # and the state before the step, through both roundings (step and rollback)
        _assert_within(p, before[0], p_scale, 8, "p restored")
        _assert_within(m, before[1], m_scale, 8, "m restored")
        _assert_within(v, before[2], v_scale, 8, "v restored")


def test_three_steps_then_three_rollbacks_return_to_the_start(adam):
    """DeepSpeed's sequence (``test_step_rollback_sequence``): each rollback undoes the latest step."""
    p, _, m, v = _state(1029, seed=3)
    start = [t.clone() for t in (p, m, v)]
    grads = [torch.randn(1029, generator=torch.Generator().manual_seed(10 + s)) for s in range(3)]
    for step, g in enumerate(grads, 1):
        _step(adam, p, g, m, v, step, 0.01, True, True)
    for step in (3, 2, 1):
        _step(adam, p, grads[step - 1], m, v, step, 0.01, True, True, rollback=True)
    g_max = max(g.abs().max().item() for g in grads)
    _assert_within(p, start[0], start[0].abs() + 3 * HYPER["lr"] * 10, 24, "p")
    _assert_within(m, start[1], torch.full_like(m, g_max), 24, "m")
    _assert_within(v, start[2], torch.full_like(v, g_max * g_max), 24, "v")


def test_l2_mode_is_inverted_with_the_restored_parameter(adam):
    """With L2 weight decay the step added ``weight_decay * p`` to the gradient; the rollback recomputes that
    term from the restored parameter (DeepSpeed's rollback assumes AdamW and would leave the moments off by
    ``(1 - beta) * weight_decay * p``)."""
    p, g, m, v = _state(257, seed=5)
    before_m = m.clone()
    _step(adam, p, g, m, v, 2, 0.1, True, False)
    _step(adam, p, g, m, v, 2, 0.1, True, False, rollback=True)
    deepspeed_error = (1 - HYPER["beta1"]) * 0.1 * p.abs() / HYPER["beta1"]
    assert ((m - before_m).abs() < 0.01 * deepspeed_error + 1e-6).all()


def test_non_finite_restored_parameters_become_zero_and_variances_never_go_negative(adam):
    p = torch.tensor([float("inf"), 1.0, 2.0, float("nan")] + [0.5] * 13)
    g = torch.ones(17)
    m = torch.full((17,), 0.1)
    v = torch.full((17,), (1 - HYPER["beta2"]) * 0.5)  # less than (1 - beta2) * g * g: the exact result is < 0
    _step(adam, p, g, m, v, 1, 0.0, True, True, rollback=True)
    assert p[0] == 0 and p[3] == 0 and torch.isfinite(p).all()  # DeepSpeed's guard
    assert (v == 0).all()


@pytest.mark.parametrize("param,state,copy", [
    (torch.bfloat16, torch.float32, None),
    (torch.float16, torch.float32, None),
    (torch.float32, torch.float32, torch.bfloat16),
])
def test_16_bit_storage_restores_within_its_rounding(adam, param, state, copy):
    p, g, m, v = _state(1029, seed=11, dtype=param, state_dtype=state)
    if copy is not None:
        g = g.to(torch.float32)
    before = p.clone()
    copies = [p.to(copy)] if copy is not None else []
    _step(adam, p, g, m, v, 3, 0.01, True, True, copies=copies)
    _step(adam, p, g, m, v, 3, 0.01, True, True, rollback=True, copies=copies)
    tol = torch.finfo(param).eps * 4
    assert ((p.double() - before.double()).abs() <= tol * before.double().abs() + 1e-5).all()
    if copies:
        assert torch.equal(copies[0], p.to(copy))


def test_rollback_checks_like_the_step(adam):
    p, g, m, v = _state(8, seed=1)
    with pytest.raises(RuntimeError, match=r"adam_rollback_step: beta1=0.0 is invalid; accepted: a finite 0 < beta1"):
        adam.adam_rollback_step([p], [g], [m], [v], [], 1, 1e-3, 0.0, 0.999, 1e-8, 0.0, True, True)
    with pytest.raises(RuntimeError, match=r"adam_rollback_step: step=0(\.0)? is invalid"):
        adam.adam_rollback_step([p], [g], [m], [v], [], 0, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    with pytest.raises(RuntimeError, match=r"grads\[0\] has shape"):
        adam.adam_rollback_step([p], [g[:4]], [m], [v], [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
