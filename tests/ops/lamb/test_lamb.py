"""The LAMB family (anyaccel/ops/lamb): every implementation against a float64 reference of DeepSpeed's math.

Reference (DeepSpeed ``csrc/lamb/fused_lamb_cuda_kernel.cu``; You et al., ICLR 2020), per tensor, float64:
g = grad / scale; Adam moments; u = m / (sqrt(v) + eps) + wd p (sqrt(v + eps) when eps_inside_sqrt);
coeff = clamp(||p|| / ||u||, min, max) (1 when a norm is 0); p -= lr sqrt(bc2) / bc1 * coeff * u.

Covered: the trust ratio and both clamps (cases built to hit the minimum, the maximum and neither), bias
correction on and off, weight decay, eps inside the square root, the gradient scale, a zero parameter (ratio
1), fp32 and bf16 parameters with fp32 or bf16 state, fp32 masters writing bf16 copies, odd sizes and empty
tensors, the reported coefficients; on the CPU kernel always and on CUDA (CUDA C++ and Triton) when a GPU
is present (marker ``gpu``). The FusedLamb front end's DeepSpeed clipping (``scale``, ``grad_norms``,
``max_grad_norm``) is checked against the same reference.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import pytest
import torch

from anyaccel.ops import dispatch
from anyaccel.ops.lamb.fused import CPULamb, FusedLamb

CUDA = torch.cuda.is_available()
IMPLS = [pytest.param(("cpu", "cpu"), id="cpu")] + [
    pytest.param(("cuda", "cuda"), id="cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="no GPU")]),
    pytest.param(("cuda", "triton"), id="triton", marks=[
        pytest.mark.gpu, pytest.mark.skipif(not CUDA or importlib.util.find_spec("triton") is None,
                                            reason="needs a GPU and triton")]),
]
SIZES = [1, 7, 4096, 4097, 0, 33_333]


def _reference(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, *, step: int, lr: float,
               b1: float, b2: float, eps: float, wd: float, scale: float, max_coeff: float, min_coeff: float,
               bias_correction: bool, eps_inside_sqrt: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    p, g, m, v = (t.double() for t in (p, g, m, v))
    g = g / scale
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    u = m / ((v + eps).sqrt() if eps_inside_sqrt else v.sqrt() + eps) + wd * p
    pn, un = p.norm().item(), u.norm().item()
    coeff = 1.0 if pn == 0 or un == 0 else min(max(pn / un, min_coeff), max_coeff)
    step_size = lr * math.sqrt(1 - b2**step) / (1 - b1**step) if bias_correction else lr
    return p - step_size * coeff * u, m, v, coeff


CASES = {
    "default": dict(lr=1e-2, b1=0.9, b2=0.999, eps=1e-6, wd=0.01, scale=1.0, max_coeff=10.0, min_coeff=0.01,
                    bias_correction=True, eps_inside_sqrt=False),
    "max clamp": dict(lr=1e-3, b1=0.9, b2=0.999, eps=1e-6, wd=0.0, scale=1.0, max_coeff=0.05, min_coeff=0.0,
                      bias_correction=True, eps_inside_sqrt=False),
    "min clamp": dict(lr=1e-3, b1=0.9, b2=0.999, eps=1e-6, wd=0.0, scale=1.0, max_coeff=1e6, min_coeff=50.0,
                      bias_correction=True, eps_inside_sqrt=False),
    "no bias correction, eps inside, scale": dict(lr=5e-3, b1=0.8, b2=0.99, eps=1e-4, wd=0.1, scale=128.0,
                                                  max_coeff=10.0, min_coeff=0.01, bias_correction=False,
                                                  eps_inside_sqrt=True),
}


def _tensors(device: str, pdtype: torch.dtype, sdtype: torch.dtype, seed: int, master: bool = False) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    p = [torch.randn(n, generator=gen) for n in SIZES]
    p[2] = torch.zeros(SIZES[2])  # ||p|| = 0: the ratio is 1
    g = [torch.randn(n, generator=gen) for n in SIZES]
    m = [torch.randn(n, generator=gen) * 0.1 for n in SIZES]
    v = [torch.rand(n, generator=gen) * 0.01 for n in SIZES]
    target = torch.float32 if master else pdtype
    out = {
        "params": [t.to(device, target) for t in p],
        "grads": [t.to(device, pdtype) for t in g],
        "exp_avgs": [t.to(device, sdtype) for t in m],
        "exp_avg_sqs": [t.to(device, sdtype) for t in v],
        "model_copies": [t.to(device, pdtype) for t in p] if master else [],
    }
    return out


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(("pdtype", "sdtype", "master"), [
    (torch.float32, torch.float32, False), (torch.bfloat16, torch.float32, False),
    (torch.bfloat16, torch.bfloat16, False), (torch.bfloat16, torch.float32, True)],
    ids=["fp32", "bf16-fp32state", "bf16-bf16state", "fp32master-bf16copy"])
def test_lamb_step_matches_the_float64_reference(impl: tuple[str, str], case: str, pdtype: torch.dtype,
                                                 sdtype: torch.dtype, master: bool) -> None:
    device, name = impl
    c = CASES[case]
    op = dispatch.load("lamb", device, name)
    t = _tensors(device, pdtype, sdtype, seed=len(case), master=master)
    inputs = {k: [x.clone() for x in v] for k, v in t.items()}
    coeffs = torch.empty(len(SIZES), dtype=torch.float32, device=device)
    step = 3
    op.lamb_step(t["params"], t["grads"], t["exp_avgs"], t["exp_avg_sqs"], t["model_copies"], coeffs, step, c["lr"],
                 c["b1"], c["b2"], c["eps"], c["wd"], c["scale"], c["max_coeff"], c["min_coeff"],
                 c["bias_correction"], c["eps_inside_sqrt"])
    low = pdtype != torch.float32 and not master or sdtype != torch.float32
    tol = 2e-2 if low else 1e-5
    hit = set()
    for i in range(len(SIZES)):
        ref_p, ref_m, ref_v, ref_c = _reference(inputs["params"][i], inputs["grads"][i], inputs["exp_avgs"][i],
                                                inputs["exp_avg_sqs"][i], step=step, **c)
        if SIZES[i] == 0:
            continue
        torch.testing.assert_close(t["params"][i].double().cpu(), ref_p.cpu(), rtol=tol, atol=tol)
        torch.testing.assert_close(t["exp_avgs"][i].double().cpu(), ref_m.cpu(), rtol=tol, atol=tol)
        torch.testing.assert_close(t["exp_avg_sqs"][i].double().cpu(), ref_v.cpu(), rtol=tol, atol=tol * 1e-2)
        assert coeffs[i].item() == pytest.approx(ref_c, rel=1e-3 if low else 1e-5), i
        if master:
            assert torch.equal(t["model_copies"][i], t["params"][i].to(pdtype))
        hit.add("max" if ref_c == c["max_coeff"] else "min" if ref_c == c["min_coeff"] else "free")
    expected = {"max clamp": "max", "min clamp": "min"}.get(case)
    if expected:
        assert expected in hit, f"the case was meant to hit the {expected} clamp; hit {hit}"


def _front_end_reference(ps: list[torch.Tensor], grads: list[torch.Tensor], steps: int, scale: float,
                         norm: float, max_grad_norm: float) -> list[torch.Tensor]:
    p = [x.double().clone() for x in ps]
    m = [torch.zeros_like(x) for x in p]
    v = [torch.zeros_like(x) for x in p]
    combined = scale
    if max_grad_norm > 0:
        clip = ((norm / scale) + 1e-6) / max_grad_norm
        if clip > 1:
            combined = clip * scale
    for step in range(1, steps + 1):
        for i in range(len(p)):
            p[i], m[i], v[i], _ = _reference(p[i], grads[i], m[i], v[i], step=step, lr=1e-2, b1=0.9, b2=0.999,
                                             eps=1e-8, wd=0.0, scale=combined, max_coeff=10.0, min_coeff=0.01,
                                             bias_correction=True, eps_inside_sqrt=False)
    return p


@pytest.mark.parametrize(("max_grad_norm", "norm"), [(0.0, 100.0), (1.0, 100.0), (1.0, 0.5)],
                         ids=["no clipping", "clipped", "under the limit"])
@pytest.mark.parametrize("cls", [CPULamb, FusedLamb])
def test_front_end_scale_and_deepspeed_clipping(cls: type, max_grad_norm: float, norm: float) -> None:
    gen = torch.Generator().manual_seed(5)
    ps = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in (10, 300)]
    start = [p.detach().clone() for p in ps]
    grads = [torch.randn(p.shape, generator=gen) for p in ps]
    opt = cls(ps, lr=1e-2, max_grad_norm=max_grad_norm)
    for _ in range(2):
        for p, g in zip(ps, grads, strict=True):
            p.grad = g.clone()
        opt.step(scale=4.0, grad_norms=[norm])
    expected = _front_end_reference(start, grads, 2, 4.0, norm, max_grad_norm)
    for p, e in zip(ps, expected, strict=True):
        torch.testing.assert_close(p.detach().double(), e, rtol=1e-5, atol=1e-6)
    assert len(opt.get_lamb_coeffs()) == 2


def test_front_end_refuses_legacy_lists_and_bad_scale() -> None:
    p = torch.nn.Parameter(torch.randn(4))
    p.grad = torch.randn(4)
    opt = FusedLamb([p])
    with pytest.raises(NotImplementedError, match="legacy grads= / output_params="):
        opt.step(grads=[p.grad])
    for bad in (0.0, float("inf"), -1.0, True):
        with pytest.raises(ValueError, match="scale="):
            opt.step(scale=bad)
    with pytest.raises(ValueError, match=r"grad_norms\[0\]=nan"):
        opt.step(grad_norms=[float("nan")])
    assert len(opt.state) == 0, "a refused step changes nothing"
