"""The NPU implementation of ``adam_step`` (anyaccel/ops/adam/npu.py), without an NPU.

It runs on the CPU: torch's ``_foreach_*`` ops are the same calls torch_npu fuses, and a fake
``torch_npu.npu_apply_adam_w`` follows torch_npu's documented reference of Ascend's ApplyAdamW. Checked
against torch.optim.Adam/AdamW in float64 and a float64 reference of the masters-with-copies mode, and for
the op spec's validation (the same words as the other kernels).
"""

from __future__ import annotations

import pytest
import torch

from anyaccel.ops.adam import npu as npu_adam


def _params(dtype: torch.dtype, n: int = 3) -> list[torch.Tensor]:
    return [torch.randn(s, dtype=dtype) for s in (7, 33, 129)[:n]]


def _torch_adam(ps, steps, lr, betas, eps, wd, adamw):
    ref = [p.detach().double().clone().requires_grad_(False) for p in ps]
    opt_cls = torch.optim.AdamW if adamw else torch.optim.Adam
    params = [torch.nn.Parameter(r) for r in ref]
    opt = opt_cls(params, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    for step_grads in steps:
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.double()
        opt.step()
    return [p.detach() for p in params]


def _fake_apply_adam_w(calls: list):
    # the parameters of the schema of torch.ops.npu.npu_apply_adam_w.out (torch_npu 2.14.0): the outputs are
    # keyword-only var, m, v; tests/accelerator/test_device_api.py checks the call against the real schema
    def npu_apply_adam_w(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, eps, grad, max_grad_norm,
                         amsgrad, maximize, *, var, m, v):
        # torch_npu's documented reference of ApplyAdamW (its test_apply_adam_w cpu_op_exec).
        calls.append((beta1_power, beta2_power))
        b1p, b2p = beta1_power * beta1, beta2_power * beta2
        var.mul_(1 - lr * weight_decay)
        m.mul_(beta1).add_(grad, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = (v / (1 - b2p)).sqrt() + eps
        var.add_(-lr * m / (1 - b1p) / denom)
        return var, m, v

    return npu_apply_adam_w


@pytest.mark.parametrize("adamw", [True, False])
@pytest.mark.parametrize("kernel", ["foreach", "fake_ascend"])
def test_adam_step_matches_torch_optim(adamw: bool, kernel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list = []
    monkeypatch.setattr(npu_adam, "ascend_kernel", (lambda: _fake_apply_adam_w(calls)) if kernel == "fake_ascend"
                        else (lambda: None))
    lr, betas, eps, wd = 3e-3, (0.85, 0.99), 1e-7, 0.05
    ps = _params(torch.float32)
    steps = [[torch.randn_like(p) for p in ps] for _ in range(3)]
    expected = _torch_adam(ps, steps, lr, betas, eps, wd, adamw)
    ms, vs = [torch.zeros_like(p) for p in ps], [torch.zeros_like(p) for p in ps]
    for t, grads in enumerate(steps, start=1):
        npu_adam.adam_step(ps, grads, ms, vs, [], t, lr, betas[0], betas[1], eps, wd, True, adamw)
    for p, e in zip(ps, expected, strict=True):
        torch.testing.assert_close(p.double(), e, rtol=1e-5, atol=1e-6)
    if kernel == "fake_ascend":
        # the Ascend kernel multiplies the powers by beta once more: it is given beta**(step - 1)
        assert len(calls) == 3 * len(ps) and calls[len(ps)] == pytest.approx((betas[0], betas[1]))


def test_the_ascend_kernel_serves_only_params_whose_moments_share_their_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list = []
    monkeypatch.setattr(npu_adam, "ascend_kernel", lambda: _fake_apply_adam_w(calls))
    ps = [torch.randn(9), torch.randn(9).to(torch.bfloat16)]  # fp32 with fp32 moments; bf16 with fp32 moments
    gs = [torch.randn(9), torch.randn(9).to(torch.bfloat16)]
    ms, vs = [torch.zeros(9), torch.zeros(9)], [torch.zeros(9), torch.zeros(9)]
    ref = [p.double().clone() for p in ps]
    npu_adam.adam_step(ps, gs, ms, vs, [], 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, True, True)
    assert len(calls) == 1  # the bf16 parameter went through the foreach path
    for p, r, g in zip(ps, ref, gs, strict=True):
        # step 1 with bias correction: p - lr * g / (|g| + eps) in exact arithmetic
        expected = r - 1e-2 * g.double() / (g.double().abs() + 1e-8)
        torch.testing.assert_close(p.double(), expected.to(p.dtype).double(), rtol=2 * torch.finfo(p.dtype).eps,
                                   atol=1e-6)


def test_adam_step_16bit_params_fp32_state_master_copies_and_no_bias_correction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(npu_adam, "ascend_kernel", lambda: None)
    lr, b1, b2, eps, wd = 1e-2, 0.9, 0.999, 1e-8, 0.0
    master = _params(torch.float32)
    copies = [torch.full_like(p, float("nan"), dtype=torch.bfloat16) for p in master]
    grads = [torch.randn_like(p).to(torch.bfloat16) for p in master]
    ms, vs = [torch.rand_like(p) for p in master], [torch.rand_like(p) for p in master]
    ref_p = [p.double().clone() for p in master]
    ref_m = [m.double() * b1 + (1 - b1) * g.double() for m, g in zip(ms, grads, strict=True)]
    ref_v = [v.double() * b2 + (1 - b2) * g.double() ** 2 for v, g in zip(vs, grads, strict=True)]
    ref_p = [p - lr * m / (v.sqrt() + eps) for p, m, v in zip(ref_p, ref_m, ref_v, strict=True)]
    npu_adam.adam_step(master, grads, ms, vs, copies, 5, lr, b1, b2, eps, wd, False, True)
    for p, c, e in zip(master, copies, ref_p, strict=True):
        torch.testing.assert_close(p.double(), e, rtol=1e-5, atol=1e-6)
        assert torch.equal(c, p.to(torch.bfloat16))
    bf = [p.to(torch.bfloat16) for p in _params(torch.float32)]
    bf_ref = [p.float().clone() for p in bf]
    m32, v32 = [torch.zeros_like(p) for p in bf_ref], [torch.zeros_like(p) for p in bf_ref]
    g = [torch.randn_like(p) for p in bf]
    npu_adam.adam_step(bf, [x.to(torch.bfloat16) for x in g], m32, v32, [], 1, lr, b1, b2, eps, 0.1, True, True)
    npu_adam.adam_step(bf_ref, [x.to(torch.bfloat16).float() for x in g], [torch.zeros_like(p) for p in bf_ref],
                       [torch.zeros_like(p) for p in bf_ref], [], 1, lr, b1, b2, eps, 0.1, True, True)
    for p, e in zip(bf, bf_ref, strict=True):
        assert torch.equal(p, e.to(torch.bfloat16))  # one rounding, at the store


@pytest.mark.parametrize("call,pattern", [
    (lambda ps, z: npu_adam.adam_step(ps, z, z, z, [], 0, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True),
     r"^adam_step: step=0 is invalid; accepted: a finite step >= 1$"),
    (lambda ps, z: npu_adam.adam_step(ps, z, z, z, [], 1, 1e39, 0.9, 0.999, 1e-8, 0.0, True, True),
     r"^adam_step: lr=1e\+39 is invalid; accepted: a finite lr >= 0 representable in float32$"),
    (lambda ps, z: npu_adam.adam_step(ps, z[:1], z, z, [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True),
     r"^adam_step: got 2 params, 1 grads, 2 exp_avgs, 2 exp_avg_sqs and 0 model_copies; grads and every state list"),
    (lambda ps, z: npu_adam.adam_step(ps, z, [z[0], z[1].half()], z, [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True),
     r"^adam_step: the optimizer states of params\[1\] have different dtypes \(exp_avgs\[1\] float16, "
     r"exp_avg_sqs\[1\] float32\)"),
    (lambda ps, z: npu_adam.adam_step(ps, z, z, z, [t.half() for t in z], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True,
                                      True), None),  # valid: fp32 masters writing fp16 copies
    (lambda ps, z: npu_adam.adam_step([], [], [], [], [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True),
     r"^adam_step: params is empty; pass at least one tensor$"),
])
def test_npu_adam_checks_arguments_like_the_other_kernels(call, pattern, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(npu_adam, "ascend_kernel", lambda: None)
    ps = _params(torch.float32, 2)
    z = [torch.zeros_like(p) for p in ps]
    before = [p.clone() for p in ps]
    if pattern is None:
        # separate tensors per list: one tensor in two lists is refused as shared memory
        npu_adam.adam_step(ps, [t.clone() for t in z], [t.clone() for t in z], [t.clone() for t in z],
                           [t.half() for t in z], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
        return
    with pytest.raises(RuntimeError, match=pattern):
        call(ps, z)
    assert all(torch.equal(a, b) for a, b in zip(ps, before, strict=True)), "nothing is written before validation"


def test_without_torch_npu_no_ascend_kernel_and_no_import() -> None:
    import importlib.util
    import sys

    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch_npu is installed here")
    assert npu_adam.ascend_kernel() is None and "torch_npu" not in sys.modules
