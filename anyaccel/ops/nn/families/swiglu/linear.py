"""``linear(silu(a) * b, weight, bias)`` that keeps ``a`` and ``b`` for the backward, not the product.

In a Llama MLP (``down_proj(act(gate_proj(x)) * up_proj(x))``) autograd keeps three tensors of the
intermediate size per layer: ``a`` and ``b`` for the SwiGLU backward and their product ``c`` for
``down_proj``'s weight gradient. ``c`` is cheap to recompute from ``a`` and ``b`` (one element-wise pass), so
this function saves ``a``, ``b`` and the weight and recomputes ``c`` in the backward: a third of the MLP's
activation memory (``tokens x intermediate`` elements per layer). The same trade as activation
checkpointing, confined to the one tensor where it is cheapest.

When the input grads and the weight grad are both needed (training), the backward recomputes ``c`` in the
pass that computes the input grads (the family's ``swiglu_backward_recompute``: reads ``grad_c``, ``a`` and
``b`` once, writes ``da``, ``db`` and ``c``), so the recomputation costs one more write of ``c`` and no extra
read; ``c`` and the grads are bit-identical to those of ``swiglu`` and ``swiglu_backward``, which the other
cases (frozen weight; frozen inputs) call. ``c`` gets a buffer of its own rather than ``grad_c``'s: reusing
``grad_c`` would save one transient ``tokens x intermediate`` allocation per layer but no memory traffic (the
kernel writes ``c`` either way), and would need a second op that writes into its input (a custom op's
outputs may not alias its inputs), which ``torch.compile`` must functionalise and then re-inplace.

Two callable forms, one per mode (`anyaccel.ops.nn.implementations.MODES`), with the same saved tensors:

- `apply`, the eager form: an eager ``autograd.Function`` over the chosen implementation's plain functions
  (its Triton kernels on CUDA/XPU);
- `compiled`, the form for ``torch.compile``. While Dynamo traces, the product is the portable
  implementation's torch expression (one rounding of the fp32 ``silu(a) * b``) in a non-reentrant
  ``torch.utils.checkpoint`` region, ``down_proj`` outside it: Inductor generates and fuses the element-wise
  math, and the checkpoint makes the compiled backward recompute the product from ``a`` and ``b`` instead of
  keeping it. An ``autograd.Function`` that saves ``a`` and ``b`` does not achieve that once traced: in the
  joint graph its backward's recomputation is the forward's expression again, common-subexpression elimination
  merges the two, and the partitioner keeps the product (1 GiB more in a compiled Llama 3.2 1B-shaped step);
  torch 2.11 kept it even with the Function inside a checkpoint region. Called untraced, the form applies
  `CompiledSwiGLULinear`, that Function over the same torch expressions. With a forced ``impl`` both use
  that implementation's torch ops.
"""

from __future__ import annotations

from typing import Any

import torch
from typing_extensions import override

from anyaccel.ops.nn.define import eager_function
from anyaccel.ops.nn.implementations import ops


class SwiGLULinear:
    """The formulas of [`anyaccel.ops.nn.functional.swiglu_linear`][anyaccel.ops.nn.functional.swiglu_linear]
    (``forward``, ``setup_context``, ``backward`` of a ``torch.autograd.Function``); `apply` runs them."""

    @staticmethod
    def forward(a: torch.Tensor, b: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                impl: str | None) -> torch.Tensor:
        from anyaccel.ops import dispatch

        # grad mode is off inside a Function's forward: the plain function, no inner Function to apply
        c = dispatch.load("swiglu", a.device.type, impl).plain.swiglu(a, b)
        return torch.nn.functional.linear(c, weight, bias)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        a, b, weight, bias, impl = inputs
        ctx.save_for_backward(a, b, weight)
        ctx.impl = impl
        ctx.has_bias = bias is not None

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[Any, ...]:
        a, b, weight = ctx.saved_tensors
        ns = ops("swiglu", a.device.type, ctx.impl, "eager")
        return _backward(ctx, ns, grad_y, a, b, weight)


