"""softmax/log_softmax, swiglu/silu and rope against float64 references (FlagGems's tolerances), forward
and gradients, on every (device, implementation) pair of anyaccel.testing.nn_impls."""

from __future__ import annotations

import pytest
import torch

import anyaccel.ops.nn as nn
from anyaccel.ops.nn.errors import OpInputError
from anyaccel.testing.nn_impls import DTYPES, HAS_CUDA
from anyaccel.testing.tolerances import assert_close


def _rand(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    return torch.randn(shape, dtype=torch.float64).to(device, dtype).requires_grad_()


def _leaf64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().double().requires_grad_()


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("shape", "dim"), [((1, 1), -1), ((1, 97), -1), ((31, 1), -1), ((4, 7, 53), -1),
                                            ((4, 7, 53), 1), ((3, 20011), -1), ((6, 5, 3), 0),
                                            ((2, 300, 67), 1)], ids=str)
def test_softmax_forward_and_grad(device_impl: tuple[str, str], shape: tuple[int, ...], dim: int,
                                  dtype: torch.dtype, log: bool) -> None:
    device, impl = device_impl
    x = _rand(shape, dtype, device)
    y = (nn.log_softmax if log else nn.softmax)(x, dim, impl=impl)
    g = torch.randn_like(y)
    y.backward(g)
    yr = (torch.log_softmax if log else torch.softmax)(x.detach().cpu().double(), dim)
    assert y.dtype == dtype and y.shape == x.shape and y.is_contiguous()
    assert_close(y, yr, msg="y")
    # the backward reads the saved output y (in x's dtype, as aten's): its reference is the formula on that
    # y in float64 (FlagGems tests aten::_softmax_backward_data the same way)
    y64, g64 = y.detach().cpu().double(), g.detach().cpu().double()
    if log:
        dx_ref = g64 - y64.exp() * g64.sum(dim, keepdim=True)
    else:
        dx_ref = y64 * (g64 - (g64 * y64).sum(dim, keepdim=True))
    assert_close(x.grad, dx_ref, shape[dim], msg="dx")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_strided_views_along_any_dim(device_impl: tuple[str, str], dtype: torch.dtype) -> None:
    """Views whose reduced dimension is not innermost: read in place (transposed, sliced) or copied once
    (a permutation interleaving the other dimensions); output contiguous, gradient of the view's shape."""
    device, impl = device_impl
    base = torch.randn(5, 12, 7, dtype=torch.float64).to(device, dtype)
    for view, dim in ((base.transpose(0, 2), 1), (base[:, ::3], 0), (base.permute(1, 0, 2), 2),
                      (base.permute(2, 0, 1), 1)):
        x = view.detach().requires_grad_()
        y = nn.softmax(x, dim, impl=impl)
        g = torch.randn_like(y)
        y.backward(g)
        assert y.is_contiguous() and x.grad is not None and x.grad.shape == x.shape
        assert_close(y, torch.softmax(x.detach().cpu().double(), dim))
        y64, g64 = y.detach().cpu().double(), g.cpu().double()
        assert_close(x.grad, y64 * (g64 - (g64 * y64).sum(dim, keepdim=True)), x.shape[dim])


def test_softmax_strided_and_dtype_argument(device_impl: tuple[str, str]) -> None:
    device, impl = device_impl
    x = torch.randn(40, 9, device=device).t()[:, 3:37]  # element stride 9, row stride 1
    assert_close(nn.softmax(x, -1, impl=impl), torch.softmax(x.cpu().double(), -1))
    xb = x.bfloat16()
    y = nn.softmax(xb, -1, dtype=torch.float32, impl=impl)
    assert y.dtype == torch.float32
    assert_close(y, torch.softmax(xb.cpu().double(), -1))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("sa", "sb"), [((1,), (1,)), ((7, 33), (7, 33)), ((4, 1, 6), (3, 6)), ((2, 3, 128), (128,))],
                         ids=str)
