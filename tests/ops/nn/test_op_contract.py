"""Every model op is a torch op honouring its spec: ``opcheck`` (schema, fake, autograd registration) for
each function of each nn spec, ``torch.compile(fullgraph=True)`` of every front end with no graph break,
forward and backward, and the spec/implementation plumbing (schema check, import cost)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import anyaccel.ops.nn as nn
from anyaccel._compat import dynamo
from anyaccel.ops import dispatch, registry
from anyaccel.spec import all_op_specs
from anyaccel.testing.nn_impls import HAS_CUDA, HAS_TRITON, interpreter

NN_SPECS = [s for s in all_op_specs() if s.source.startswith("anyaccel.ops.nn.")]
REPO = Path(__file__).resolve().parents[3]


def _samples(device: str) -> dict[str, Callable[[], tuple[Any, ...]]]:
    """One valid call per spec function (fresh tensors, odd sizes, one requiring grad)."""

    def r(*shape: int, dtype: torch.dtype = torch.float32, grad: bool = True) -> torch.Tensor:
        return torch.randn(*shape, device=device, dtype=dtype).requires_grad_(grad)

    def n(*shape: int) -> torch.Tensor:
        return r(*shape, grad=False)

    def t(rows: int, v: int) -> torch.Tensor:
        out = torch.randint(0, v, (rows,), device=device)
        out[0] = -100
        return out

    def stats() -> torch.Tensor:
        return torch.rand(3, 5, device=device) + 0.5

    return {
        "rms_norm": lambda: (r(3, 5, 7), r(7), 1e-6, "torch"),
        "fused_add_rms_norm": lambda: (r(3, 7), r(3, 7), r(7), 1e-6, "llama"),
        # backward ops have no double-backward formula: their samples do not require grad
        "rms_norm_backward": lambda: (n(3, 5, 7), n(3, 5, 7), n(7), stats(), n(3, 5, 7), "torch", True),
        "layer_norm": lambda: (r(3, 5, 7), r(7), r(7), 1e-5),
        "layer_norm_backward": lambda: (n(3, 5, 7), n(3, 5, 7), n(7), torch.zeros(3, 5, device=device), stats(),
                                        True, True),
        "softmax": lambda: (r(3, 5, 7), 1),
        "log_softmax": lambda: (r(3, 5, 7), -1),
        "softmax_backward": lambda: (n(3, 7), torch.softmax(n(3, 7), -1), -1),
        "log_softmax_backward": lambda: (n(3, 7), torch.log_softmax(n(3, 7), -1), -1),
        "swiglu": lambda: (r(3, 1, 7), r(5, 7)),
        "swiglu_backward": lambda: (n(3, 5, 7), n(3, 1, 7), n(5, 7)),
        "swiglu_backward_recompute": lambda: (n(3, 5, 7), n(3, 1, 7), r(5, 7, dtype=torch.bfloat16, grad=False)),
        "silu": lambda: (r(3, 7, dtype=torch.bfloat16),),
        "silu_backward": lambda: (n(3, 7), n(3, 7)),
        "rope": lambda: (r(2, 3, 5, 8), r(2, 1, 5, 4, grad=False), r(2, 1, 5, 4, grad=False), False),
        "rope_backward": lambda: (n(2, 3, 5, 8), n(5, 4), n(5, 4), True),
        "rope_qk": lambda: (r(2, 3, 5, 8), r(2, 1, 5, 8), n(2, 1, 5, 4), n(2, 1, 5, 4), False),
        "rope_qk_backward": lambda: (n(2, 3, 5, 8), n(2, 1, 5, 8), n(5, 4), n(5, 4), True),
        "cross_entropy": lambda: (r(5, 37), t(5, 37), -100, 0.1),
        "cross_entropy_backward": lambda: (n(5), n(5, 37), t(5, 37), n(5), -100, 0.1),
        "fused_linear_cross_entropy": lambda: (r(6, 8), r(37, 8), t(6, 37), r(37), -100, 0.0, "mean", True,
                                       torch.float32),
        "nll_loss": lambda: (torch.log_softmax(n(5, 37), -1).requires_grad_(), t(5, 37), n(37).abs(), 1, -100),
        "nll_loss_backward": lambda: (n(()), torch.log_softmax(n(5, 37), -1), t(5, 37), None, 1, -100,
                                      torch.tensor(4.0, device=device)),
    }


def test_every_nn_function_has_a_sample_and_three_implementations() -> None:
    names = {fn.name for s in NN_SPECS for fn in s.functions}
    assert names == set(_samples("cpu")), "add a sample call for each new spec function"
    assert {s.family for s in NN_SPECS} == {"rms_norm", "layer_norm", "softmax", "swiglu", "rope", "cross_entropy"}
    for s in NN_SPECS:
        assert {i.name for i in registry.implementations(s.family)} == {"triton", "torch", "triton_interpreter"}


def _opcheck_all(device: str, impl: str, test_utils: tuple[str, ...] | None = None) -> None:
    samples = _samples(device)
    for s in NN_SPECS:
        ns = dispatch.load(s.family, device, impl)
        for fn in s.functions:
            op = getattr(getattr(torch.ops, ns.namespace), fn.name).default
            if test_utils is None:
                torch.library.opcheck(op, samples[fn.name]())
            else:
                torch.library.opcheck(op, samples[fn.name](), test_utils=test_utils)


def test_portable_ops_pass_opcheck() -> None:
    _opcheck_all("cpu", "torch")


@pytest.mark.skipif(not interpreter(), reason="needs triton and TRITON_INTERPRET=1 (no CUDA device)")
def test_triton_ops_pass_the_schema_check_in_the_interpreter() -> None:
    """The Triton implementation's schema contract on the CPU (no output aliasing an input or another output,
    declared mutations only): opcheck's other checks need fake CUDA tensors, so they run on the GPU below."""
    _opcheck_all("cpu", "triton_interpreter", ("test_schema",))


