"""The aten-override mode on a CUDA GPU with the Triton kernels: a layer-norm / SiLU / softmax / RMSNorm
training step through torch's own API routes to anyaccel and matches aten; leaving restores aten.
Marked ``gpu``; skipped without a CUDA device and Triton."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

import anyaccel.ops
from anyaccel.ops.override import mode
from anyaccel.ops.override.policy import Policy
from anyaccel.testing.tolerances import assert_close

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("triton") is None, reason="needs a CUDA GPU and triton")]


class CountingPolicy(Policy):
    """Policy "always" recording which ops went to anyaccel."""

    def __init__(self) -> None:
        super().__init__("always")
        self.ours: set[str] = set()

    def use_ours(self, k: str) -> bool:
        self.ours.add(k.split("|")[0])
        return True


def _step(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    h = F.layer_norm(x, x.shape[-1:], w, b)
    r = F.rms_norm(h, h.shape[-1:], w, 1e-6)
    p = torch.softmax(F.silu(r), -1)
    q = torch.log_softmax(r, -1)
    (p.float().square().sum() + q.float().mean()).backward()
    return [p.detach(), q.detach(), x.grad.clone(), w.grad.clone(), b.grad.clone()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_override_on_cuda_matches_aten(dtype: torch.dtype) -> None:
    x = torch.randn(64, 1000, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(1000, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.randn(1000, device="cuda", dtype=dtype, requires_grad=True)
    want = _step(x, w, b)
    for t in (x, w, b):
        t.grad = None
    pol = CountingPolicy()
    with anyaccel.ops.use_ops(policy=pol) as replaced:
        got = _step(x, w, b)
    assert {"_softmax", "_log_softmax", "native_layer_norm", "silu"} <= set(replaced)
    assert {"_softmax", "native_layer_norm", "native_layer_norm_backward", "silu", "silu_backward"} <= pol.ours
    for g, r in zip(got, want, strict=True):
        assert_close(g, r.double(), 1000)
    assert mode.replaced_ops() == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_any_dim_softmax_and_16_bit_cross_entropy_on_cuda(dtype: torch.dtype) -> None:
    """Softmax along a middle dimension of a transposed view and F.cross_entropy (log_softmax + nll_loss) go to
    anyaccel's Triton kernels on the GPU and match float64 references (FlagGems's tolerances)."""
    x = torch.randn(33, 65, 7, device="cuda", dtype=dtype).transpose(0, 2).requires_grad_()
    z = torch.randn(4099, 37, device="cuda", dtype=dtype).mul(3).requires_grad_()
    t = torch.randint(0, 37, (4099,), device="cuda")
    t[::5] = -100
    pol = CountingPolicy()
    with anyaccel.ops.use_ops(policy=pol):
        y = torch.softmax(x, 1)
        g = torch.randn_like(y)
        (dx,) = torch.autograd.grad(y, x, g)
        loss = F.cross_entropy(z, t)
        (dz,) = torch.autograd.grad(loss, z)
    assert {"_softmax", "_softmax_backward_data", "_log_softmax", "nll_loss_forward", "nll_loss_backward",
            "_log_softmax_backward_data"} <= pol.ours
    assert_close(y, torch.softmax(x.detach().double(), 1))
    yr = y.detach().double()
    gr = g.double()
    assert_close(dx, yr * (gr - (gr * yr).sum(1, keepdim=True)), x.shape[1])
    zr = z.detach().double().requires_grad_()
    ref = F.cross_entropy(zr, t)
    (dref,) = torch.autograd.grad(ref, zr)
    assert_close(loss, ref, 4099)
    assert_close(dz, dref, 37)
