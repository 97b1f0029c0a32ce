"""anyaccel's layers through the ``kernels`` package's ``kernelize`` (skipped without ``kernels``).

transformers sets ``kernel_layer_name`` on its classes only with a ``kernels`` version it accepts; the tests
mark the classes the same way themselves (``kernels.replace_kernel_forward_from_hub``, the call transformers'
decorator makes; the attributes are removed afterwards), so they run with any ``kernels`` that has
``kernelize`` and ``use_kernel_mapping``."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
import torch

from anyaccel.testing.nn_impls import HAS_CUDA, HAS_TRITON

kernels = pytest.importorskip("kernels", reason="the optional `kernels` package is not installed")
transformers = pytest.importorskip("transformers")
from anyaccel.ops.nn.hf import kernels_hub  # noqa: E402 (after the skips)

_gpu = [pytest.mark.gpu, pytest.mark.skipif(not (HAS_CUDA and HAS_TRITON), reason="needs a CUDA GPU and triton")]


@pytest.fixture
def marked() -> Iterator[None]:
    """Llama's RMSNorm and transformers' SiLU marked as transformers marks them with ``kernels``."""
    from transformers import activations
    from transformers.models.llama import modeling_llama

    classes = {modeling_llama.LlamaRMSNorm: "RMSNorm", activations.SiLUActivation: "SiLU"}
    for cls, name in classes.items():
        kernels.replace_kernel_forward_from_hub(cls, name)
    try:
        yield
    finally:
        for cls in classes:
            for attr in ("kernel_layer_name", "kernel_condition"):
                if attr in cls.__dict__:
                    delattr(cls, attr)


def _model(device: str) -> torch.nn.Module:
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(device)


def _loss_and_grads(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_gpu)])
def test_kernelize_puts_anyaccels_layers_in_and_keeps_the_result(marked: None, device: str,
                                                                 compiled: bool) -> None:
    base = _model(device)
    model = kernels_hub.kernelize(copy.deepcopy(base), mode=kernels.Mode.TRAINING | kernels.Mode.TORCH_COMPILE,
                                  device=device)
    replaced = {type(m).__name__: m.forward.__func__ for m in model.modules() if "forward" in m.__dict__}
    assert replaced == {"LlamaRMSNorm": kernels_hub.RMSNorm.forward, "SiLUActivation": kernels_hub.SiLU.forward}
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1)).to(device)
    run = torch.compile(model, fullgraph=True, backend="aot_eager") if compiled else model
    got, got_grads = _loss_and_grads(run, ids)
    want, want_grads = _loss_and_grads(base, ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


def test_a_marked_layer_with_other_math_keeps_its_forward_under_kernelize() -> None:
    class Offset(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(8))
            self.eps = 1e-6

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # (1 + weight) in x's dtype: no recipe
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1 + self.weight.to(x.dtype))

    kernels.replace_kernel_forward_from_hub(Offset, "RMSNorm")
    layer = Offset()
    x = torch.randn(3, 8)
    want = layer(x)
    kernels_hub.kernelize(layer, mode=kernels.Mode.INFERENCE, device="cpu")
    assert layer.forward.__func__ is kernels_hub.RMSNorm.forward  # kernelize bound anyaccel's layer ...
    torch.testing.assert_close(layer(x), want, rtol=0, atol=0)  # ... which ran the layer's own math


def test_the_rotary_function_layer_passes_kernels_validation_and_matches() -> None:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    func = kernels.use_kernel_forward_from_hub("rotary_pos_emb")(apply_rotary_pos_emb)  # a module, as with kernels
    holder = torch.nn.Module()
    holder.__dict__["_kernel_funcs"] = {"apply_rotary_pos_emb": func}
    q, k = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)
    freqs = torch.randn(1, 5, 4)
    cos, sin = torch.cat((freqs, freqs), -1).cos(), torch.cat((freqs, freqs), -1).sin()
    want = apply_rotary_pos_emb(q, k, cos, sin)
    kernels_hub.kernelize(holder, mode=kernels.Mode.TRAINING, device="cpu")
    assert func.forward.__func__ is kernels_hub.RotaryPosEmb.forward
    for g, w in zip(func(q, k, cos, sin), want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_unknown_layer_name_is_refused() -> None:
    with pytest.raises(KeyError, match="accepted: RMSNorm"):
        kernels_hub.AnyaccelRepository("LayerNorm")
