"""``swiglu_linear``: ``linear(swiglu(a, b), w, bias)`` keeping ``a`` and ``b``, not their product.

Compared with the float64 unfused reference (outputs and every gradient), eager and under
``torch.compile(fullgraph=True)``, and checked to save no tensor of the product's size for the backward.
The training backward (input and weight gradients) recomputes the product in the input gradients' pass
(``swiglu_backward_recompute``); its gradients are checked bit for bit against the two-op path it replaced.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from anyaccel.ops import dispatch
from anyaccel.ops.nn import functional as F
from anyaccel.ops.nn.errors import OpInputError
from anyaccel.testing.nn_impls import impl_params

TOL = {torch.float32: (2e-5, 1e-4), torch.bfloat16: (3e-2, 3e-2), torch.float16: (5e-3, 5e-3)}


def _inputs(device: str, dtype: torch.dtype, lead: tuple[int, ...], i: int, o: int, bias: bool
            ) -> list[torch.Tensor | None]:
    g = torch.Generator().manual_seed(0)
    ts: list[torch.Tensor | None] = [torch.randn(*lead, i, generator=g), torch.randn(*lead, i, generator=g),
                                     torch.randn(o, i, generator=g) / i ** 0.5,
                                     torch.randn(o, generator=g) if bias else None]
    return [None if t is None else t.to(device, dtype).requires_grad_() for t in ts]


def _reference(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.nn.functional.linear(torch.nn.functional.silu(a) * b, w, bias)


@pytest.mark.parametrize("device_impl", impl_params())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("lead", "i", "o", "bias"), [((3, 5), 7, 9, False), ((13,), 33, 17, True)])
def test_matches_the_unfused_float64_reference(device_impl: tuple[str, str], dtype: torch.dtype,
                                               lead: tuple[int, ...], i: int, o: int, bias: bool) -> None:
    device, impl = device_impl
    xs = _inputs(device, dtype, lead, i, o, bias)
    y = F.swiglu_linear(*xs, impl=impl)  # type: ignore[misc]
    refs = [None if t is None else t.detach().double().cpu().requires_grad_() for t in xs]
    want = _reference(*refs)  # type: ignore[arg-type]
    gy = torch.randn(want.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    rtol, atol = TOL[dtype]
    assert y.dtype == dtype and y.shape == want.shape
    torch.testing.assert_close(y.detach().cpu().double(), want.detach(), rtol=rtol, atol=atol)
    live = [t for t in xs if t is not None]
    grads = torch.autograd.grad(y, live, gy.to(device, dtype))
    want_grads = torch.autograd.grad(want, [t for t in refs if t is not None], gy)
    for got, ref in zip(grads, want_grads, strict=True):
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu().double(), ref, rtol=rtol, atol=atol * 4)


def test_keeps_a_and_b_but_not_their_product() -> None:
    a, b, w, _ = _inputs("cpu", torch.float32, (64,), 128, 8, False)
    saved: list[tuple[int, ...]] = []

    def pack(t: torch.Tensor) -> Any:
        saved.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        F.swiglu_linear(a, b, w, impl="torch").sum().backward()  # type: ignore[arg-type]
    # a, b and the weight; the unfused pair would also keep silu(a) * b for the weight gradient
    assert sorted(saved) == sorted([(64, 128), (64, 128), (8, 128)])
    assert a.grad is not None and b.grad is not None and w.grad is not None  # type: ignore[union-attr]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_keeps_a_and_b_but_not_their_product(dtype: torch.dtype) -> None:
    """Traced, the backward's recomputation of the product is the forward's expression again, and the joint
    graph's common-subexpression elimination would merge them and keep the product (a third more MLP
    activation memory in a compiled Llama): the compiled form checkpoints it."""
    a, b, w, _ = _inputs("cpu", dtype, (40,), 88, 8, False)
    saved: list[tuple[int, ...]] = []

    def pack(t: torch.Tensor) -> Any:
        saved.append(tuple(t.shape))
        return t

    torch.compiler.reset()
    fn = torch.compile(lambda a, b, w: F.swiglu_linear(a, b, w, mode="compile"), fullgraph=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = fn(a, b, w)
    y.sum().backward()
    torch.compiler.reset()
    assert sorted(s for s in saved if s == (40, 88)) == [(40, 88), (40, 88)], saved
    assert a.grad is not None and b.grad is not None and w.grad is not None  # type: ignore[union-attr]


def test_frozen_weight_and_frozen_inputs() -> None:
    a, b, w, bias = _inputs("cpu", torch.float32, (4,), 6, 5, True)
    w.requires_grad_(False)  # type: ignore[union-attr]
    F.swiglu_linear(a, b, w, bias, impl="torch").sum().backward()  # type: ignore[arg-type]
    assert w.grad is None and a.grad is not None and bias.grad is not None  # type: ignore[union-attr]
    a2, b2, w2, _ = (t.detach().requires_grad_(False) if t is not None else None for t in _inputs(
        "cpu", torch.float32, (4,), 6, 5, False))
    w2.requires_grad_()  # type: ignore[union-attr]
    F.swiglu_linear(a2, b2, w2, impl="torch").sum().backward()  # type: ignore[arg-type]
    assert w2.grad is not None  # type: ignore[union-attr]


def test_compiled_equals_eager() -> None:
    a, b, w, bias = _inputs("cpu", torch.float32, (5, 3), 11, 7, True)
    live = [a, b, w, bias]

    def run(fn: Any) -> list[torch.Tensor]:
        for t in live:
            t.grad = None  # type: ignore[union-attr]
        y = fn(a, b, w, bias)
        (y * torch.arange(y.numel()).reshape(y.shape)).sum().backward()
        return [y.detach(), *(t.grad for t in live)]  # type: ignore[union-attr, misc]

    eager = run(lambda *xs: F.swiglu_linear(*xs, impl="torch"))
    compiled = run(torch.compile(lambda *xs: F.swiglu_linear(*xs, impl="torch"), fullgraph=True, backend="eager"))
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def _two_op_backward(impl_ns: Any, gy: torch.Tensor, a: torch.Tensor, b: torch.Tensor, w: torch.Tensor,
                     bias: bool) -> list[torch.Tensor]:
    """The gradients as the backward computed them before ``swiglu_backward_recompute``: ``swiglu_backward``
    for a and b, then ``swiglu`` again for the weight gradient."""
    grad_c = gy.matmul(w)
    da, db = impl_ns.swiglu_backward(grad_c, a, b)
    c = impl_ns.swiglu(a, b)
    gy2 = gy.reshape(-1, gy.shape[-1])
    grads = [da, db, gy2.t().matmul(c.reshape(-1, c.shape[-1])).to(w.dtype)]
    return [*grads, gy2.sum(0)] if bias else grads


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().view({2: torch.int16, 4: torch.int32}[t.element_size()])


@pytest.mark.parametrize("device_impl", impl_params())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("lead", "i", "o", "bias"), [((3, 5), 7, 9, False), ((13,), 1031, 17, True)])
def test_training_gradients_are_the_two_op_paths_bit_for_bit(device_impl: tuple[str, str], dtype: torch.dtype,
                                                             lead: tuple[int, ...], i: int, o: int,
                                                             bias: bool) -> None:
    device, impl = device_impl
    xs = _inputs(device, dtype, lead, i, o, bias)
    live = [t for t in xs if t is not None]
    y = F.swiglu_linear(*xs, impl=impl)  # type: ignore[misc]
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(device, dtype)
    got = torch.autograd.grad(y, live, gy)
    a, b, w = (t.detach() for t in live[:3])  # type: ignore[union-attr]
    want = _two_op_backward(dispatch.load("swiglu", device, impl).eager, gy, a, b, w, bias)
    for k, (g, ref) in enumerate(zip(got, want, strict=True)):
        assert (g.dtype, g.shape) == (ref.dtype, ref.shape)
        assert torch.equal(_bits(g), _bits(ref)), f"gradient {k}"


def test_compiled_training_gradients_are_the_two_op_paths() -> None:
    """Under torch.compile (aot_eager: AOTAutograd traces the backward, so the torch op is called) the
    gradients are the eager two-op path's, bit for bit."""
    a, b, w, bias = _inputs("cpu", torch.float32, (5, 3), 11, 7, True)
    live = [a, b, w, bias]
    torch.compiler.reset()
    fn = torch.compile(lambda *xs: F.swiglu_linear(*xs, impl="torch"), fullgraph=True, backend="aot_eager")
    y = fn(*live)
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    got = torch.autograd.grad(y, live, gy)  # type: ignore[arg-type]
    want = _two_op_backward(dispatch.load("swiglu", "cpu", "torch").eager, gy, a.detach(), b.detach(),  # type: ignore[union-attr]
                            w.detach(), True)  # type: ignore[union-attr]
    for k, (g, ref) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(_bits(g), _bits(ref)), f"gradient {k}"


