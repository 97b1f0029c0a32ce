"""``anyaccel.ops.patch`` on tiny random-weight models of families other than Llama, found through
transformers' kernel-layer markers with no per-family code: patched logits, loss and gradients equal the
unpatched model's, the report names what was replaced and what was left (and why), and ``unpatch``
restores the forwards and the modeling module's rotary function. float32 models, so the tolerances are
float32's (the ops compute in fp32 and round once; the order of the sums differs). CPU: the portable
implementation; GPU (marked ``gpu``): Triton."""

from __future__ import annotations

import copy
import importlib

import pytest
import torch

import anyaccel.ops
from anyaccel.ops.nn import hf_patch
from anyaccel.testing.nn_impls import HAS_CUDA, HAS_TRITON

transformers = pytest.importorskip("transformers")

_gpu = [pytest.mark.gpu, pytest.mark.skipif(not (HAS_CUDA and HAS_TRITON), reason="needs a CUDA GPU and triton")]
CASES = [pytest.param(("cpu", "torch"), id="cpu-torch"), pytest.param(("cuda", "triton"), id="cuda-triton",
                                                                        marks=_gpu)]
VOCAB = 96
_MLP_AND_LOSS = {"mlp": 2, "loss": True}

#: family -> (what the report must show: RMSNorm modules, SwiGLU MLPs, rope swapped, loss replaced; a text
#: the skipped lines must contain, or "")
FAMILIES: dict[str, tuple[tuple[int, int, bool, bool], str]] = {
    "qwen2": ((5, 2, True, True), ""),
    "qwen3": ((9, 2, True, True), ""),  # + q_norm and k_norm per layer
    "mistral": ((5, 2, True, True), ""),
    "olmo2": ((9, 2, True, True), ""),  # the one-rounding RMSNorm: casting="torch"
    "smollm3": ((5, 2, True, True), ""),
    "granite": ((5, 2, True, False), "GraniteForCausalLM.forward is not Llama's"),  # logits / logits_scaling
    "phi3": ((5, 0, False, True), ""),  # fused gate_up_proj MLP and partial rotary: no markers for them
    "gemma": ((0, 0, True, True), "GELUTanh (GeluTanh): anyaccel has no op"),  # its RMSNorm carries no marker
}


def _model(family: str, device: str) -> torch.nn.Module:
    cfg_cls = getattr(transformers, transformers.CONFIG_MAPPING[family].__name__)
    config = cfg_cls(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=32,
                     pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    return model.to(device, torch.float32)


def _loss_and_grads(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("case", CASES)
def test_patched_family_matches_the_original(family: str, case: tuple[str, str]) -> None:
    device, impl = case
    (norms, mlps, rope, loss), skipped = FAMILIES[family]
    base = _model(family, device)
    patched = copy.deepcopy(base)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (2, 11), generator=gen).to(device)
    labels = ids.clone()
    labels[0, :4] = -100
    modeling = importlib.import_module(type(base).__module__)
    original_rope = getattr(modeling, "apply_rotary_pos_emb", None)

    report = anyaccel.ops.patch(patched, impl=impl)
    try:
        assert (report.rms_norm, report.mlp, report.rope, report.loss) == (norms, mlps, rope, loss), report.summary()
        assert (getattr(modeling, "apply_rotary_pos_emb", None) is not original_rope) == rope
        if skipped:
            assert skipped in report.summary()
        else:
            assert report.skipped == [], report.summary()
        if norms:
            assert any("RMSNorm" in k and n == norms for k, n in report.replaced.items()), report.replaced
        with torch.no_grad():
            got_logits = patched(input_ids=ids).logits
        got_loss, got_grads = _loss_and_grads(patched, ids, labels)
    finally:
        hf_patch.unpatch(patched)
    assert getattr(modeling, "apply_rotary_pos_emb", None) is original_rope
    assert all("forward" not in m.__dict__ for m in patched.modules())
    with torch.no_grad():
        want_logits = base(input_ids=ids).logits
    want_loss, want_grads = _loss_and_grads(base, ids, labels)
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-6)
    assert got_grads.keys() == want_grads.keys()
    for name, g in got_grads.items():
        torch.testing.assert_close(g, want_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    # unpatched, the copy computes what the original does again
    torch.testing.assert_close(_loss_and_grads(patched, ids, labels)[0], want_loss, rtol=0, atol=0)
