"""`anyaccel.ops.nn.hf.causal_mask`: a patched model keeps SDPA's ``is_causal`` when traced, computes what the
unpatched model computes, and keeps transformers' mask wherever the plain causal one is not known to be right."""

from __future__ import annotations

from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

import anyaccel.ops  # noqa: E402
from anyaccel.ops.nn.hf import causal_mask  # noqa: E402
from anyaccel.ops.nn.hf_patch import unpatch  # noqa: E402


def _model() -> Any:
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    assert model.config._attn_implementation == "sdpa"
    return model


def _sdpa_calls(model: Any, ids: torch.Tensor, **kwargs: Any) -> list[dict[str, Any]]:
    """The keyword arguments of every SDPA call in the graph Dynamo traces of ``model(ids)``."""
    calls: list[dict[str, Any]] = []

    def backend(gm: torch.fx.GraphModule, _inputs: Any) -> Any:
        for node in gm.graph.nodes:
            if node.op == "call_function" and "scaled_dot_product_attention" in str(node.target):
                calls.append({"attn_mask": node.kwargs.get("attn_mask", node.args[3] if len(node.args) > 3 else None),
                              "is_causal": node.kwargs.get("is_causal")})
        return gm.forward

    torch.compiler.reset()
    torch.compile(model, backend=backend, fullgraph=True)(input_ids=ids, **kwargs)
    torch.compiler.reset()
    return calls


@pytest.mark.parametrize(("kwargs", "plain"), [
    ({"q_length": 7, "kv_length": 7}, True),
    ({"q_length": 1, "kv_length": 9, "q_offset": 8}, True),
    ({"q_length": 3, "kv_length": 9, "q_offset": 6}, False),   # a chunk after a cache: not square
    ({"q_length": 7, "kv_length": 7, "local_size": 4}, False),  # a sliding window
    ({"q_length": 7, "kv_length": 7, "allow_is_causal_skip": False}, False),
    ({"q_length": 7, "kv_length": 7, "attention_mask": torch.ones(1, 7, dtype=torch.bool)}, False),
    ({"q_length": 7, "kv_length": 7, "q_offset": torch.tensor(0)}, False),  # a static cache's tensor offset
    ({"q_length": 6, "kv_length": 6, "window": 3, "local_size": 3}, False),  # another mask function
])
def test_only_the_plain_causal_case_skips_transformers_mask(kwargs: dict[str, Any], plain: bool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain causal case returns None without calling transformers' ``sdpa_mask``; every other case is
    transformers' own answer (delegated, with the same arguments)."""
    from transformers import masking_utils

    kwargs = dict(kwargs)
    if "window" in kwargs:
        kwargs["mask_function"] = masking_utils.sliding_window_causal_mask_function(kwargs.pop("window"))
    original = masking_utils.sdpa_mask
    delegated: list[dict[str, Any]] = []

    def spy(**kw: Any) -> Any:
        delegated.append(kw)
        return original(**kw)

    monkeypatch.setattr(masking_utils, "sdpa_mask", spy)
    out = causal_mask.sdpa_mask(batch_size=1, **kwargs)
    if plain:
        assert out is None and not delegated
    else:
        assert delegated == [{"batch_size": 1, **kwargs}]
        expected = original(batch_size=1, **kwargs)
        assert (out is None and expected is None) or torch.equal(out, expected)


def test_a_traced_patched_llama_calls_sdpa_causal_without_a_mask() -> None:
    model = _model()
    ids = torch.randint(0, 96, (2, 12))
    report = anyaccel.ops.patch(model, rms_norm=False, swiglu=False, rope=False, loss=False, silu=False)
    try:
        assert report.causal_mask and model.config._attn_implementation == causal_mask.ATTENTION_NAME
        calls = _sdpa_calls(model, ids)
        assert len(calls) == 2 and all(c["attn_mask"] is None and c["is_causal"] for c in calls), calls
        # a padding mask is a tensor the trace cannot read: transformers' mask is built, as without the patch
        padded = torch.ones_like(ids)
        padded[0, :4] = 0
        assert all(c["attn_mask"] is not None for c in _sdpa_calls(model, ids, attention_mask=padded))
    finally:
        unpatch(model)
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("padding", [False, True])
def test_the_compiled_patched_model_computes_what_the_model_computes(padding: bool) -> None:
    model = _model()
    ids = torch.randint(0, 96, (2, 12))
    mask = torch.ones_like(ids)
    if padding:
        mask[1, :5] = 0
    kwargs = {"input_ids": ids, "labels": ids, "attention_mask": mask if padding else None}
    expected = model(**kwargs).loss
    expected.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    anyaccel.ops.patch(model, rms_norm=False, swiglu=False, rope=False, loss=False, silu=False)
    try:
        torch.compiler.reset()
        loss = torch.compile(model)(**kwargs).loss
        loss.backward()
        torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
        for p, g in zip(model.parameters(), grads, strict=True):
            torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)
    finally:
        torch.compiler.reset()
        unpatch(model)


def test_another_attention_implementation_is_left_and_reported() -> None:
    model = _model()
    model.set_attn_implementation("eager")
    report = anyaccel.ops.patch(model, rms_norm=False, swiglu=False, rope=False, loss=False, silu=False)
    assert not report.causal_mask and model.config._attn_implementation == "eager"
    assert "attention mask: the model's attention implementation is 'eager', not 'sdpa'" in report.skipped


def test_apply_refuses_what_applies_names() -> None:
    with pytest.raises(ValueError, match="not a transformers PreTrainedModel"):
        causal_mask.apply(torch.nn.Linear(2, 2))
