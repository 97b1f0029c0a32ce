"""``anyaccel.ops.patch`` keeps the model's contract, on tiny random-weight Llama, Mistral, Qwen2 and Qwen3
models: out-of-range labels raise `IndexError` as the unpatched model does, ``return_dict=False`` with labels
works, evaluation returns the logits with the loss (``Trainer.evaluate`` with ``compute_metrics``), a float64
model runs torch's ops, the rotary function swapped for the whole modeling module leaves other, unpatched
models of the family working, and ``anyaccel.ops.unpatch`` exists. CPU, portable implementation."""

from __future__ import annotations

import copy
import importlib
from collections.abc import Iterator

import pytest
import torch

import anyaccel.ops
from anyaccel.ops.nn import hf_patch

transformers = pytest.importorskip("transformers")

VOCAB = 96
FAMILIES = ["llama", "mistral", "qwen2", "qwen3"]


def _model(family: str, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    cfg_cls = getattr(transformers, transformers.CONFIG_MAPPING[family].__name__)
    config = cfg_cls(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=32,
                     pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).to(dtype).train()


@pytest.fixture
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (2, 9), generator=gen)
    labels = ids.clone()
    labels[0, :3] = -100
    return ids, labels


@pytest.fixture
def patched_pair(request: pytest.FixtureRequest) -> Iterator[tuple[torch.nn.Module, torch.nn.Module]]:
    """(unpatched, patched copy) of ``request.param``'s family; unpatched again afterwards."""
    base = _model(request.param)
    patched = copy.deepcopy(base)
    report = anyaccel.ops.patch(patched, impl="torch")
    assert report.loss and report.rope, report.summary()
    yield base, patched
    hf_patch.unpatch(patched)


@pytest.mark.parametrize("patched_pair", FAMILIES, indirect=True)
@pytest.mark.parametrize(("bad", "pos"), [(VOCAB, (1, 4)), (VOCAB + 7, (0, 8)), (-5, (1, 2)), (-1, (0, 5))],
                         ids=str)
def test_out_of_range_label_raises_index_error_like_the_model(patched_pair: tuple[torch.nn.Module, torch.nn.Module],
                                                              batch: tuple[torch.Tensor, torch.Tensor], bad: int,
                                                              pos: tuple[int, int]) -> None:
    base, patched = patched_pair
    ids, labels = batch
    labels[pos] = bad
    with pytest.raises(IndexError):
        base(input_ids=ids, labels=labels)
    with pytest.raises(IndexError, match=f"target holds {bad}"):
        patched(input_ids=ids, labels=labels)
    assert all(p.grad is None for p in patched.parameters())


@pytest.mark.parametrize("patched_pair", FAMILIES, indirect=True)
def test_return_dict_false_with_labels_gives_the_loss_first(patched_pair: tuple[torch.nn.Module, torch.nn.Module],
                                                            batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    """(transformers 5's own models fail with ``config.return_dict=False``, so only the call's argument.)"""
    base, patched = patched_pair
    ids, labels = batch
    want = base(input_ids=ids, labels=labels, return_dict=False)
    got = patched(input_ids=ids, labels=labels, return_dict=False)
    assert isinstance(want, tuple) and isinstance(got, tuple)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
    got[0].backward()


@pytest.mark.parametrize("patched_pair", FAMILIES, indirect=True)
def test_eval_mode_returns_logits_with_labels(patched_pair: tuple[torch.nn.Module, torch.nn.Module],
                                              batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Only training may drop the logits (as Liger does); evaluation gets the model's own output."""
    base, patched = patched_pair
    ids, labels = batch
    base.eval()
    patched.eval()
    with torch.no_grad():
        want = base(input_ids=ids, labels=labels)
        got = patched(input_ids=ids, labels=labels)
    assert got.logits is not None
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-5, atol=1e-6)
    patched.train()
    assert patched(input_ids=ids, labels=labels).logits is None  # training: the fused loss, no logits


@pytest.mark.parametrize("patched_pair", ["llama"], indirect=True)
def test_trainer_evaluate_with_compute_metrics(patched_pair: tuple[torch.nn.Module, torch.nn.Module],
                                               batch: tuple[torch.Tensor, torch.Tensor],
                                               tmp_path: pytest.TempPathFactory) -> None:
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate: pip install accelerate")
    base, patched = patched_pair
    ids, labels = batch
    rows = [{"input_ids": i, "labels": lab} for i, lab in zip(ids, labels, strict=True)]

    def metrics(pred: object) -> dict[str, float]:
        logits = torch.as_tensor(pred.predictions)  # type: ignore[attr-defined]
        return {"logit_sum": float(logits.double().sum())}

    results = []
    for model in (base, patched):
        args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=2, report_to=[],
                                              use_cpu=True)
        trainer = transformers.Trainer(model=model, args=args, eval_dataset=rows, compute_metrics=metrics)
        results.append(trainer.evaluate())
    assert results[1]["eval_logit_sum"] == pytest.approx(results[0]["eval_logit_sum"], rel=1e-4)
    assert results[1]["eval_loss"] == pytest.approx(results[0]["eval_loss"], rel=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_float64_model_runs_torch_ops(family: str, batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    ids, labels = batch
    base = _model(family, torch.float64)
    patched = copy.deepcopy(base)
    anyaccel.ops.patch(patched, impl="torch")
    try:
        got = patched(input_ids=ids, labels=labels).loss
        got.backward()
    finally:
        hf_patch.unpatch(patched)
    want = base(input_ids=ids, labels=labels).loss
    want.backward()
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    for (name, p), q in zip(patched.named_parameters(), base.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("family", FAMILIES)
def test_rope_swap_leaves_other_unpatched_models_of_the_family_working(family: str,
                                                                       batch: tuple[torch.Tensor, torch.Tensor]
                                                                       ) -> None:
    ids, labels = batch
    other = _model(family, torch.float64)
    with torch.no_grad():
        want = other(input_ids=ids, labels=labels)
    patched = _model(family)
    modeling = importlib.import_module(type(patched).__module__)
    report = anyaccel.ops.patch(patched, impl="torch")
    try:
        # swapped for the whole modeling module (maybe already, by a model another test left patched)
        assert report.rope
        assert modeling.apply_rotary_pos_emb.__module__ == "anyaccel.ops.nn.hf.equivalence"
        with torch.no_grad():
            got = other(input_ids=ids, labels=labels)
    finally:
        hf_patch.unpatch(patched)
    torch.testing.assert_close(got.logits, want.logits, rtol=0, atol=0)


def test_unpatch_is_where_the_docs_put_it() -> None:
    assert anyaccel.ops.unpatch is hf_patch.unpatch
    assert "unpatch" in anyaccel.ops.__all__ and "unpatch" in dir(anyaccel.ops)
