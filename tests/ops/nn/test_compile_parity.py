"""Compile parity: every model op, and a patched tiny model, under ``torch.compile(fullgraph=True)`` give
the loss and gradients of eager mode (``ignore_index``, label smoothing, masked softmax rows, odd sizes,
fused add + RMSNorm, fused linear cross-entropy included). CPU: the portable implementation, the ops with
the ``aot_eager`` backend (Dynamo, fake tensors and AOTAutograd, without Inductor's C++ compilation: with
Inductor the first four ops took 80 s on a shared 2-core machine) and the patched model with Inductor; GPU
(marked ``gpu``): Triton, everything with Inductor."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

import anyaccel.ops
import anyaccel.ops.nn as nn
from anyaccel.ops.nn import functional, hf_patch
from anyaccel.testing.nn_impls import HAS_CUDA, HAS_TRITON

_gpu = [pytest.mark.gpu, pytest.mark.skipif(not (HAS_CUDA and HAS_TRITON), reason="needs a CUDA GPU and triton")]
#: (device, implementation, the ops' backend)
CASES = [pytest.param(("cpu", "torch", "aot_eager"), id="cpu-torch"),
         pytest.param(("cuda", "triton", "inductor"), id="cuda-triton", marks=_gpu)]

Loss = Callable[..., torch.Tensor]


def _target(rows: int, vocab: int, device: str) -> torch.Tensor:
    t = torch.randint(0, vocab, (rows,), generator=torch.Generator().manual_seed(3)).to(device)
    t[1] = t[4] = -100
    return t


def _mask_softmax(x: torch.Tensor, impl: str) -> torch.Tensor:
    mask = torch.ones(x.shape[-2], x.shape[-1], dtype=torch.bool, device=x.device).tril()  # causal-like rows
    return nn.softmax(x.masked_fill(~mask, float("-inf")), -1, impl=impl)


def _ops(device: str, impl: str) -> dict[str, tuple[Loss, tuple[tuple[int, ...], ...]]]:
    """name -> (a function of the inputs giving one loss-like tensor, the input shapes (odd sizes))."""
    t7, t9 = _target(7, 37, device), _target(9, 37, device)
    return {
        "rms_norm": (lambda x, w: nn.rms_norm(x, w, impl=impl) * 2, ((3, 5, 7), (7,))),
        "rms_norm_llama": (lambda x, w: nn.rms_norm(x, w, casting="llama", impl=impl), ((5, 7), (7,))),
        "fused_add_rms_norm": (lambda x, r, w: _pair(*nn.fused_add_rms_norm(x, r, w, casting="llama", impl=impl)),
                               ((3, 7), (3, 7), (7,))),
        "layer_norm": (lambda x, w, b: nn.layer_norm(x, 7, w, b, impl=impl), ((3, 7), (7,), (7,))),
        "softmax_masked": (lambda x: _mask_softmax(x, impl) + nn.log_softmax(x, 0, impl=impl), ((5, 7),)),
        "swiglu": (lambda a, b: nn.swiglu(a, b, impl=impl), ((3, 1, 7), (5, 7))),
        # the compiled form (linear.compiled) with the forced implementation's torch ops, against the eager form
        "swiglu_linear": (lambda a, b, w: functional.swiglu_linear(a, b, w, impl=impl), ((3, 7), (3, 7), (5, 7))),
        "rope_qk": (lambda q, k: _pair(*nn.rope_qk(q, k, _table(device).cos(), _table(device).sin(), impl=impl)),
                    ((2, 3, 5, 8), (2, 1, 5, 8))),
        "cross_entropy_smoothing_ignore": (
            lambda z: nn.cross_entropy(z, t7, label_smoothing=0.1, impl=impl), ((7, 37),)),
        "cross_entropy_sum": (lambda z: nn.cross_entropy(z, t7, reduction="sum", impl=impl), ((7, 37),)),
        "cross_entropy_none": (lambda z: nn.cross_entropy(z, t7, reduction="none", impl=impl), ((7, 37),)),
        "fused_linear_cross_entropy": (
            lambda h, w, b: nn.fused_linear_cross_entropy(h, w, t9, b, label_smoothing=0.05, impl=impl),
            ((9, 6), (37, 6), (37,))),
    }


def _table(device: str) -> torch.Tensor:
    freqs = torch.outer(torch.arange(5.0), torch.arange(1.0, 5.0) / 4)
    return torch.cat((freqs, freqs), -1).to(device)


def _pair(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One tensor from two outputs, each gradient distinct."""
    return torch.cat((a.flatten() * 2, b.flatten()))


def _grads(fn: Loss, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
    out = fn(*leaves)
    weights = torch.linspace(0.5, 1.5, out.numel(), device=out.device).view(out.shape)
    (out * weights).sum().backward()
    return out.detach(), [x.grad.detach() if x.grad is not None else torch.zeros(()) for x in leaves]


@pytest.mark.parametrize("case", CASES)
def test_every_op_compiles_to_the_eager_result(case: tuple[str, str, str]) -> None:
    device, impl, backend = case
    torch.compiler.reset()
    gen = torch.Generator().manual_seed(0)
    for name, (fn, shapes) in _ops(device, impl).items():
        inputs = [torch.randn(*s, generator=gen).to(device) for s in shapes]
        want, want_grads = _grads(fn, inputs)
        got, got_grads = _grads(torch.compile(fn, fullgraph=True, backend=backend), inputs)  # a graph break raises
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=name)
        for i, (g, w) in enumerate(zip(got_grads, want_grads, strict=True)):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, msg=f"{name} grad {i}")


@pytest.mark.parametrize("case", CASES)
def test_patched_model_compiles_to_the_eager_loss_and_gradients(case: tuple[str, str, str]) -> None:
    """Inductor on both devices; the compiled copy patched with ``mode="compile"``."""
    transformers = pytest.importorskip("transformers")
    device, impl, _ = case
    config = transformers.Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                      max_position_embeddings=32, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(config).to(device)
    compiled_copy = copy.deepcopy(model)
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1)).to(device)
    labels = ids.clone()
    labels[1, :3] = -100
    results = []
    for m, compile_it in ((model, False), (compiled_copy, True)):
        # the compiled copy in compile mode: the loss and the MLP replaced, the rest left to Inductor
        report = anyaccel.ops.patch(m, impl=impl, mode="compile" if compile_it else "eager")
        assert (report.rms_norm, report.mlp, report.rope, report.loss) == \
            ((0, 1, False, True) if compile_it else (5, 1, True, True))
        try:
            torch.compiler.reset()
            run = torch.compile(m, fullgraph=True) if compile_it else m
            loss = run(input_ids=ids, labels=labels).loss
            loss.backward()
            results.append((loss.detach(), {n: p.grad for n, p in m.named_parameters()}))
        finally:
            hf_patch.unpatch(m)
    (want, want_grads), (got, got_grads) = results
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for n, g in want_grads.items():
        torch.testing.assert_close(got_grads[n], g, rtol=1e-4, atol=1e-6, msg=n)
