"""anyaccel.ops.patch on a small Hugging Face Llama built from a config (random weights, no download):
a few training steps patched and unpatched give the same losses within bf16 tolerance, on the CPU with
the portable implementation (and the Triton kernels in the interpreter when available), on a GPU with
Triton. Skipped when transformers is not installed."""

from __future__ import annotations

import copy

import pytest
import torch

import anyaccel.ops
from anyaccel.ops.nn import hf_patch as patch_mod
from anyaccel.testing.nn_impls import HAS_CUDA, HAS_TRITON, interpreter

transformers = pytest.importorskip("transformers")

_gpu = [pytest.mark.gpu, pytest.mark.skipif(not (HAS_CUDA and HAS_TRITON), reason="needs a CUDA GPU and triton")]
CASES = [
    pytest.param(("cpu", "torch"), id="cpu-torch"),
    pytest.param(("cpu", "triton_interpreter"), id="cpu-triton_interpreter",
                 marks=pytest.mark.skipif(not interpreter(), reason="needs triton and TRITON_INTERPRET=1")),
    pytest.param(("cuda", "triton"), id="cuda-triton", marks=_gpu),
]


def _model(device: str) -> torch.nn.Module:
    config = transformers.LlamaConfig(vocab_size=384, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=False)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(device, torch.bfloat16)


def _train(model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for ids, labels in batches:
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss))
    return losses


@pytest.mark.parametrize("accum", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", CASES)
def test_patched_llama_trains_like_the_original(case: tuple[str, str], accum: torch.dtype,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The loss's weight gradient accumulated in fp32 and in the weight's bf16, over several chunks (the chunk
    floor lowered so that 48 tokens make 6 chunks of 8)."""
    from anyaccel.ops.nn.families.cross_entropy import chunked

    monkeypatch.setattr(chunked, "MIN_CHUNK_ROWS", 1)
    monkeypatch.setattr(chunked, "ONE_CHUNK_WHEN_NO_LARGER", False)
    device, impl = case
    base = _model(device)
    patched = copy.deepcopy(base)
    report = anyaccel.ops.patch(patched, loss_accum_dtype=accum, impl=impl)
    assert (report.rms_norm, report.mlp, report.rope, report.loss) == (5, 2, True, True)  # 2 layers x 2 + final
    gen = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(3):
        ids = torch.randint(0, 384, (2, 24), generator=gen)
        labels = ids.clone()
        labels[0, :5] = -100  # padding-like ignored positions
        batches.append((ids.to(device), labels.to(device)))
    try:
        got = _train(patched, batches)
    finally:
        patch_mod.unpatch(patched)
    want = _train(base, batches)
    assert got[-1] < got[0]  # it learns
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, rel=0.016, abs=1e-2)  # bf16 tolerance (FlagGems's rtol for bfloat16)


def test_patch_keeps_logits_without_labels_and_unpatch_restores() -> None:
    model = _model("cpu")
    ids = torch.randint(0, 384, (1, 9))
    with torch.no_grad():
        before = model(input_ids=ids).logits
        anyaccel.ops.patch(model, impl="torch")
        out = model(input_ids=ids)
        with_labels = model(input_ids=ids, labels=ids)
    assert out.logits is not None and with_labels.logits is None
    torch.testing.assert_close(out.logits.float(), before.float(), rtol=0.05, atol=0.05)
    from transformers.models.llama import modeling_llama

    patched_rope = modeling_llama.apply_rotary_pos_emb
    patch_mod.unpatch(model)
    assert modeling_llama.apply_rotary_pos_emb is not patched_rope
    assert all(not hasattr(m, "_anyaccel_original_forward") for m in model.modules())


def test_patch_passes_loss_accum_dtype_to_the_loss() -> None:
    from anyaccel.ops.nn.errors import OpInputError

    model = _model("cpu")
    anyaccel.ops.patch(model, loss_accum_dtype=torch.float16, impl="torch")
    ids = torch.randint(0, 384, (1, 9))
    try:
        with pytest.raises(OpInputError, match=r"accum_dtype=torch.float16 is not accepted for a torch.bfloat16"):
            model(input_ids=ids, labels=ids)
    finally:
        patch_mod.unpatch(model)


def test_a_model_without_markers_is_reported_not_refused() -> None:
    """Before the markers, an unknown model type raised UnsupportedOpError; now it gets what its markers allow
    (here nothing) and a report naming what was left."""
    linear = torch.nn.Linear(2, 2)
    report = anyaccel.ops.patch(linear)
    assert (report.rms_norm, report.mlp, report.rope, report.loss, report.causal_mask, report.replaced) == (
        0, 0, False, False, False, {})
    assert report.skipped == ["loss: Linear is not a *ForCausalLM with a Linear lm_head",
                              "attention mask: Linear has no set_attn_implementation (not a transformers "
                              "PreTrainedModel)"]
    assert "replaced nothing" in report.summary()
    assert "forward" not in linear.__dict__


def test_patched_mlp_keeps_no_product_and_runs_down_proj_hooks() -> None:
    """The patched Llama MLP keeps gate and up for the backward but not silu(gate) * up (recomputed), equals
    the unpatched MLP, and a down_proj with a forward hook is still called (the hook runs)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=40, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1)
    torch.manual_seed(0)
    ref = transformers.LlamaForCausalLM(config)
    model = transformers.LlamaForCausalLM(config)
    model.load_state_dict(ref.state_dict())
    anyaccel.ops.patch(model, impl="torch")
    mlp, ref_mlp = model.model.layers[0].mlp, ref.model.layers[0].mlp
    x = torch.randn(3, 5, 16, requires_grad=True)
    shapes: list[tuple[int, ...]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = mlp(x)
    assert shapes.count((3, 5, 40)) == 2  # gate and up; the unfused MLP keeps their product too
    torch.testing.assert_close(y, ref_mlp(x), rtol=1e-5, atol=1e-6)
    grads = torch.autograd.grad(y.square().sum(), [x, *mlp.parameters()])
    want = torch.autograd.grad(ref_mlp(x).square().sum(), [x, *ref_mlp.parameters()])
    for g, w in zip(grads, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    seen: list[int] = []
    handle = mlp.down_proj.register_forward_hook(lambda m, i, o: seen.append(1))
    try:
        torch.testing.assert_close(mlp(x), ref_mlp(x), rtol=1e-5, atol=1e-6)
    finally:
        handle.remove()
    assert seen == [1]