@pytest.mark.gpu
@pytest.mark.skipif(not (HAS_CUDA and HAS_TRITON), reason="needs a CUDA GPU and triton")
def test_triton_ops_pass_opcheck_on_gpu() -> None:
    _opcheck_all("cuda", "triton")


def _front_end_calls(device: str, impl: str) -> dict[str, Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]]:
    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device, requires_grad=True)

    target = torch.randint(0, 37, (6,), device=device)
    return {
        "rms_norm": lambda: (lambda x, w: nn.rms_norm(x, w, impl=impl) * 2, (r(3, 7), r(7))),
        "fused_add_rms_norm": lambda: (lambda x, res: sum(nn.fused_add_rms_norm(x, res, impl=impl)),
                                       (r(3, 7), r(3, 7))),
        "layer_norm": lambda: (lambda x, w, b: nn.layer_norm(x, 7, w, b, impl=impl), (r(3, 7), r(7), r(7))),
        "softmax": lambda: (lambda x: nn.softmax(x, -1, impl=impl) + nn.log_softmax(x, 0, impl=impl), (r(3, 7),)),
        "swiglu": lambda: (lambda a, b: nn.swiglu(a, b, impl=impl) + nn.silu(a, impl=impl), (r(3, 7), r(3, 7))),
        "rope": lambda: (lambda x, c, s: nn.rope(x, c, s, impl=impl), (r(2, 5, 8), torch.randn(5, 8, device=device),
                                                                      torch.randn(5, 8, device=device))),
        "rope_qk": lambda: (lambda q, k, c, s: _weighted(*nn.rope_qk(q, k, c, s, impl=impl)),
                            (r(2, 3, 5, 8), r(2, 1, 5, 8), torch.randn(5, 8, device=device),
                             torch.randn(5, 8, device=device))),
        "cross_entropy": lambda: (lambda z: nn.cross_entropy(z, target, label_smoothing=0.1, impl=impl), (r(6, 37),)),
        "fused_linear_cross_entropy": lambda: (
            lambda h, w: nn.fused_linear_cross_entropy(h, w, target, impl=impl), (r(6, 8), r(37, 8))),
    }


