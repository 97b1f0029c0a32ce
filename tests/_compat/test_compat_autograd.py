"""``anyaccel._compat.autograd_function``, ``library`` and ``dynamo``: private paths and forced fallbacks give
the same results (values and gradients against a float64 reference)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch

from anyaccel._compat import autograd_function, dynamo, library


def _square() -> type[torch.autograd.Function]:
    def forward(x: torch.Tensor, scale: float) -> torch.Tensor:
        return x * x * scale

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(inputs[0])
        ctx.scale = inputs[1]

    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (x,) = ctx.saved_tensors
        return 2 * x * ctx.scale * grad, None

    return autograd_function.function("square", forward, setup, backward)


@pytest.mark.parametrize("fallback", [False, True])
def test_function_values_and_gradients(fallback: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if fallback:
        monkeypatch.setattr(autograd_function, "_privates", lambda: None)
        assert not autograd_function.fast_apply_available()
    else:
        assert autograd_function.fast_apply_available(), f"torch {torch.__version__} lacks the internals"
    fn = _square()
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    y = fn.apply(x, 3.0)
    (g,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(y, x.detach() ** 2 * 3.0)
    torch.testing.assert_close(g, 6.0 * x.detach())
    with torch.no_grad():
        assert fn.apply(x, 3.0).grad_fn is None
    # keywords are bound to positions on both paths (torch 2.10's and 2.11's own apply refuse them)
    torch.testing.assert_close(fn.apply(x, scale=3.0), y)
    (gk,) = torch.autograd.grad(fn.apply(x, scale=3.0).sum(), x)
    torch.testing.assert_close(gk, g)


def test_fast_apply_skips_torchs_apply_and_binds_keywords(monkeypatch: pytest.MonkeyPatch) -> None:
    entered: list[str] = []
    torch_apply = torch.autograd.Function.__dict__["apply"]

    def spy(cls: Any, *args: Any, **kwargs: Any) -> Any:
        entered.append(cls.__name__)
        return torch_apply.__get__(None, cls)(*args, **kwargs)

    monkeypatch.setattr(torch.autograd.Function, "apply", classmethod(spy))
    fn = _square()
    x = torch.randn(3, requires_grad=True)
    fn.apply(x, 2.0)
    fn.apply(x, scale=2.0)
    assert entered == []
    with pytest.raises(TypeError, match="scale"):
        fn.apply(x)  # a missing argument: torch's apply reports it
    assert entered == ["square"]


@pytest.mark.parametrize("fallback", [False, True])
def test_untraced_turns_wrap_triton_off_inside(fallback: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if fallback:
        monkeypatch.setattr(library, "_switch", lambda: None)
    seen: list[bool | None] = []

    def body(a: int) -> int:
        seen.append(library.wrap_triton_enabled())
        return a + 1

    call = library.untraced(body)
    assert call(1) == 2
    assert seen == ([True] if fallback else [False])
    assert library.wrap_triton_enabled() is True


def test_wrap_is_the_eager_launcher_outside_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    triton = pytest.importorskip("triton")

    @triton.jit
    def kernel(x):  # type: ignore[no-untyped-def]
        pass

    eager = object()
    with torch._library.triton.set_wrap_triton_enabled(False):
        assert library.wrap(kernel, lambda k: eager) is eager
        monkeypatch.setattr(library, "_module", lambda: None)
        assert library.wrap(kernel, lambda k: eager) is eager  # public wrap_triton passes the kernel through


def test_the_dynamo_mark_is_the_public_decorators(monkeypatch: pytest.MonkeyPatch) -> None:
    def f() -> int:
        return 1

    def g() -> int:
        return 2

    monkeypatch.delitem(sys.modules, "torch._dynamo", raising=False)
    assert dynamo.mark_constant_result(f) is f and getattr(f, dynamo.MARK) is True
    monkeypatch.undo()
    import torch._dynamo  # noqa: F401

    public = torch.compiler.assume_constant_result(g)
    marks = {k for k in vars(public) if "dynamo" in k}
    assert marks == {dynamo.MARK}, f"torch {torch.__version__} marks with {marks}; update _compat/dynamo.py"