def test_swiglu_forward_and_grads_with_broadcasting(device_impl: tuple[str, str], sa: tuple[int, ...],
                                                    sb: tuple[int, ...], dtype: torch.dtype) -> None:
    device, impl = device_impl
    a, b = _rand(sa, dtype, device), _rand(sb, dtype, device)
    y = nn.swiglu(a, b, impl=impl)
    g = torch.randn_like(y)
    y.backward(g)
    ar, br = _leaf64(a), _leaf64(b)
    yr = torch.nn.functional.silu(ar) * br
    yr.backward(g.detach().cpu().double())
    assert y.shape == torch.broadcast_shapes(sa, sb) and y.dtype == dtype
    assert_close(y, yr, msg="y")
    assert_close(a.grad, ar.grad, yr.numel() // ar.numel(), msg="da")
    assert_close(b.grad, br.grad, yr.numel() // br.numel(), msg="db")


def test_swiglu_mixed_dtypes_and_strides(device_impl: tuple[str, str]) -> None:
    device, impl = device_impl
    a = torch.randn(16, 24, device=device).t()  # transposed
    b = torch.randn(24, 16, device=device, dtype=torch.bfloat16)
    y = nn.swiglu(a, b, impl=impl)
    assert y.dtype == torch.float32 and y.stride() == a.stride()  # layout of the first operand (TensorIterator)
    assert_close(y, torch.nn.functional.silu(a.cpu().double()) * b.cpu().double())


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bit patterns as integers, on the CPU (so -0.0 differs from 0.0 and NaN payloads count)."""
    return t.detach().cpu().view({2: torch.int16, 4: torch.int32}[t.element_size()])


def _assert_bit_identical(got: torch.Tensor, want: torch.Tensor, msg: str) -> None:
    assert (got.dtype, got.shape) == (want.dtype, want.shape), msg
    assert torch.equal(_bits(got), _bits(want)), msg


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("sg", "sa", "sb"), [((1,), (1,), (1,)), ((7, 33), (7, 33), (7, 33)),
                                              ((3, 1031), (3, 1031), (3, 1031)), ((4, 3, 6), (4, 1, 6), (3, 6)),
                                              ((2, 3, 129), (2, 3, 129), (129,))], ids=str)
def test_swiglu_backward_recompute_is_swiglu_backward_and_swiglu_bit_for_bit(
        device_impl: tuple[str, str], sg: tuple[int, ...], sa: tuple[int, ...], sb: tuple[int, ...],
        dtype: torch.dtype) -> None:
    """The fused backward's three results are the bits ``swiglu_backward`` and ``swiglu`` give (odd sizes,
    a size past one Triton block, broadcasting), through the eager fast path and the torch ops, and match the
    float64 formulas."""
    from anyaccel.ops import dispatch

    device, impl = device_impl
    g, a, b = (torch.randn(s, dtype=torch.float64).to(device, dtype) for s in (sg, sa, sb))
    ns = dispatch.load("swiglu", device, impl)
    results = []
    for path in (ns.eager, getattr(torch.ops, ns.namespace)):
        da, db, y = path.swiglu_backward_recompute(g, a, b)
        want_da, want_db = path.swiglu_backward(g, a, b)
        _assert_bit_identical(da, want_da, "da")
        _assert_bit_identical(db, want_db, "db")
        _assert_bit_identical(y, path.swiglu(a, b), "y")
        results.append((da, db, y))
    for got, want in zip(*results, strict=True):
        _assert_bit_identical(got, want, "eager fast path against the torch op")
    g64, a64, b64 = (t.cpu().double() for t in (g, a, b))
    s = torch.sigmoid(a64)
    assert_close(y, torch.nn.functional.silu(a64) * b64, msg="y")
    assert_close(da, (g64 * b64 * s * (1.0 + a64 * (1.0 - s))).expand(y.shape), msg="da")
    assert_close(db, (g64 * a64 * s).expand(y.shape), msg="db")


def test_swiglu_backward_recompute_mixed_dtypes_and_strides(device_impl: tuple[str, str]) -> None:
    """Transposed and sliced operands of three dtypes: the same bits as the two ops, in the dtypes of their
    outputs (da in a's dtype, db in b's, y in ``promote(a, b)``), laid out like the fake's outputs."""
    from anyaccel.ops import dispatch
    from anyaccel.ops.nn.families.swiglu import fakes

    device, impl = device_impl
    g = torch.randn(24, 16, device=device, dtype=torch.float16)
    a = torch.randn(16, 24, device=device).t()  # transposed float32
    b = torch.randn(24, 40, device=device, dtype=torch.bfloat16)[:, 3:19]  # rows with gaps
    ns = dispatch.load("swiglu", device, impl).eager
    da, db, y = ns.swiglu_backward_recompute(g, a, b)
    assert (da.dtype, db.dtype, y.dtype) == (torch.float32, torch.bfloat16, torch.float32)
    want_da, want_db = ns.swiglu_backward(g, a, b)
    for got, want, name in ((da, want_da, "da"), (db, want_db, "db"), (y, ns.swiglu(a, b), "y")):
        _assert_bit_identical(got, want, name)
    metas = fakes.swiglu_backward_recompute(*(t.to("meta") for t in (g, a, b)))
    assert [(t.shape, t.dtype, t.stride()) for t in metas] == [(t.shape, t.dtype, t.stride()) for t in (da, db, y)]


@pytest.mark.parametrize(("sg", "sa", "sb"), [((3, 5, 7), (3, 1, 7), (5, 7)), ((6, 9), (6, 9), (6, 9)),
                                              ((2, 4), (1,), (2, 4))], ids=str)
def test_swiglu_backward_recompute_fake_matches_the_implementation(device_impl: tuple[str, str],
                                                                   sg: tuple[int, ...], sa: tuple[int, ...],
                                                                   sb: tuple[int, ...]) -> None:
    """The spec's fake (on meta tensors), and the torch op on fake tensors, give each implementation's shapes,
    dtypes and strides: fp32 gradients for broadcast inputs, the promoted dtype for y. (The Triton op on fake
    CPU tensors would run the interpreter on them; its fake tensors are checked on the GPU.)"""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from anyaccel.ops import dispatch
    from anyaccel.ops.nn.families.swiglu import fakes

    device, impl = device_impl
    g, a, b = (torch.randn(sg, device=device), torch.randn(sa, device=device, dtype=torch.bfloat16),
               torch.randn(sb, device=device, dtype=torch.bfloat16))
    op = getattr(torch.ops, dispatch.load("swiglu", device, impl).namespace).swiglu_backward_recompute
    real = op(g, a, b)
    layouts = [[(t.shape, t.dtype, t.stride()) for t in fakes.swiglu_backward_recompute(
        *(t.to("meta") for t in (g, a, b)))]]
    if impl != "triton_interpreter":
        with FakeTensorMode() as mode:
            layouts.append([(t.shape, t.dtype, t.stride()) for t in op(*(mode.from_tensor(t) for t in (g, a, b)))])
    for layout in layouts:
        assert layout == [(t.shape, t.dtype, t.stride()) for t in real]
    shape = torch.broadcast_shapes(sg, sa, sb)
    assert real[2].dtype == torch.bfloat16 and all(t.shape == shape for t in real)
    assert real[0].dtype == (torch.bfloat16 if sa == shape else torch.float32)


def test_swiglu_backward_recompute_bad_inputs(device_impl: tuple[str, str]) -> None:
    from anyaccel.ops import dispatch

    device, impl = device_impl
    ns = dispatch.load("swiglu", device, impl).eager
    x = torch.randn(3, 4, device=device)
    with pytest.raises(OpInputError, match="swiglu_backward_recompute: b has dtype int64"):
        ns.swiglu_backward_recompute(x, x, torch.ones(3, 4, dtype=torch.int64, device=device))
    with pytest.raises(OpInputError, match="swiglu_backward_recompute: shapes .* do not broadcast"):
        ns.swiglu_backward_recompute(x, x, torch.randn(5, 4, device=device))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_silu_forward_and_grad(device_impl: tuple[str, str], dtype: torch.dtype) -> None:
    device, impl = device_impl
    x = _rand((5, 129), dtype, device)
    y = nn.silu(x, impl=impl)
    g = torch.randn_like(y)
    y.backward(g)
    xr = _leaf64(x)
    yr = torch.nn.functional.silu(xr)
    yr.backward(g.detach().cpu().double())
    assert_close(y, yr)
    assert_close(x.grad, xr.grad)


def _hf_tables(seq: int, dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = torch.arange(seq, dtype=torch.float64)[:, None] * inv[None]
    emb = torch.cat((freqs, freqs), -1)  # Hugging Face's [S, D] table
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("batch", "heads", "seq", "dim"), [(1, 1, 1, 2), (2, 3, 7, 64), (1, 5, 13, 128)], ids=str)
def test_rope_hf_layout_forward_and_grad(device_impl: tuple[str, str], batch: int, heads: int, seq: int, dim: int,
                                         dtype: torch.dtype) -> None:
    device, impl = device_impl
    # Hugging Face: q = proj(x).view(B, S, H, D).transpose(1, 2), cos/sin [B, S, D] unsqueezed at dim 1
    q = torch.randn(batch, seq, heads, dim, dtype=torch.float64).to(device, dtype).transpose(1, 2).requires_grad_()
    cos, sin = _hf_tables(seq, dim)
    cos_d, sin_d = (t.expand(batch, seq, dim).unsqueeze(1).to(device, dtype) for t in (cos, sin))
    y = nn.rope(q, cos_d, sin_d, impl=impl)
    g = torch.randn_like(y)
    y.backward(g)
    qr = _leaf64(q)
    c64, s64 = cos_d.cpu().double(), sin_d.cpu().double()  # the tables as the op sees them (rounded)
    yr = qr * c64 + _rotate_half(qr) * s64
    yr.backward(g.detach().cpu().double())
    assert y.shape == q.shape and y.stride() == q.stride()
    assert_close(y, yr, msg="y")
    assert_close(q.grad, qr.grad, msg="dq")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rope_interleaved_layout(device_impl: tuple[str, str], dtype: torch.dtype) -> None:
    device, impl = device_impl
    seq, dim = 11, 32
    x = _rand((3, seq, 4, dim), dtype, device)  # [B, S, H, D], tables broadcast over heads
    inv = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = torch.arange(seq, dtype=torch.float64)[:, None] * inv[None]
    cos, sin = freqs.cos()[:, None].to(device, dtype), freqs.sin()[:, None].to(device, dtype)  # [S, 1, D/2]
    y = nn.rope(x, cos, sin, interleaved=True, impl=impl)
    g = torch.randn_like(y)
    y.backward(g)
    xr = _leaf64(x)
    c, s = cos.cpu().double(), sin.cpu().double()
    x1, x2 = xr[..., 0::2], xr[..., 1::2]
    yr = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), -1).flatten(-2)
    yr.backward(g.detach().cpu().double())
    assert_close(y, yr, msg="y")
    assert_close(x.grad, xr.grad, msg="dx")
    full = torch.repeat_interleave(cos, 2, -1), torch.repeat_interleave(sin, 2, -1)  # a [.., D] table works too
    assert_close(nn.rope(x.detach(), *full, interleaved=True, impl=impl), yr.detach())