@pytest.mark.parametrize(("grads", "ops"), [
    ((True, True, True), ["swiglu_backward_recompute"]),  # training: one element-wise pass
    ((True, True, False), ["swiglu_backward"]),  # frozen weight: no product needed
    ((False, False, True), ["swiglu"]),  # frozen inputs: the product alone
])
def test_backward_calls_one_swiglu_op_per_case(grads: tuple[bool, bool, bool], ops: list[str]) -> None:
    """Which SwiGLU ops the backward runs, seen by a dispatch mode (under which the front ends call the torch
    ops): the fused one when both the input and the weight gradients are needed."""
    from torch.utils._python_dispatch import TorchDispatchMode

    namespace = dispatch.load("swiglu", "cpu", "torch").namespace
    calls: list[str] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func.namespace == namespace:
                calls.append(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    a, b, w, _ = (t.detach() if t is not None else None for t in _inputs("cpu", torch.float32, (6,), 10, 4, False))
    for t, need in zip((a, b, w), grads, strict=True):
        t.requires_grad_(need)  # type: ignore[union-attr]
    with Record():
        y = F.swiglu_linear(a, b, w, impl="torch")  # type: ignore[arg-type]
        assert calls == ["swiglu"]
        calls.clear()
        y.sum().backward()
    assert calls == ops


def test_eager_forward_calls_the_product_without_an_inner_autograd_function(monkeypatch: pytest.MonkeyPatch
                                                                            ) -> None:
    """In eager mode the forward (itself an ``autograd.Function``'s) computes the product with the
    implementation's plain function: an inner ``Function`` would record nothing there (grad mode is off) and
    only cost its ``apply`` on the host. The eager fast path's Function is replaced by one that fails."""
    ns = dispatch.load("swiglu", "cpu", "torch")

    def inner_function(*_args: Any) -> Any:
        raise AssertionError("the forward called the eager autograd Function")

    monkeypatch.setattr(ns.eager, "swiglu", inner_function)
    a, b, w, _ = _inputs("cpu", torch.float32, (6,), 10, 4, False)
    y = F.swiglu_linear(a, b, w, impl="torch")  # type: ignore[arg-type]
    assert torch.allclose(y, _reference(a, b, w, None))  # type: ignore[arg-type]
    y.sum().backward()
    assert a.grad is not None and w.grad is not None  # type: ignore[union-attr]


@pytest.mark.parametrize(("shape_b", "w_shape", "dtype_b"), [
    ((4, 6), (5, 7), torch.float32),  # weight of the wrong width
    ((1, 6), (5, 6), torch.float32),  # b broadcast
    ((4, 6), (5, 6), torch.float64),  # mixed dtypes
])
def test_bad_inputs_name_the_fix(shape_b: tuple[int, ...], w_shape: tuple[int, ...], dtype_b: torch.dtype) -> None:
    with pytest.raises(OpInputError, match="swiglu_linear"):
        F.swiglu_linear(torch.randn(4, 6), torch.randn(shape_b, dtype=dtype_b), torch.randn(w_shape))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("lead", "i", "o", "bias"), [((3, 5), 7, 9, False), ((13,), 33, 17, True)])
