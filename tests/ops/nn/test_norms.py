"""rms_norm, fused_add_rms_norm and layer_norm against float64 references (FlagGems's tolerances,
anyaccel.testing.tolerances), forward and gradients, on every (device, implementation) pair of
anyaccel.testing.nn_impls: one row, one column, prime sizes, rows of 2053 and 4099 elements (one row per
program in the rms_norm forward), a row wider than the register tile (the looped kernels), strided inputs.
"""

from __future__ import annotations

import pytest
import torch

import anyaccel.ops.nn as nn
from anyaccel.ops.nn.errors import OpInputError
from anyaccel.testing.nn_impls import DTYPES, round_like
from anyaccel.testing.tolerances import assert_close

SHAPES = [(1, 1), (1, 64), (7, 1), (13, 37), (3, 5, 64), (3, 2053), (2, 4099), (3, 4096), (2, 16411)]


def _rand(shape: tuple[int, ...], dtype: torch.dtype, device: str, grad: bool = True) -> torch.Tensor:
    return torch.randn(shape, dtype=torch.float64).to(device, dtype).requires_grad_(grad)


def _leaf64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().double().requires_grad_()


def _rms_ref(x: torch.Tensor, w: torch.Tensor | None, eps: float, round_to: tuple[torch.dtype, str] | None = None
             ) -> torch.Tensor:
    """float64 RMSNorm; ``round_to=(dtype, impl)``: round the normalised value to dtype before the weight as
    impl rounds (the "llama" casting; autograd passes the gradient through the rounding)."""
    y = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    if round_to is not None:
        y = y + (round_like(y, *round_to).double() - y).detach()
    return y * w if w is not None else y


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("casting", ["torch", "llama"])
def test_rms_norm_forward_and_grads(device_impl: tuple[str, str], shape: tuple[int, ...], dtype: torch.dtype,
                                    casting: str) -> None:
    device, impl = device_impl
    x, w = _rand(shape, dtype, device), _rand(shape[-1:], dtype, device)
    y = nn.rms_norm(x, w, 1e-6, casting=casting, impl=impl)
    g = torch.randn_like(y)
    y.backward(g)
    xr, wr = _leaf64(x), _leaf64(w)
    yr = _rms_ref(xr, wr, 1e-6, (dtype, impl) if casting == "llama" else None)
    yr.backward(g.detach().cpu().double())
    assert y.dtype == dtype and y.shape == x.shape
    assert_close(y, yr, msg="y")
    assert_close(x.grad, xr.grad, shape[-1], msg="dx")
    assert_close(w.grad, wr.grad, x.numel() // shape[-1], msg="dweight")


def test_rms_norm_without_weight_and_llama_promotion(device_impl: tuple[str, str]) -> None:
    device, impl = device_impl
    x = _rand((4, 33), torch.bfloat16, device)
    y = nn.rms_norm(x, None, impl=impl)
    y.sum().backward()
    xr = _leaf64(x)
    _rms_ref(xr, None, 1e-6).sum().backward()
    assert_close(y, _rms_ref(xr.detach(), None, 1e-6))
    assert_close(x.grad, xr.grad, 33)
    w32 = _rand((33,), torch.float32, device, grad=False)
    assert nn.rms_norm(x, w32, casting="llama", impl=impl).dtype == torch.float32  # as LlamaRMSNorm
    assert nn.rms_norm(x, w32, casting="torch", impl=impl).dtype == torch.bfloat16  # as F.rms_norm


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_strided_inputs(device_impl: tuple[str, str], dtype: torch.dtype) -> None:
    device, impl = device_impl
    base = _rand((6, 40, 2), dtype, device, grad=False)
    for x in (base[:, 3:36, 0], base.transpose(0, 1)[:, :, 1].t()):  # row stride and element stride != 1
        x = x.detach().requires_grad_()
        w = _rand((x.shape[-1],), dtype, device)
        y = nn.rms_norm(x, w, impl=impl)
        g = torch.randn_like(y)
        y.backward(g)
        xr, wr = _leaf64(x), _leaf64(w)
        _rms_ref(xr, wr, 1e-6).backward(g.detach().cpu().double())
        assert_close(y, _rms_ref(xr.detach(), wr.detach(), 1e-6))
        assert_close(x.grad, xr.grad, x.shape[-1])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (5, 37), (2, 3, 128)], ids=str)
def test_fused_add_rms_norm(device_impl: tuple[str, str], shape: tuple[int, ...], dtype: torch.dtype) -> None:
    device, impl = device_impl
    x, r, w = _rand(shape, dtype, device), _rand(shape, dtype, device), _rand(shape[-1:], dtype, device)
    y, h = nn.fused_add_rms_norm(x, r, w, 1e-5, impl=impl)
    gy, gh = torch.randn_like(y), torch.randn_like(h)
    torch.autograd.backward((y, h), (gy, gh))
    h_exact = round_like(x.detach().double() + r.detach().double(), dtype, impl)  # h is rounded to x's dtype
    torch.testing.assert_close(h.cpu(), h_exact, rtol=0, atol=0)
    hr, wr = _leaf64(h_exact), _leaf64(w)
    yr = _rms_ref(hr, wr, 1e-5)
    torch.autograd.backward((yr, hr), (gy.cpu().double(), gh.cpu().double()))
    assert_close(y, yr, msg="y")
    assert_close(x.grad, hr.grad, shape[-1], msg="dx")
    assert_close(r.grad, hr.grad, shape[-1], msg="dresidual")
    assert_close(w.grad, wr.grad, x.numel() // shape[-1], msg="dweight")


def _ln_ref(x: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None, eps: float) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, eps)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layer_norm_forward_and_grads(device_impl: tuple[str, str], shape: tuple[int, ...],
                                      dtype: torch.dtype) -> None:
    device, impl = device_impl
    x, w, b = _rand(shape, dtype, device), _rand(shape[-1:], dtype, device), _rand(shape[-1:], dtype, device)
    y = nn.layer_norm(x, shape[-1], w, b, 1e-5, impl=impl)
    g = torch.randn_like(y)
    y.backward(g)
    xr, wr, br = _leaf64(x), _leaf64(w), _leaf64(b)
    yr = _ln_ref(xr, wr, br, 1e-5)
    yr.backward(g.detach().cpu().double())
    rows = x.numel() // shape[-1]
    assert_close(y, yr, msg="y")
    if shape[-1] > 1:  # one column: the normalised value is 0/0-conditioned, torch's too
        assert_close(x.grad, xr.grad, shape[-1], msg="dx")
    assert_close(w.grad, wr.grad, rows, msg="dweight")
    assert_close(b.grad, br.grad, rows, msg="dbias")


