"""cross_entropy and fused_linear_cross_entropy against float64 references (FlagGems's tolerances):
label smoothing, ignore_index, the three reductions, prime vocabularies and the 128k vocabulary
(Llama 3's 128256), forward and gradients, on every (device, implementation) pair of anyaccel.testing.nn_impls."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import anyaccel.ops.nn as nn
from anyaccel.ops.nn.errors import OpInputError, UnsupportedOpError
from anyaccel.ops.nn.families.cross_entropy import chunked
from anyaccel.testing.nn_impls import DTYPES, round_like
from anyaccel.testing.tolerances import ATOL, RTOL, assert_close

VOCAB_128K = 128256


def _leaf64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().double().requires_grad_()


def _targets(shape: tuple[int, ...], vocab: int, device: str) -> torch.Tensor:
    t = torch.randint(0, vocab, shape)
    t.view(-1)[:: 3] = -100  # every third row ignored
    return t.to(device)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize(("rows", "vocab"), [(1, 1), (5, 2), (7, 4099), (3, VOCAB_128K)], ids=str)
def test_cross_entropy(device_impl: tuple[str, str], rows: int, vocab: int, smoothing: float, reduction: str,
                       dtype: torch.dtype) -> None:
    device, impl = device_impl
    z = torch.randn(rows, vocab, dtype=torch.float64).mul(3).to(device, dtype).requires_grad_()
    t = _targets((rows,), vocab, device)
    if rows == 1:
        t.fill_(0)
    loss = nn.cross_entropy(z, t, label_smoothing=smoothing, reduction=reduction, impl=impl)
    g = torch.randn_like(loss)
    loss.backward(g)
    zr = _leaf64(z)
    ref = F.cross_entropy(zr, t.cpu(), label_smoothing=smoothing, reduction=reduction)
    ref.backward(g.detach().cpu().double())
    assert loss.dtype == dtype and loss.shape == ref.shape
    assert_close(loss, ref, msg="loss")
    assert_close(z.grad, zr.grad, msg="dlogits")


def test_cross_entropy_3d_logits_and_int32_targets(device_impl: tuple[str, str]) -> None:
    device, impl = device_impl
    z = torch.randn(2, 3, 50, device=device, requires_grad=True)
    t = torch.randint(0, 50, (2, 3), device=device, dtype=torch.int32)
    loss = nn.cross_entropy(z, t, impl=impl)
    loss.backward()
    zr = _leaf64(z)
    ref = F.cross_entropy(zr.view(-1, 50), t.cpu().long().view(-1))
    ref.backward()
    assert_close(loss, ref)
    assert_close(z.grad, zr.grad)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize(("rows", "hidden", "vocab", "bias"), [(1, 8, 3, False), (13, 16, 257, True),
                                                              (4, 16, VOCAB_128K, False)], ids=str)
@pytest.mark.parametrize("min_chunk", [1, chunked.MIN_CHUNK_ROWS], ids=lambda n: f"min_chunk={n}")
def test_fused_linear_cross_entropy(device_impl: tuple[str, str], rows: int, hidden: int, vocab: int, bias: bool,
                                    reduction: str, dtype: torch.dtype, min_chunk: int,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``min_chunk=1`` the rows are split into chunks of Liger's size (1 row for 13x16x257, several
    chunks accumulating the weight gradient); with the default minimum they fit one chunk."""
    monkeypatch.setattr(chunked, "MIN_CHUNK_ROWS", min_chunk)
    monkeypatch.setattr(chunked, "ONE_CHUNK_WHEN_NO_LARGER", min_chunk != 1)
    device, impl = device_impl
    h = (torch.randn(rows, hidden, dtype=torch.float64) / 2).to(device, dtype).requires_grad_()
    w = (torch.randn(vocab, hidden, dtype=torch.float64) / 2).to(device, dtype).requires_grad_()
    b = (torch.randn(vocab, dtype=torch.float64) / 2).to(device, dtype).requires_grad_() if bias else None
    t = _targets((rows,), vocab, device)
    if rows == 1:
        t.fill_(1)
    loss = nn.fused_linear_cross_entropy(h, w, t, b, label_smoothing=0.05, reduction=reduction, impl=impl)
    (loss * 0.37).backward()
    hr, wr = _leaf64(h), _leaf64(w)
    br = _leaf64(b) if b is not None else None
    # the reference rounds the logits to the input dtype, as nn.Linear in that dtype does
    zr = hr @ wr.t() + (br if br is not None else 0)
    zr = zr + (zr.to(dtype).double() - zr).detach()
    ref = F.cross_entropy(zr, t.cpu(), label_smoothing=0.05, reduction=reduction)
    (ref * 0.37).backward()
    assert loss.dtype == torch.float32 and loss.dim() == 0
    assert_close(loss, ref, msg="loss", dtype=dtype)
    assert_close(h.grad, hr.grad, vocab, msg="dhidden")
    assert_close(w.grad, wr.grad, rows, msg="dweight")
    if b is not None:
        assert_close(b.grad, br.grad, rows, msg="dbias")


