"""nll_loss / nll_loss_backward (aten's nll_loss_forward / nll_loss_backward with fp32 accumulation) against
float64 references on every (device, implementation) pair of anyaccel.testing.nn_impls: the three reductions,
class weights, ignore_index, 1-D log-probabilities, odd sizes, float32/float16/bfloat16.

Tolerances are FlagGems's (``tests/accuracy_utils.py``: ``RESOLUTION`` as rtol, ``atol = 1e-4 * reduce_dim``;
:mod:`anyaccel.testing.tolerances`): rtol 1.3e-6 (float32), 1e-3 (float16), 0.016 (bfloat16); the reference
(float64, from the same rounded inputs) is cast to the result's dtype; ``reduce_dim`` is the number of rows a
sum or mean adds, 1 for per-row losses and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from anyaccel.ops.nn.errors import OpInputError
from anyaccel.ops.nn.implementations import ops
from anyaccel.testing.nn_impls import DTYPES
from anyaccel.testing.tolerances import assert_close

REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", [0, 1, 2], ids=REDUCTIONS.get)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize(("rows", "classes"), [(1, 1), (7, 5), (13, 37), (3, 4099)], ids=str)
def test_nll_loss_matches_float64(device_impl: tuple[str, str], rows: int, classes: int, weighted: bool,
                                  reduction: int, dtype: torch.dtype) -> None:
    device, impl = device_impl
    ns = ops("cross_entropy", device, impl)
    logp = torch.randn(rows, classes, dtype=torch.float64).log_softmax(-1).to(device, dtype).requires_grad_()
    t = torch.randint(0, classes, (rows,))
    t[1::3] = -100  # ignored rows
    w = (torch.rand(classes, dtype=torch.float64) + 0.5).to(device, dtype) if weighted else None
    out, total = ns.nll_loss(logp, t.to(device), w, reduction, -100)
    g = torch.randn(out.shape, dtype=torch.float64).to(device, dtype)
    (dlogp,) = torch.autograd.grad(out, logp, g)
    lr = logp.detach().cpu().double().requires_grad_()
    ref = F.nll_loss(lr, t, None if w is None else w.cpu().double(), ignore_index=-100,
                     reduction=REDUCTIONS[reduction])
    (dref,) = torch.autograd.grad(ref, lr, g.cpu().double())
    assert out.dtype == dtype and out.shape == ref.shape and total.dtype == dtype and total.shape == ()
    summed = rows if reduction else 1
    assert_close(out, ref, summed, msg="loss")
    valid = t != -100
    want_total = (w.cpu().double()[t[valid]].sum() if w is not None else valid.sum().double()) if reduction \
        else torch.zeros((), dtype=torch.float64)
    assert_close(total, want_total, summed, msg="total_weight")
    assert_close(dlogp, dref, msg="dlogp")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nll_loss_one_dimensional_logp(device_impl: tuple[str, str], dtype: torch.dtype) -> None:
    device, impl = device_impl
    ns = ops("cross_entropy", device, impl)
    logp = torch.randn(11, dtype=torch.float64).log_softmax(-1).to(device, dtype)
    t = torch.tensor(4, device=device)
    out, total = ns.nll_loss(logp, t, None, 1, -100)
    assert_close(out, -logp.cpu().double()[4])
    assert float(total) == 1.0
    grad = ns.nll_loss_backward(torch.tensor(2.0, device=device, dtype=dtype), logp, t, None, 1, -100, total)
    want = torch.zeros(11, dtype=torch.float64)
    want[4] = -2.0
    assert grad.shape == logp.shape and grad.dtype == dtype
    assert_close(grad, want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_sixteen_bit_mean_accumulates_in_fp32(device_impl: tuple[str, str], dtype: torch.dtype) -> None:
    """A 16-bit mean of 20000 losses of 10 is 10: the sum (200000) exceeds float16's range, where aten's CPU
    kernel returns inf (tests/ops/override checks the mode fixes that); fp32 accumulation gives 10."""
    device, impl = device_impl
    ns = ops("cross_entropy", device, impl)
    logp = torch.full((20000, 3), -10.0, dtype=dtype, device=device)
    t = torch.ones(20000, dtype=torch.long, device=device)
    out, total = ns.nll_loss(logp, t, None, 1, -100)
    assert torch.isfinite(out)
    assert_close(total, torch.tensor(20000.0, dtype=torch.float64))  # 19968 in bfloat16
    assert_close(out, torch.tensor(10.0, dtype=torch.float64), 20000)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", [0, 1, 2], ids=REDUCTIONS.get)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_nll_loss_class_first_spatial(device_impl: tuple[str, str], layout: str, reduction: int,
                                      dtype: torch.dtype) -> None:
    """``[N, C, H, W]`` log-probabilities (aten's nll_loss2d), contiguous and with H and W swapped (strided)."""
    device, impl = device_impl
    ns = ops("cross_entropy", device, impl)
    logp = torch.randn(3, 7, 5, 4, dtype=torch.float64).log_softmax(1).to(device, dtype)
    t = torch.randint(0, 7, (3, 5, 4))
    t.view(-1)[::5] = -100
    if layout == "transposed":
        logp, t = logp.transpose(2, 3), t.transpose(1, 2)
    w = (torch.rand(7, dtype=torch.float64) + 0.5).to(device, dtype)
    logp.requires_grad_()
    out, _ = ns.nll_loss(logp, t.to(device), w, reduction, -100)
    g = torch.randn(out.shape, dtype=torch.float64).to(device, dtype)
    (dlogp,) = torch.autograd.grad(out, logp, g)
    # aten's own backward needs a contiguous input: the reference is computed on a contiguous copy
    lr = logp.detach().cpu().double().contiguous().requires_grad_()
    ref = F.nll_loss(lr, t.contiguous(), w.cpu().double(), ignore_index=-100, reduction=REDUCTIONS[reduction])
    (dref,) = torch.autograd.grad(ref, lr, g.cpu().double())
    assert out.shape == ref.shape and dlogp.shape == logp.shape
    assert_close(out, ref, t.numel() if reduction else 1, msg="loss")
    assert_close(dlogp, dref, msg="dlogp")


def test_nll_loss_argument_errors(device_impl: tuple[str, str]) -> None:
    device, impl = device_impl
    ns = ops("cross_entropy", device, impl)
    logp = torch.randn(4, 5, device=device)
    t = torch.zeros(4, dtype=torch.long, device=device)
    with pytest.raises(OpInputError, match="accepted: 0"):
        ns.nll_loss(logp, t, None, 3, -100)
    with pytest.raises(OpInputError, match="one weight per class"):
        ns.nll_loss(logp, t, torch.ones(4, device=device), 1, -100)
    with pytest.raises(OpInputError, match="int64 or int32"):
        ns.nll_loss(logp, t.float(), None, 1, -100)
    with pytest.raises(OpInputError, match="without the class dimension"):
        ns.nll_loss(logp[None], t, None, 1, -100)
    with pytest.raises(OpInputError, match=r"\[N, C, d...\] or \[C\]"):
        ns.nll_loss(logp[:, :0], t, None, 1, -100)