def _backward(ctx: Any, ns: Any, grad_y: torch.Tensor, a: torch.Tensor, b: torch.Tensor, weight: torch.Tensor
              ) -> tuple[Any, ...]:
    """The gradients of ``(a, b, weight, bias, impl)``, with ``ns``'s SwiGLU functions."""
    grad_a = grad_b = grad_w = grad_bias = None
    c: torch.Tensor | None = None
    if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
        grad_c = grad_y.matmul(weight)
        if ctx.needs_input_grad[2]:
            # training: the input grads and c for the weight grad from one read of grad_c, a and b
            grad_a, grad_b, c = ns.swiglu_backward_recompute(grad_c, a, b)
        else:
            grad_a, grad_b = ns.swiglu_backward(grad_c, a, b)
    if ctx.needs_input_grad[2]:
        if c is None:
            with torch.no_grad():
                c = ns.swiglu(a, b)
        grad_w = grad_y.reshape(-1, grad_y.shape[-1]).t().matmul(c.reshape(-1, c.shape[-1])).to(weight.dtype)
    if ctx.has_bias and ctx.needs_input_grad[3]:
        grad_bias = grad_y.reshape(-1, grad_y.shape[-1]).sum(0)
    return grad_a, grad_b, grad_w, grad_bias, None


#: ``apply(a, b, weight, bias, impl)``: `SwiGLULinear` as an eager autograd Function
#: (`anyaccel.ops.nn.define.eager_function`): the eager form.
apply = eager_function("SwiGLULinear", SwiGLULinear.forward, SwiGLULinear.setup_context, SwiGLULinear.backward)


class _Traceable:
    """The SwiGLU functions of the compiled form where no implementation is forced: the portable
    implementation's fp32 expressions (`anyaccel.ops.nn.families.swiglu.portable`), each rounded once to the
    inputs' dtype, without its fakes' output allocation (``torch.result_type``, a Dynamo graph break), so
    Dynamo traces them and Inductor fuses them. ``a`` and ``b`` share a shape and dtype here."""

    @staticmethod
    def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        from anyaccel.ops.nn.families.swiglu.portable import swiglu_fp32

        return swiglu_fp32(a, b).to(a.dtype)

    @staticmethod
    def swiglu_backward(grad_c: torch.Tensor, a: torch.Tensor, b: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        from anyaccel.ops.nn.families.swiglu.portable import grads_fp32

        da, db = grads_fp32(grad_c, a, b)
        return da.to(a.dtype), db.to(b.dtype)

    @staticmethod
    def swiglu_backward_recompute(grad_c: torch.Tensor, a: torch.Tensor, b: torch.Tensor
                                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        da, db = _Traceable.swiglu_backward(grad_c, a, b)
        return da, db, _Traceable.swiglu(a, b)


def _traced_functions(impl: str | None, device_type: str) -> Any:
    """The SwiGLU functions of the compiled form: `_Traceable` (Inductor fuses them), or the forced
    implementation's torch ops."""
    if impl is None:
        return _Traceable
    return ops("swiglu", device_type, impl, "compile")


class CompiledSwiGLULinear(torch.autograd.Function):
    """The compiled form (module docstring): ``apply(a, b, weight, bias, impl)``, traced by Dynamo."""

    @override
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                impl: str | None) -> torch.Tensor:
        c = _traced_functions(impl, a.device.type).swiglu(a, b)
        ctx.save_for_backward(a, b, weight)
        ctx.impl = impl
        ctx.has_bias = bias is not None
        return torch.nn.functional.linear(c, weight, bias)

    @override
    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[Any, ...]:
        a, b, weight = ctx.saved_tensors
        return _backward(ctx, _traced_functions(ctx.impl, a.device.type), grad_y, a, b, weight)


def compiled(a: torch.Tensor, b: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
             impl: str | None) -> torch.Tensor:
    """The compiled form (module docstring; arguments as `apply`): the checkpointed product and ``linear`` while
    Dynamo traces, else `CompiledSwiGLULinear` applied."""
    if torch.compiler.is_compiling():
        # Traced, a Function's forward and backward meet in one joint graph, where the backward's
        # recomputation of the product is the forward's expression again: common-subexpression elimination
        # merges the two and the partitioner keeps the product. The product in a non-reentrant
        # torch.utils.checkpoint region is recomputed instead (activation checkpointing, which Dynamo traces);
        # torch 2.11 did not recompute a Function's intermediates inside such a region, so the product is
        # checkpointed alone and autograd derives its backward.
        c = torch.utils.checkpoint.checkpoint(_traced_functions(impl, a.device.type).swiglu, a, b,
                                              use_reentrant=False)
        return torch.nn.functional.linear(c, weight, bias)
    out: torch.Tensor = CompiledSwiGLULinear.apply(a, b, weight, bias, impl)
    return out
