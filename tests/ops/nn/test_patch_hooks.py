"""``anyaccel.ops.patch`` respects what wraps a module: hooks and pre-hooks on ``lm_head`` and on the MLP's
``act_fn`` (registered before or after ``patch``), an ``nn.Linear`` subclass as ``lm_head``, and accelerate's
offload hooks (``cpu_offload``, ``disk_offload``). Each is either honoured (the patched model computes what
the unpatched one does) or the part is left unpatched and named in the report. ``unpatch`` puts
accelerate's forward wrappers back. Tiny random-weight Llama and Qwen2 models, CPU, portable implementation."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import anyaccel.ops
from anyaccel.ops.nn import hf_patch

transformers = pytest.importorskip("transformers")

VOCAB = 96
FAMILIES = ["llama", "qwen2"]


def _model(family: str) -> torch.nn.Module:
    cfg_cls = getattr(transformers, transformers.CONFIG_MAPPING[family].__name__)
    config = cfg_cls(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=32,
                     pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).train()


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (2, 9), generator=gen)
    labels = ids.clone()
    labels[0, :3] = -100
    return ids, labels


def _loss_and_grads(model: torch.nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    ids, labels = _batch()
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_same(got: tuple[torch.Tensor, dict[str, torch.Tensor]],
                 want: tuple[torch.Tensor, dict[str, torch.Tensor]]) -> None:
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
    assert got[1].keys() == want[1].keys()
    for name, g in got[1].items():
        torch.testing.assert_close(g, want[1][name], rtol=1e-4, atol=1e-6, msg=name)


def _lm_head_hook(m: Any) -> None:
    m.lm_head.register_forward_hook(lambda mod, args, out: out * 1.5)


def _lm_head_pre_hook(m: Any) -> None:
    m.lm_head.register_forward_pre_hook(lambda mod, args: (args[0] * 0.5,))


def _act_fn_hook(m: Any) -> None:
    for layer in m.model.layers:
        layer.mlp.act_fn.register_forward_hook(lambda mod, args, out: out * 0.25)


def _act_fn_pre_hook(m: Any) -> None:
    for layer in m.model.layers:
        layer.mlp.act_fn.register_forward_pre_hook(lambda mod, args: (args[0] + 1.0,))


class _ScaledLinear(torch.nn.Linear):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (torch's parameter name)
        return super().forward(input) * 0.5


def _linear_subclass(m: Any) -> None:
    head = m.lm_head
    new = _ScaledLinear(head.in_features, head.out_features, bias=False)
    with torch.no_grad():
        new.weight.copy_(head.weight)
    m.lm_head = new


#: how the model is changed -> (a text the report's skipped lines must contain when done before patch(),
#: whether the loss stays replaced)
CHANGES: dict[str, tuple[Callable[[torch.nn.Module], None], str, bool]] = {
    "lm_head-hook": (_lm_head_hook, "loss: the fused loss reads lm_head's weight without calling lm_head, and it "
                                    "has forward hooks", False),
    "lm_head-pre-hook": (_lm_head_pre_hook, "has forward hooks or pre-hooks", False),
    "lm_head-subclass": (_linear_subclass, "it is a _ScaledLinear, not a torch.nn.Linear", False),
    "act_fn-hook": (_act_fn_hook, "(SwiGLU MLP): its act_fn has forward hooks", True),
    "act_fn-pre-hook": (_act_fn_pre_hook, "(SwiGLU MLP): its act_fn has forward hooks", True),
}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("when", ["before", "after"])
def test_hooks_and_subclasses_are_honoured(family: str, change: str, when: str) -> None:
    apply, skipped, loss = CHANGES[change]
    base = _model(family)
    patched = copy.deepcopy(base)
    apply(base)
    if when == "before":
        apply(patched)
    report = anyaccel.ops.patch(patched, impl="torch")
    if when == "after":
        apply(patched)
    else:
        assert skipped in report.summary()
        assert report.loss == loss
        assert report.mlp == (0 if "act_fn" in change else 2)
    try:
        got = _loss_and_grads(patched)
    finally:
        hf_patch.unpatch(patched)
    _assert_same(got, _loss_and_grads(base))


def _offload(kind: str, model: torch.nn.Module, tmp: Path) -> None:
    accelerate = pytest.importorskip("accelerate", reason="accelerate is not installed: pip install accelerate")
    if kind == "cpu_offload":
        accelerate.cpu_offload(model, execution_device=torch.device("cpu"))
    elif kind == "disk_offload":
        accelerate.disk_offload(model, offload_dir=str(tmp), execution_device=torch.device("cpu"))
    else:  # a device map with offloaded entries, as from_pretrained(device_map=...) builds
        device_map = {"model.embed_tokens": "cpu", "model.layers.0": "disk", "model.layers.1": "cpu",
                      "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "disk"}
        accelerate.dispatch_model(model, device_map=device_map, offload_dir=str(tmp), main_device="cpu")
    assert any(p.device.type == "meta" for p in model.parameters())


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", ["cpu_offload", "disk_offload", "dispatch_model"])
def test_accelerate_offload_hooks_are_kept(family: str, kind: str, tmp_path: Path) -> None:
    """The offloaded weights are meta tensors outside their module's call: the patched MLP calls down_proj
    (so its hook loads the weight) and the loss stays the model's own (reported); the result equals the
    unpatched offloaded model's, and unpatch() puts accelerate's forward wrappers back."""
    ids, labels = _batch()
    base = _model(family)
    with torch.no_grad():
        want_logits = base.eval()(input_ids=ids).logits
    want_loss = base.train()(input_ids=ids, labels=labels).loss.detach()
    model = copy.deepcopy(base)
    _offload(kind, model, tmp_path)
    wrappers = {name: m.__dict__["forward"] for name, m in model.named_modules() if "forward" in m.__dict__}
    assert wrappers  # accelerate wraps with instance attributes
    report = anyaccel.ops.patch(model, impl="torch")
    try:
        assert not report.loss and "its forward is wrapped (accelerate's offload" in report.summary()
        assert report.mlp == 2, report.summary()
        got_loss = model(input_ids=ids, labels=labels).loss.detach()
        with torch.no_grad():
            got_logits = model.eval()(input_ids=ids).logits
    finally:
        hf_patch.unpatch(model)
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-4, atol=1e-5)
    after = {name: m.__dict__["forward"] for name, m in model.named_modules() if "forward" in m.__dict__}
    assert after.keys() == wrappers.keys() and all(after[k] is wrappers[k] for k in wrappers)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, want_logits, rtol=1e-4, atol=1e-5)