def test_the_compiled_form_gives_the_portable_eager_forms_results_bit_for_bit(
        dtype: torch.dtype, lead: tuple[int, ...], i: int, o: int, bias: bool) -> None:
    """``mode="compile"`` without a forced implementation runs the portable fp32 expressions as plain torch code
    (for Inductor to fuse); run eagerly, its output and gradients equal the portable eager form's exactly, and
    it saves the same tensors (a, b and the weight)."""
    results = []
    for mode, impl in (("eager", "torch"), ("compile", None)):
        xs = _inputs("cpu", dtype, lead, i, o, bias)
        saved: list[tuple[int, ...]] = []

        def pack(t: torch.Tensor) -> Any:
            saved.append(tuple(t.shape))  # noqa: B023 (used within the iteration)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = F.swiglu_linear(*xs, impl=impl, mode=mode)  # type: ignore[misc]
        gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
        grads = torch.autograd.grad(y, [t for t in xs if t is not None], gy)
        results.append((y.detach(), grads, sorted(saved)))
    (y0, g0, s0), (y1, g1, s1) = results
    torch.testing.assert_close(y1, y0, rtol=0, atol=0)
    for got, want in zip(g1, g0, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert s1 == s0 == sorted([(*lead, i), (*lead, i), (o, i)])


def test_an_unknown_mode_is_an_input_error() -> None:
    xs = _inputs("cpu", torch.float32, (3,), 4, 5, False)
    with pytest.raises(OpInputError, match="mode='fast'.*'eager', 'compile'"):
        F.swiglu_linear(*xs, mode="fast")  # type: ignore[misc]


@pytest.mark.parametrize("bias_shape", [(3,), (6,), (5, 1), (1, 5), ()], ids=str)
@pytest.mark.parametrize("lead", [(4,), (2, 3)], ids=str)
def test_bias_of_the_wrong_shape_names_both_shapes(bias_shape: tuple[int, ...], lead: tuple[int, ...]) -> None:
    """Not torch's "expanded size" error (nor a broadcast the unfused Linear would refuse)."""
    a, b, w = torch.randn(*lead, 6), torch.randn(*lead, 6), torch.randn(5, 6)
    bias = torch.randn(bias_shape)
    with pytest.raises(OpInputError, match=rf"swiglu_linear: bias has shape \[{', '.join(map(str, bias_shape))}\] "
                                           r"and weight \[5, 6\]; accepted: bias of shape \[5\]"):
        F.swiglu_linear(a, b, w, bias)


@pytest.mark.parametrize("meta", ["weight", "bias", "a"])
def test_a_meta_tensor_is_a_typed_error(meta: str) -> None:
    """A weight accelerate has offloaded is a meta tensor outside its module's call: reading it gave
    uninitialised memory. Every input on the meta device is still shape inference, and works."""
    t = {"a": torch.randn(4, 6), "b": torch.randn(4, 6), "weight": torch.randn(5, 6), "bias": torch.randn(5)}
    t[meta] = t[meta].to("meta")
    if meta == "a":
        t["b"] = t["b"].to("meta")
    with pytest.raises(OpInputError, match=f"swiglu_linear: {meta} is a meta tensor"):
        F.swiglu_linear(t["a"], t["b"], t["weight"], t["bias"])
    on_meta = {k: x.to("meta") for k, x in t.items()}
    assert F.swiglu_linear(on_meta["a"], on_meta["b"], on_meta["weight"], on_meta["bias"]).shape == (4, 5)
