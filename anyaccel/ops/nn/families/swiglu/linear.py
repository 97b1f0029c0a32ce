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
"""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.define import eager_function
from anyaccel.ops.nn.implementations import ops, plain_ops


class SwiGLULinear:
    """The formulas of [`anyaccel.ops.nn.functional.swiglu_linear`][anyaccel.ops.nn.functional.swiglu_linear]
    (``forward``, ``setup_context``, ``backward`` of a ``torch.autograd.Function``); `apply` runs them."""

    @staticmethod
    def forward(a: torch.Tensor, b: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                impl: str | None) -> torch.Tensor:
        c = plain_ops("swiglu", a.device.type, impl).swiglu(a, b)
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
        ns = ops("swiglu", a.device.type, ctx.impl)
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
#: (`anyaccel.ops.nn.define.eager_function`).
apply = eager_function("SwiGLULinear", SwiGLULinear.forward, SwiGLULinear.setup_context, SwiGLULinear.backward)