def _weighted(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One tensor from two outputs, each gradient distinct."""
    return torch.cat((a.flatten() * 2, b.flatten()))


def _compile_matches_eager(device: str, impl: str, backend: str) -> None:
    torch._dynamo.reset()
    for name, make in _front_end_calls(device, impl).items():
        fn, args = make()
        eager = fn(*args)
        eager.sum().backward()
        grads = [a.grad.clone() if isinstance(a, torch.Tensor) and a.grad is not None else None for a in args]
        for a in args:
            a.grad = None
        compiled = torch.compile(fn, fullgraph=True, backend=backend)(*args)  # fullgraph: a graph break raises
        compiled.sum().backward()
        torch.testing.assert_close(compiled, eager, msg=name)
        for a, g in zip(args, grads, strict=True):
            if g is not None:
                torch.testing.assert_close(a.grad, g, msg=f"{name} grad")


def test_front_ends_compile_without_graph_break_portable() -> None:
    _compile_matches_eager("cpu", "torch", "aot_eager")


@pytest.mark.gpu
@pytest.mark.skipif(not (HAS_CUDA and HAS_TRITON), reason="needs a CUDA GPU and triton")
def test_front_ends_compile_without_graph_break_triton_inductor() -> None:
    _compile_matches_eager("cuda", "triton", "inductor")


def test_triton_op_schema_must_match_the_spec() -> None:
    from anyaccel.ops.nn.define import _check_schema
    from anyaccel.spec import SpecError

    _check_schema("ns::f", "ns::f(Tensor x, SymInt dim) -> Tensor", "(Tensor x, int dim) -> Tensor")
    with pytest.raises(SpecError, match="annotations give the schema"):
        _check_schema("ns::f", "ns::f(Tensor x, float dim) -> Tensor", "(Tensor x, int dim) -> Tensor")


def test_forced_unavailable_implementation_raises_naming_the_reason() -> None:
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("the interpreter implementation is available here")
    with pytest.raises(dispatch.NoImplementationError, match="TRITON_INTERPRET"):
        nn.rms_norm(torch.randn(2, 3), impl="triton_interpreter")


def test_the_dynamo_constant_mark_is_torchs() -> None:
    from anyaccel.ops.nn import implementations

    def f() -> None:
        return None

    assert getattr(torch.compiler.assume_constant_result(f), dynamo.MARK) is True
    assert getattr(implementations.namespace, dynamo.MARK) is True


def test_importing_the_ops_imports_no_triton() -> None:
    probe = ("import json, sys; import anyaccel.ops, anyaccel.ops.nn; from anyaccel.spec import all_op_specs; "
             "all_op_specs(); import anyaccel.ops.nn.functional; "
             "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'triton')))")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True,
                         timeout=300)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_eager_fast_path_matches_the_torch_op_path_and_yields_to_dispatch_modes() -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    from anyaccel.ops.nn.implementations import ops

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return func(*args, **(kwargs or {}))

    eager = ops("rms_norm", "cpu", "torch")
    via_ops = getattr(torch.ops, dispatch.load("rms_norm", "cpu", "torch").namespace)
    with Passthrough():
        assert ops("rms_norm", "cpu", "torch") is via_ops  # dispatch modes see the torch ops
    x, w = torch.randn(4, 9, requires_grad=True), torch.randn(9, requires_grad=True)
    results = []
    for path in (eager, via_ops):
        y = path.rms_norm(x, w, 1e-6, "llama")[0]
        results.append((y, *torch.autograd.grad(y.square().sum(), (x, w))))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_eager_forward_without_a_graph_to_record_equals_the_op_and_forward_ad_still_refuses() -> None:
    """With grad mode off, or no input requiring grad, the eager forward's outputs equal the torch op's and
    carry no graph, and under a forward-mode AD level torch's ``Function.apply`` refuses (the families define
    no ``jvp``) instead of dropping the tangents."""
    import torch.autograd.forward_ad as fwad

    from anyaccel.ops.nn.implementations import ops

    eager = ops("rms_norm", "cpu", "torch")
    via_ops = getattr(torch.ops, dispatch.load("rms_norm", "cpu", "torch").namespace)
    x, w = torch.randn(4, 9), torch.randn(9, requires_grad=True)
    want = via_ops.rms_norm(x, w.detach(), 1e-6, "llama")
    with torch.no_grad():
        got = eager.rms_norm(x, w, 1e-6, "llama")
    plain = eager.rms_norm(x, w.detach(), 1e-6, "llama")
    for out in (got, plain):
        for a, b in zip(out, want, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
            assert a.grad_fn is None and not a.requires_grad
    assert eager.rms_norm(x, w, 1e-6, "llama")[0].grad_fn is not None  # a graph to record: the Function
    with fwad.dual_level(), torch.no_grad():
        dual = fwad.make_dual(x, torch.randn_like(x))
        with pytest.raises(NotImplementedError, match="jvp"):
            eager.rms_norm(dual, w.detach(), 1e-6, "llama")


def _eager_forwards() -> list[tuple[str, Any]]:
    """(name, eager forward) for every eager forward of the portable implementations (the spec functions
    with an autograd formula) and ``swiglu_linear``'s."""
    from anyaccel.ops.nn.families.swiglu import linear
    from anyaccel.ops.nn.implementations import ops

    found: list[tuple[str, Any]] = [("swiglu_linear", linear.apply)]
    for s in NN_SPECS:
        eager = ops(s.family, "cpu", "torch")
        found += [(fn.name, getattr(eager, fn.name)) for fn in s.functions
                  if hasattr(getattr(eager, fn.name, None), "combined")]
    assert len(found) >= 12
    return found