@pytest.mark.parametrize(("rows", "hidden", "vocab", "accumulator", "itemsize", "want"), [
    (4096, 2048, 128256, True, 2, 4096),  # Llama 3.2 1B, seq 4096: logits 1 GiB <= the 1 GiB fp32 accumulator
    (4097, 2048, 128256, True, 2, 1024),  # one row more: chunked (power of two near rows * H / V, >= 1024)
    (4096, 2048, 128256, False, 2, 1024),  # no accumulator (bf16 accumulation or no gradient): chunked
    (4096, 2048, 128256, True, 4, 1024),  # fp32 logits take twice the memory: chunked
    (8192, 4096, 128256, True, 2, 8192),  # Llama 3 8B, seq 8192
    (0, 16, 257, True, 2, 1),
])
def test_chunk_rows_takes_one_chunk_only_where_it_needs_no_more_memory(rows: int, hidden: int, vocab: int,
                                                                      accumulator: bool, itemsize: int,
                                                                      want: int) -> None:
    """One chunk where the whole logits (``rows * V * itemsize`` bytes) fit in the fp32 accumulator's
    ``4 * V * H`` bytes that chunking would allocate; else the chunked rule."""
    assert chunked.chunk_rows(rows, hidden, vocab, fp32_accumulator=accumulator, itemsize=itemsize) == want


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("rows", "hidden", "vocab"), [(13, 16, 257), (37, 8, 1031)], ids=str)
def test_fused_linear_cross_entropy_accumulates_in_weight_dtype(device_impl: tuple[str, str], rows: int,
                                                                hidden: int, vocab: int, dtype: torch.dtype,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """``accum_dtype=weight.dtype`` with one chunk per row (the most roundings): the weight gradient is within
    the accumulation's error bound of the float64 reference. Each of the ``rows`` additions rounds its partial
    sum (at most ``eps/2`` of the sum of the terms' magnitudes ``S``), and ``dz`` itself is rounded to the
    dtype before the products, so ``|error| <= (rows + 1) * eps/2 * S`` plus the dtype's tolerance; the other
    gradients and the loss are those of the fp32 accumulation."""
    monkeypatch.setattr(chunked, "MIN_CHUNK_ROWS", 1)
    assert chunked.chunk_rows(rows, hidden, vocab) == 1
    device, impl = device_impl
    h = (torch.randn(rows, hidden, dtype=torch.float64) / 2).to(device, dtype).requires_grad_()
    w = (torch.randn(vocab, hidden, dtype=torch.float64) / 2).to(device, dtype).requires_grad_()
    t = _targets((rows,), vocab, device)
    loss = nn.fused_linear_cross_entropy(h, w, t, label_smoothing=0.05, accum_dtype=dtype, impl=impl)
    loss.backward()
    hr, wr = _leaf64(h), _leaf64(w)
    zr = hr @ wr.t()
    zr = zr + (zr.to(dtype).double() - zr).detach()
    zr.retain_grad()
    ref = F.cross_entropy(zr, t.cpu(), label_smoothing=0.05)
    ref.backward()
    assert_close(loss, ref, msg="loss", dtype=dtype)
    assert_close(h.grad, hr.grad, vocab, msg="dhidden")
    assert zr.grad is not None and w.grad is not None and wr.grad is not None
    magnitude = zr.grad.abs().t() @ hr.detach().abs()  # S per weight-gradient element
    eps = torch.finfo(dtype).eps
    bound = (rows + 1) * eps / 2 * magnitude + RTOL[dtype] * wr.grad.abs() + ATOL
    err = (w.grad.detach().cpu().double() - wr.grad).abs()
    assert bool((err <= bound).all()), f"dweight: largest error {err.max():.3g} over its bound"


def test_fused_linear_cross_entropy_accum_dtype_errors_and_second_backward(device_impl: tuple[str, str]) -> None:
    device, impl = device_impl
    h = torch.randn(6, 8, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(40, 8, device=device, dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, 40, (6,), device=device)
    with pytest.raises(OpInputError, match=r"accum_dtype=torch.float16 .* accepted: torch.float32"):
        nn.fused_linear_cross_entropy(h, w, t, accum_dtype=torch.float16, impl=impl)
    loss = nn.fused_linear_cross_entropy(h, w, t, impl=impl)
    loss.backward(retain_graph=True)
    first = w.grad.clone()
    with pytest.raises(UnsupportedOpError, match="backward ran a second time"):
        loss.backward()
    assert torch.equal(w.grad, first)


def test_fused_linear_cross_entropy_backward_materialises_no_zero_gradients(device_impl: tuple[str, str]) -> None:
    """The op's gradient outputs get no gradient; autograd must not hand the backward a zero tensor for each
    (a second weight-sized buffer at the backward's peak, measured at +0.98 GiB on an H200 at vocab 128k)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    device, impl = device_impl
    h = torch.randn(16, 8, device=device, requires_grad=True)
    w = torch.randn(300, 8, device=device, requires_grad=True)
    loss = nn.fused_linear_cross_entropy(h, w, torch.randint(0, 300, (16,), device=device), impl=impl)
    fills: list[str] = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if any(k in str(func) for k in ("zeros", "fill", "full")):
                fills.append(str(func))
            return func(*args, **(kwargs or {}))

    with Spy():
        loss.backward()
    assert not fills and w.grad is not None and h.grad is not None


def test_fused_linear_cross_entropy_no_grad_and_errors(device_impl: tuple[str, str]) -> None:
    device, impl = device_impl
    h, w = torch.randn(6, 8, device=device), torch.randn(40, 8, device=device)
    t = torch.randint(0, 40, (6,), device=device)
    with torch.no_grad():
        loss = nn.fused_linear_cross_entropy(h, w, t, impl=impl)
    assert_close(loss, F.cross_entropy(h.cpu().double() @ w.cpu().double().t(), t.cpu()))
    with pytest.raises(UnsupportedOpError, match="reduction='none'"):
        nn.fused_linear_cross_entropy(h, w, t, reduction="none", impl=impl)
    with pytest.raises(OpInputError, match="weight has shape"):
        nn.fused_linear_cross_entropy(h, w.t(), t, impl=impl)
    with pytest.raises(OpInputError, match="target has dtype"):
        nn.cross_entropy(h, t.float(), impl=impl)
    with pytest.raises(OpInputError, match="label_smoothing"):
        nn.cross_entropy(h, t, label_smoothing=1.5, impl=impl)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1,), (13, 257), (3, 5, 1031)], ids=str)
@pytest.mark.parametrize("g", [1 / 3, 0.37, 1 / 4095, 3.0], ids=lambda v: f"g={v:.4g}")
def test_eager_scale_helper_is_the_portable_scale_bit_for_bit(device_impl: tuple[str, str], shape: tuple[int, ...],
                                                             dtype: torch.dtype, g: float) -> None:
    """The fused loss's eager backward scales its saved gradients with the implementation's in-place helper
    where it has one (Triton: one element-wise pass); it must give what the portable `scaled` gives: the
    product in fp32, rounded once, never ``g`` rounded to the gradient's dtype first."""
    from anyaccel.ops import dispatch
    from anyaccel.ops.nn.families.cross_entropy.autograd import scaled

    device, impl = device_impl
    ns = dispatch.load("cross_entropy", device, impl).eager
    helper = getattr(ns, "scale_in_place", None)
    if helper is None:
        assert impl == "torch", f"the {impl} implementation lost its in-place scale"
        pytest.skip("the portable implementation has no helper: it uses scaled() itself")
    t = (torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 7).to(device, dtype)
    grad = torch.tensor(g, dtype=torch.float32, device=device)
    want = round_like(t.float() * grad, dtype, impl)  # the fp32 product, rounded once as the implementation does
    got = t.clone()
    assert helper(got, grad) is None
    assert torch.equal(got.cpu(), want)
    if impl != "triton_interpreter":  # the interpreter rounds bfloat16 by truncation (round_like)
        assert torch.equal(got, scaled(t, grad))
    if dtype == torch.bfloat16 and g == 1 / 3 and t.numel() > 1:  # the check can fail: g rounded first differs
        assert not torch.equal(round_like(t.float() * grad.to(dtype).float(), dtype, impl), want)


def test_eager_helper_names_must_not_be_spec_functions() -> None:
    """`define` refuses an eager helper named like one of the spec's functions (it would shadow the op on the
    eager path), before registering anything."""
    from anyaccel.ops.nn.define import define
    from anyaccel.ops.nn.families.cross_entropy.spec import SPEC
    from anyaccel.spec import SpecError

    with pytest.raises(SpecError, match="nll_loss"):
        define(SPEC, "anyaccel_test_helper_clash", {"nll_loss": lambda: None}, triton=False,
               eager_helpers={"nll_loss": lambda: None})
    assert not hasattr(torch.ops.anyaccel_test_helper_clash, "nll_loss")