def test_rope_bad_tables(device_impl: tuple[str, str]) -> None:
    device, impl = device_impl
    x = torch.randn(2, 4, 8, device=device)
    with pytest.raises(OpInputError, match="accepted: \\[..., 4\\]"):
        nn.rope(x, torch.ones(4, 3, device=device), torch.ones(4, 3, device=device), impl=impl)
    with pytest.raises(OpInputError, match="even"):
        nn.rope(torch.randn(2, 7, device=device), torch.ones(3, device=device), torch.ones(3, device=device),
                impl=impl)
    # the broadcast rule (checked without torch.broadcast_shapes for concrete sizes): cos.shape[:-1] must
    # broadcast to x.shape[:-1] = [2, 4] without enlarging it
    with pytest.raises(OpInputError, match="does not broadcast"):
        nn.rope(x, torch.ones(3, 4, device=device), torch.ones(3, 4, device=device), impl=impl)
    with pytest.raises(OpInputError, match="to a larger shape"):
        nn.rope(x, torch.ones(5, 1, 4, 4, device=device), torch.ones(5, 1, 4, 4, device=device), impl=impl)
    with pytest.raises(OpInputError, match="to a larger shape"):
        nn.rope(x, torch.ones(2, 1, 1, 4, device=device), torch.ones(2, 1, 1, 4, device=device), impl=impl)
    for table in ((1, 4, 4), (2, 1, 4), (4, 4), (4,), (1, 4)):
        c, s = torch.randn(table, device=device), torch.randn(table, device=device)
        want = nn.rope(x, c.expand(2, 4, 4), s.expand(2, 4, 4), impl=impl)
        torch.testing.assert_close(nn.rope(x, c, s, impl=impl), want, rtol=0, atol=0)