def test_layer_norm_multi_dim_shape_and_no_affine(device_impl: tuple[str, str]) -> None:
    device, impl = device_impl
    x = _rand((3, 4, 5), torch.float32, device)
    w = _rand((4, 5), torch.float32, device)
    y = nn.layer_norm(x, (4, 5), w, None, impl=impl)
    y.sum().backward()
    xr, wr = _leaf64(x), _leaf64(w)
    yr = torch.nn.functional.layer_norm(xr, (4, 5), wr)
    yr.sum().backward()
    assert_close(y, yr)
    assert_close(w.grad, wr.grad, 3)
    assert_close(nn.layer_norm(x.detach(), 5, impl=impl), torch.nn.functional.layer_norm(xr.detach(), (5,)))


def test_bad_arguments_raise_typed_errors(device_impl: tuple[str, str]) -> None:
    device, impl = device_impl
    x = torch.randn(3, 8, device=device)
    with pytest.raises(OpInputError, match="weight has shape"):
        nn.rms_norm(x, torch.ones(7, device=device), impl=impl)
    with pytest.raises(OpInputError, match="casting='gemma'"):
        nn.rms_norm(x, None, casting="gemma", impl=impl)
    with pytest.raises(OpInputError, match="dtype float64"):
        nn.rms_norm(x.double(), impl=impl)
    with pytest.raises(OpInputError, match="eps"):
        nn.layer_norm(x, 8, eps=-1.0, impl=impl)
    with pytest.raises(OpInputError, match="normalized_shape"):
        nn.layer_norm(x, 7, impl=impl)


def _aten_calls(fn: object) -> list[str]:
    """The aten ops ``fn()`` runs (torch profiler, CPU events: the allocation and fill of a materialised
    gradient show as ``aten::zeros``)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()  # type: ignore[operator]
    return [e.name for e in prof.events() if e.name.startswith("aten::")]


def test_statistic_outputs_get_no_materialised_zero_gradients(device_impl: tuple[str, str]) -> None:
    """The backward of rms_norm, fused_add_rms_norm and layer_norm allocates no tensor of zeros for the
    gradients of rstd/mean (or an unused h): autograd materialises them unless told not to, one allocation
    and fill each per backward."""
    device, impl = device_impl
    x, r, w, b = (_rand((4, 40), torch.float32, device), _rand((4, 40), torch.float32, device),
                  _rand((40,), torch.float32, device), _rand((40,), torch.float32, device))
    for name, forward in (("rms_norm", lambda: nn.rms_norm(x, w, impl=impl)),
                          ("fused_add_rms_norm", lambda: nn.fused_add_rms_norm(x, r, w, impl=impl)[0]),
                          ("layer_norm", lambda: nn.layer_norm(x, 40, w, b, impl=impl))):
        y = forward()
        g = torch.randn_like(y)
        calls = _aten_calls(lambda y=y, g=g: torch.autograd.grad(y, (x, w), g))
        assert "aten::zeros" not in calls, (name, calls)


def test_fused_add_rms_norm_with_only_h_used(device_impl: tuple[str, str]) -> None:
    """y unused: h = x + residual passes its gradient to both inputs, the weight gets none."""
    device, impl = device_impl
    x, r, w = (_rand((3, 17), torch.float32, device), _rand((3, 17), torch.float32, device),
               _rand((17,), torch.float32, device))
    _y, h = nn.fused_add_rms_norm(x, r, w, impl=impl)
    g = torch.randn_like(h)
    dx, dr, dw = torch.autograd.grad(h, (x, r, w), g, allow_unused=True)
    assert torch.equal(dx, g) and torch.equal(dr, g) and dw is None


def test_only_the_statistics_used_gives_no_gradient(device_impl: tuple[str, str]) -> None:
    """rstd and mean are statistics for the backward: a loss on them alone sends no gradient to the inputs."""
    from anyaccel.ops.nn.implementations import ops

    device, impl = device_impl
    x, w, b = _rand((3, 17), torch.float32, device), _rand((17,), torch.float32, device), \
        _rand((17,), torch.float32, device)
    _y, rstd = ops("rms_norm", x.device.type, impl).rms_norm(x, w, 1e-6, "torch")
    assert torch.autograd.grad(rstd.sum(), (x, w), allow_unused=True) == (None, None)
    _y, mean, rstd = ops("layer_norm", x.device.type, impl).layer_norm(x, w, b, 1e-5)
    assert torch.autograd.grad((mean.sum(), rstd.sum()), (x, w, b), allow_unused=True) == (None, None, None)