def test_eager_functions_carry_their_forward_signature() -> None:
    """torch's ``Function.apply`` calls ``inspect.signature(forward)`` on every call of a Function that defines
    ``setup_context``; each of anyaccel's eager Functions of that form (``apply.full``) carries it
    (``__signature__``), equal to the signature inspect builds from the code, so no call rebuilds it."""
    import inspect

    for _, apply in _eager_forwards():
        forward = apply.full.forward
        carried = forward.__dict__.get("__signature__")
        assert isinstance(carried, inspect.Signature), forward
        assert inspect.signature(forward) is carried
        del forward.__signature__
        try:
            assert inspect.signature(forward) == carried
        finally:
            forward.__signature__ = carried


def _forward_samples() -> list[tuple[Any, tuple[Any, ...]]]:
    """(eager forward, one valid positional call) for every eager forward of `_eager_forwards`."""
    samples = {**_samples("cpu"), "swiglu_linear": lambda: (
        torch.randn(3, 5, 7, requires_grad=True), torch.randn(3, 5, 7, requires_grad=True),
        torch.randn(4, 7, requires_grad=True), None, "torch")}
    found = [(apply, samples[name]()) for name, apply in _eager_forwards() if name in samples]
    assert len(found) >= 9
    return found


def _outputs_and_grads(call: Any, args: tuple[Any, ...]) -> list[torch.Tensor]:
    out = call(*args)
    outs = [o for o in (out if isinstance(out, tuple) else (out,)) if isinstance(o, torch.Tensor)]
    inputs = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    loss = sum((o.float() * (1.0 + torch.arange(o.numel()).reshape(o.shape) % 3)).sum()
               for o in outs if o.requires_grad)
    return [o.detach() for o in outs] + list(torch.autograd.grad(loss, inputs, allow_unused=True,
                                                                 materialize_grads=True))


def test_positional_eager_calls_bind_no_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    """A positional call of an eager forward, with no functorch transform active, takes the combined form
    (``apply.combined``): torch's ``apply`` binds no signature for it, so ``inspect.Signature.bind`` is never
    called, forward or backward. A keyword call takes the ``setup_context`` form, which binds."""
    import inspect

    calls = _forward_samples()
    bind = inspect.Signature.bind
    seen: list[str] = []

    def spy(self: inspect.Signature, *args: Any, **kwargs: Any) -> Any:
        seen.append(str(self))
        return bind(self, *args, **kwargs)

    monkeypatch.setattr(inspect.Signature, "bind", spy)
    for apply, args in calls:
        _outputs_and_grads(apply, args)
    assert seen == []
    apply, args = calls[0]
    names = list(inspect.signature(apply.full.forward).parameters)
    _outputs_and_grads(lambda *a: apply(*a[:-1], **{names[len(a) - 1]: a[-1]}), args)
    assert seen


def test_combined_and_setup_context_forms_agree_bit_for_bit() -> None:
    """The two Functions behind each eager forward give the same outputs and gradients."""
    for apply, args in _forward_samples():
        combined = _outputs_and_grads(apply.combined.apply, args)
        full = _outputs_and_grads(apply.full.apply, args)
        assert len(combined) == len(full)
        for a, b in zip(combined, full, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_functorch_transforms_take_the_setup_context_form() -> None:
    """Under ``torch.func.grad`` (a functorch transform, which refuses a combined-form Function) an eager
    forward still works and gives autograd's gradient."""
    from anyaccel.ops.nn.implementations import ops

    eager = ops("rms_norm", "cpu", "torch")
    x, w = torch.randn(4, 9), torch.randn(9)

    def loss(x: torch.Tensor) -> torch.Tensor:
        return eager.rms_norm(x, w, 1e-6, "llama")[0].square().sum()

    got = torch.func.grad(loss)(x)
    xr = x.clone().requires_grad_(True)
    want, = torch.autograd.grad(loss(xr), xr)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda x: eager.rms_norm.combined.apply(x, w, 1e-6, "llama")[0].sum())(x)
