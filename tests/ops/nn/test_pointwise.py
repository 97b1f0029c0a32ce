"""The pointwise code generator (anyaccel.ops.triton.pointwise) against torch: broadcasting, strides,
Python scalars and type promotion, through Triton's interpreter on the CPU (or a GPU when present)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from anyaccel.testing.nn_impls import HAS_CUDA, HAS_TRITON, interpreter, round_like

pytestmark = pytest.mark.skipif(not (interpreter() or (HAS_CUDA and HAS_TRITON)),
                                reason="needs triton with TRITON_INTERPRET=1, or a CUDA GPU")
DEVICE = "cuda" if HAS_CUDA else "cpu"


triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")


@triton.jit
def _axpy(a, alpha, b):
    return a + alpha * b


@triton.jit
def _div(a, b):
    return a / b


@triton.jit
def _lt(a, b):
    return a < b


@triton.jit
def _sincos(x):
    return tl.sin(x), tl.cos(x)


@triton.jit
def _sum_prod_diff(a, b):
    return a + b, a * b, a - b


@pytest.fixture(scope="module")
def gen() -> Any:
    """Generated test ops: ``axpy(a, alpha, b) = a + alpha * b``, ``div(a, b)`` (int_to_float promotion),
    ``lt(a, b)`` (always_bool), ``sincos(x) -> (sin, cos)``."""
    from anyaccel.ops.triton.pointwise import Pointwise

    return SimpleNamespace(axpy=Pointwise(_axpy, 3), div=Pointwise(_div, 2, promotion="int_to_float"),
                           lt=Pointwise(_lt, 2, promotion="always_bool"),
                           sincos=Pointwise(_sincos, 1, num_outputs=2, promotion="int_to_float"))


def _check(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1.3e-6 if want.is_floating_point() else 0,
                               atol=1e-6 if want.is_floating_point() else 0)


@pytest.mark.parametrize(("sa", "sb"), [((), ()), ((5,), ()), ((1,), (7,)), ((3, 1, 4), (2, 1)),
                                        ((2, 3, 4, 5, 6), (4, 1, 6)), ((0, 3), (3,))], ids=str)
def test_broadcasting(gen: Any, sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = torch.randn(sa, device=DEVICE), torch.randn(sb, device=DEVICE)
    _check(gen.axpy(a, 0.5, b), a + 0.5 * b)


def test_strides(gen: Any) -> None:
    base = torch.randn(6, 8, 10, device=DEVICE)
    cases = [
        (base.transpose(0, 2), base.transpose(0, 2).contiguous()),  # permuted vs contiguous
        (base[:, ::2, 1:9], base[:, 1::2, :8]),  # sliced with steps
        (base[0].t(), torch.randn(8, device=DEVICE).expand(10, 8)),  # expanded (stride 0) operand
    ]
    for a, b in cases:
        _check(gen.axpy(a, -2.0, b), a + -2.0 * b)
    y = gen.axpy(base.transpose(0, 2), 1.0, base.transpose(0, 2))
    assert y.stride() == base.transpose(0, 2).stride()  # output in the first operand's layout


@pytest.mark.parametrize(("a", "alpha", "b"), [
    (torch.arange(6), 2, torch.arange(6)),                          # int64 throughout
    (torch.arange(6, dtype=torch.int32), 2.5, torch.arange(6)),     # a Python float makes it float32
    (torch.ones(4, dtype=torch.bfloat16), 3, torch.ones(4, dtype=torch.float16)),  # bf16 + fp16 -> fp32
    (torch.ones(4, dtype=torch.bfloat16), 0.25, torch.tensor(2.0)),  # a 0-dim fp32 tensor does not promote
    (torch.ones(4, dtype=torch.float16), True, torch.ones(4, dtype=torch.float16)),
    (torch.ones(3, dtype=torch.uint8), 1, torch.ones(3, dtype=torch.int8)),  # uint8 + int8 -> int16
], ids=["int", "int+float-scalar", "bf16+fp16", "bf16+0dim-fp32", "bool-scalar", "uint8+int8"])
def test_type_promotion_matches_torch(gen: Any, a: torch.Tensor, alpha: object, b: torch.Tensor) -> None:
    a, b = a.to(DEVICE), b.to(DEVICE)
    want = torch.add(a, torch.mul(b, alpha)) if not isinstance(alpha, bool) else a + b * alpha
    _check(gen.axpy(a, alpha, b), want)


def test_promotion_kinds(gen: Any) -> None:
    a, b = torch.arange(1, 7, device=DEVICE), torch.full((6,), 4, device=DEVICE)
    _check(gen.div(a, b), torch.div(a, b))  # int / int -> float32, as torch.div
    _check(gen.lt(a, 3.5), torch.lt(a, 3.5))  # comparisons -> bool
    s, c = gen.sincos(torch.arange(5, device=DEVICE))
    _check(s, torch.sin(torch.arange(5, device=DEVICE)))
    _check(c, torch.cos(torch.arange(5, device=DEVICE)))


def test_three_outputs_with_dtypes_per_output_broadcasting_and_out() -> None:
    """Three outputs (as SwiGLU's fused backward has): each in its requested dtype, broadcast shape, the same
    values on a repeated call (the cached plan) and into given ``out`` tensors of any strides."""
    from anyaccel.ops.triton.pointwise import Pointwise

    op = Pointwise(_sum_prod_diff, 2, num_outputs=3)
    a = torch.randn(3, 1, 33, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(5, 33, device=DEVICE, dtype=torch.bfloat16)
    af, bf = a.float(), b.float()
    wants = [af + bf, af * bf, af - bf]
    dtypes = (torch.float32, torch.bfloat16, torch.float16)
    for _ in range(2):
        outs = op(a, b, out_dtypes=dtypes)
        assert len(outs) == 3
        for got, want, dt in zip(outs, wants, dtypes, strict=True):
            _check(got, round_like(want, dt, "triton" if HAS_CUDA else "triton_interpreter"))
    given = [torch.empty(33, 5, 3, device=DEVICE, dtype=dt).permute(2, 1, 0) for dt in dtypes]
    assert op(a, b, out=given) == tuple(given)
    for got, want in zip(given, outs, strict=True):
        assert torch.equal(got, want)


def test_out_and_errors(gen: Any) -> None:
    from anyaccel.ops.triton.pointwise import PointwiseError

    a = torch.randn(4, 5, device=DEVICE)
    out = torch.empty(5, 4, device=DEVICE).t()
    gen.axpy(a, 1.0, a, out=[out])
    _check(out, 2 * a)
    with pytest.raises(PointwiseError, match="operands"):
        gen.axpy(a, 1.0)
    with pytest.raises(PointwiseError, match="no tensor"):
        gen.axpy(1.0, 2.0, 3.0)
    with pytest.raises(PointwiseError, match="out must be"):
        gen.axpy(a, 1.0, a, out=[torch.empty(3, device=DEVICE)])


def test_generated_source_is_readable() -> None:
    from anyaccel.ops.triton.pointwise import generate_source

    src = generate_source("f", (True, False), 2, 1)
    assert "def f_kernel(in0, in1, out0, n, size0, size1, in0_s0, in0_s1, out0_s0, out0_s1," in src
    assert "v1 = (in1 + tl.zeros([BLOCK], COMPUTE)).to(COMPUTE)" in src


def test_repeated_eager_calls_reuse_their_plan_and_match_a_fresh_op() -> None:
    """The second call with the same operand metadata takes the cached plan (no re-validation, promotion or
    planning); its results, dtypes and layouts equal those of an op that plans every call afresh, across
    scalar values, a transposed operand, broadcasting, int operands and requested output dtypes."""
    from anyaccel.ops.triton.pointwise import Pointwise

    cached, fresh_op = Pointwise(_axpy, 3), Pointwise(_axpy, 3)
    a = torch.randn(7, 33, device=DEVICE)
    b = torch.randn(7, 33, device=DEVICE)
    cases: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((a, 2.0, b), {}), ((a, -3.5, b), {}),  # one entry: a scalar's value is a kernel argument
        ((a.t(), 1.0, b.t()), {}),  # transposed: the output follows the first operand's layout
        ((a[:, :1], 0.5, b), {}),  # broadcast: contiguous output
        ((a.to(torch.bfloat16), 2, b.to(torch.bfloat16)), {}),
        ((torch.arange(12, device=DEVICE).view(3, 4), 3, torch.ones(3, 4, dtype=torch.int64, device=DEVICE)), {}),
        ((a, 2.0, b), {"out_dtypes": (torch.float64,)}),
    ]
    for args, kwargs in cases:
        for _ in range(2):
            got = cached(*args, **kwargs)
            fresh_op._calls.clear()
            want = fresh_op(*args, **kwargs)
            assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
            assert torch.equal(got, want)
    assert len(cached._calls) == len(cases) - 1
    _check(cached(a, -3.5, b), a + -3.5 * b)


def test_no_plan_is_cached_under_a_dispatch_mode_or_for_out() -> None:
    """Under a torch dispatch mode (fake tensors, functionalisation and opcheck are such modes: here a
    pass-through one, so the kernel still runs) and for ``out=`` calls, the full path runs and the cache is
    left alone."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from anyaccel.ops.triton.pointwise import Pointwise

    class PassThrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    op = Pointwise(_axpy, 3)
    a = torch.randn(4, 5, device=DEVICE)
    with PassThrough():
        got = op(a, 1.0, a)
    assert not op._calls
    _check(got, 2 * a)
    out = torch.empty_like(a)
    op(a, 1.0, a, out=[out])
    assert not op._calls
    _check(out, 2 * a)