def _hf_rope64(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """The float64 reference: Hugging Face's ``x * cos + rotate_half(x) * sin`` with [..., D] tables, or the
    interleaved rotation with [..., D/2] tables."""
    if not interleaved:
        return x * cos + _rotate_half(x) * sin
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).flatten(-2)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("interleaved", [False, True], ids=["half_split", "interleaved"])
@pytest.mark.parametrize(("batch", "heads", "kv_heads", "seq", "dim"),
                         [(1, 1, 1, 1, 2), (2, 4, 2, 7, 64), (1, 6, 1, 13, 34)], ids=str)
def test_rope_qk_matches_reference_with_grouped_query_heads(device_impl: tuple[str, str], batch: int, heads: int,
                                                            kv_heads: int, seq: int, dim: int, interleaved: bool,
                                                            dtype: torch.dtype) -> None:
    """q and k rotated in one call (Hugging Face's apply_rotary_pos_emb: transposed [B, H, S, D] views, fewer
    key heads), forward and both gradients against float64, layouts kept."""
    device, impl = device_impl
    q = torch.randn(batch, seq, heads, dim, dtype=torch.float64).to(device, dtype).transpose(1, 2).requires_grad_()
    k = _rand((batch, kv_heads, seq, dim), dtype, device)  # contiguous keys: each tensor keeps its own order
    cos, sin = _hf_tables(seq, dim)
    if interleaved:
        cos, sin = cos[:, : dim // 2], sin[:, : dim // 2]
    cos_d, sin_d = (t.expand(batch, seq, t.shape[-1]).unsqueeze(1).to(device, dtype) for t in (cos, sin))
    yq, yk = nn.rope_qk(q, k, cos_d, sin_d, interleaved=interleaved, impl=impl)
    gq, gk = torch.randn_like(yq), torch.randn_like(yk)
    torch.autograd.backward((yq, yk), (gq, gk))
    qr, kr = _leaf64(q), _leaf64(k)
    c64, s64 = cos_d.cpu().double(), sin_d.cpu().double()
    yqr, ykr = _hf_rope64(qr, c64, s64, interleaved), _hf_rope64(kr, c64, s64, interleaved)
    torch.autograd.backward((yqr, ykr), (gq.cpu().double(), gk.cpu().double()))
    assert yq.stride() == q.stride() and yk.stride() == k.stride()
    assert_close(yq, yqr, msg="q")
    assert_close(yk, ykr, msg="k")
    assert_close(q.grad, qr.grad, msg="dq")
    assert_close(k.grad, kr.grad, msg="dk")
    # the same values as two rope calls
    torch.testing.assert_close(yq, nn.rope(q, cos_d, sin_d, interleaved=interleaved, impl=impl), rtol=0, atol=0)
    torch.testing.assert_close(yk, nn.rope(k, cos_d, sin_d, interleaved=interleaved, impl=impl), rtol=0, atol=0)


def test_rope_more_than_four_dims(device_impl: tuple[str, str]) -> None:
    """Five dimensions, permuted (merged leading dimensions that do not collapse: the Triton kernel works on a
    copy), a table varying along two of them; rope and rope_qk against float64, layouts kept."""
    device, impl = device_impl
    x = torch.randn(2, 5, 3, 2, 8, dtype=torch.float64).to(device).permute(0, 2, 3, 1, 4).requires_grad_()
    k = torch.randn(2, 3, 1, 5, 8, dtype=torch.float64).to(device, torch.float32).requires_grad_()
    x32 = x.detach().float().requires_grad_()
    cos, sin = torch.randn(3, 1, 5, 4, dtype=torch.float64), torch.randn(3, 1, 5, 4, dtype=torch.float64)
    cd, sd = cos.to(device, torch.float32), sin.to(device, torch.float32)
    y = nn.rope(x32, cd, sd, interleaved=True, impl=impl)
    yq, yk = nn.rope_qk(x32, k, cd, sd, interleaved=True, impl=impl)
    g = torch.randn_like(y)
    y.backward(g)
    xr = _leaf64(x32)
    yr = _hf_rope64(xr, cos, sin, True)
    yr.backward(g.cpu().double())
    assert y.stride() == x32.stride()
    assert_close(y, yr, msg="y")
    assert_close(x32.grad, xr.grad, msg="dx")
    assert_close(yq, yr.detach(), msg="rope_qk q")
    assert_close(yk, _hf_rope64(k.detach().cpu().double(), cos, sin, True), msg="rope_qk k")


def test_rope_qk_mixed_layouts(device_impl: tuple[str, str]) -> None:
    """q with gaps (its output is dense, so strides differ), sin laid out unlike cos: still right (the
    Triton implementation then rotates each tensor in its own launch)."""
    device, impl = device_impl
    q = torch.randn(2, 3, 5, 12, device=device)[..., 2:10]  # a view with gaps between rows
    k = torch.randn(2, 1, 5, 8, device=device)
    cos = torch.randn(5, 4, device=device)
    sin = torch.randn(4, 5, device=device).t()  # column-major
    assert not q.is_contiguous() and not sin.is_contiguous()
    yq, yk = nn.rope_qk(q, k, cos, sin, impl=impl)
    assert yq.is_contiguous()
    c64, s64 = (torch.cat((t, t), -1).cpu().double() for t in (cos, sin))
    for y, x in ((yq, q), (yk, k)):
        assert_close(y, _hf_rope64(x.cpu().double(), c64, s64, False))
    yq2, yk2 = nn.rope_qk(q.contiguous(), k, cos, sin.contiguous(), impl=impl)  # the one-launch layouts
    torch.testing.assert_close(yq2, yq, rtol=0, atol=0)
    torch.testing.assert_close(yk2, yk, rtol=0, atol=0)


def test_rope_qk_fuses_dense_layouts_and_falls_back_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Triton rope_qk rotates Hugging Face's layouts in its one launch (never the per-tensor path), and
    takes the per-tensor path for an input with gaps or sin laid out unlike cos."""
    pytest.importorskip("triton")
    from anyaccel.ops.nn.families.rope import triton as rope_triton

    per_tensor = []
    original = rope_triton._rotate

    def counting(*args: object) -> torch.Tensor:
        per_tensor.append(1)
        return original(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(rope_triton, "_rotate", counting)
    dev = "cuda" if HAS_CUDA else "cpu"  # the CPU under Triton's interpreter (conftest)
    q = torch.randn(1, 7, 4, 8, device=dev).transpose(1, 2)
    k = torch.randn(1, 7, 2, 8, device=dev).transpose(1, 2)
    cos, sin = torch.randn(1, 1, 7, 4, device=dev), torch.randn(1, 1, 7, 4, device=dev)
    rope_triton._rotate_qk(q, k, cos, sin, False, False)
    assert per_tensor == []
    rope_triton._rotate_qk(torch.randn(1, 4, 7, 12, device=dev)[..., 2:10], k, cos, sin, False, False)
    assert len(per_tensor) == 2
    rope_triton._rotate_qk(q, k, cos, torch.randn(1, 1, 4, 7, device=dev).transpose(-1, -2), False, False)
    assert len(per_tensor) == 4


def test_rope_qk_one_output_used(device_impl: tuple[str, str]) -> None:
    """Only q's output reaches the loss: k gets no gradient (None), as with two separate rope calls, and q's
    gradient is rope's."""
    device, impl = device_impl
    q, k = _rand((2, 3, 5, 8), torch.float32, device), _rand((2, 1, 5, 8), torch.float32, device)
    cos, sin = torch.randn(5, 4, device=device), torch.randn(5, 4, device=device)
    g = torch.randn(2, 3, 5, 8, device=device)
    yq, _ = nn.rope_qk(q, k, cos, sin, impl=impl)
    yq.backward(g)
    assert k.grad is None
    q2 = q.detach().clone().requires_grad_()
    nn.rope(q2, cos, sin, impl=impl).backward(g)
    torch.testing.assert_close(q.grad, q2.grad, rtol=0, atol=0)


def test_rope_qk_errors_name_the_tensor(device_impl: tuple[str, str]) -> None:
    device, impl = device_impl
    q, cos = torch.randn(2, 4, 8, device=device), torch.ones(4, 4, device=device)
    with pytest.raises(OpInputError, match="rope_qk: k has shape \\[2, 4, 6\\] but q has"):
        nn.rope_qk(q, torch.randn(2, 4, 6, device=device), cos, cos, impl=impl)
    with pytest.raises(OpInputError, match="rope_qk: k has dtype int64"):
        nn.rope_qk(q, torch.ones(2, 4, 8, dtype=torch.int64, device=device), cos, cos, impl=impl)
    with pytest.raises(OpInputError, match="rope_qk: k is a meta tensor"):
        nn.rope_qk(q, torch.empty(2, 4, 8, device="meta"), cos, cos, impl=impl)


def test_rope_kernel_rows_run_in_memory_order() -> None:
    """The Triton rope walks rows in x's memory order: Hugging Face's transposed queries get their heads
    innermost (contiguous rows sharing one cos/sin row); contiguous x keeps its order; size-1 dims go first."""
    pytest.importorskip("triton")
    from anyaccel.ops.nn.families.rope.triton import _row_order

    hf_q = torch.empty(2, 7, 3, 8).transpose(1, 2)  # [B, H, S, D] over [B, S, H, D] memory
    assert _row_order(hf_q) == (0, 2, 1)
    assert _row_order(torch.empty(2, 3, 7, 8)) == (0, 1, 2)
    assert _row_order(torch.empty(1, 7, 3, 8).transpose(1, 2)) == (0, 2, 1)
    assert _row_order(torch.empty(5, 1, 3, 8).permute(1, 2, 0, 3)) == (0, 2, 1)
