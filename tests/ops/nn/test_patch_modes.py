"""``anyaccel.ops.patch(model, mode=...)``: one callable form per mode, chosen once.

``mode="compile"`` replaces only the loss and the MLP's recomputation and leaves the norms, SiLU and rotary
embedding to Inductor; a patched tiny Llama then compiles with no more graph breaks than the unpatched one
(graphs counted with a counting ``torch.compile`` backend, public API) and gives the unpatched model's loss and
every parameter's gradient. CPU: the ``aot_eager`` backend (Dynamo, fake tensors and AOTAutograd; Inductor's
C++ compilation of a model takes minutes on the shared 2-core CI machine). Tolerances: float32, the loss within
``rtol=1e-5, atol=1e-6``, gradients within ``rtol=1e-4, atol=1e-6`` (the fused loss and the recomputed
product sum in another order than aten's cross-entropy and linear).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import anyaccel.ops
from anyaccel.ops.nn import hf_patch
from anyaccel.ops.nn.errors import OpInputError

transformers = pytest.importorskip("transformers")


def _llama() -> Any:
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                      max_position_embeddings=32)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[1, :3] = -100
    return ids, labels


def _step(model: torch.nn.Module, run: Callable[..., Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    ids, labels = _batch()
    loss = run(input_ids=ids, labels=labels).loss
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _graphs_and_step(model: torch.nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    """Loss and gradients of Dynamo's graphs run as captured, and how many graphs it made (graph breaks + 1)."""
    graphs: list[torch.fx.GraphModule] = []

    def counting(gm: torch.fx.GraphModule, _example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    torch.compiler.reset()
    loss, grads = _step(model, torch.compile(model, backend=counting))
    return loss, grads, len(graphs)


def _close(got: torch.Tensor, grads: dict[str, torch.Tensor], want: torch.Tensor,
           want_grads: dict[str, torch.Tensor]) -> None:
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert grads.keys() == want_grads.keys()
    for name, g in want_grads.items():
        torch.testing.assert_close(grads[name], g, rtol=1e-4, atol=1e-6, msg=name)


def _patched(mode: str) -> Any:
    model = _llama()
    anyaccel.ops.patch(model, mode=mode)
    return model


def test_an_unknown_mode_is_refused_before_anything_is_patched() -> None:
    model = _llama()
    with pytest.raises(OpInputError, match="mode='fast'.*'eager', 'compile'"):
        anyaccel.ops.patch(model, mode="fast")
    assert not any("forward" in vars(m) for m in model.modules())


def test_compile_mode_replaces_the_loss_and_the_mlp_and_leaves_the_rest_to_inductor() -> None:
    model = _llama()
    try:
        report = anyaccel.ops.patch(model, mode="compile")
        assert (report.mode, report.rms_norm, report.silu, report.mlp, report.rope, report.loss) == \
            ("compile", 0, 0, 1, False, True)
        left = [line for line in report.skipped if "left to Inductor" in line]
        assert len(left) == 3, report.skipped  # RMSNorm, SiLU, apply_rotary_pos_emb
    finally:
        hf_patch.unpatch(model)
    model = _llama()
    try:
        eager = anyaccel.ops.patch(model)
        assert (eager.mode, eager.rms_norm, eager.mlp, eager.rope, eager.loss) == ("eager", 3, 1, True, True)
    finally:
        hf_patch.unpatch(model)  # restores the modeling module's apply_rotary_pos_emb


def test_a_torch_compile_wrapper_is_detected_and_its_module_patched_in_compile_mode() -> None:
    model = _llama()
    report = anyaccel.ops.patch(torch.compile(model))  # not called: nothing is compiled here
    try:
        assert report.mode == "compile" and report.loss and report.mlp == 1
        assert "forward" in vars(model) and "forward" in vars(model.model.layers[0].mlp)
    finally:
        hf_patch.unpatch(model)


def test_a_module_compiled_in_place_is_patched_in_compile_mode() -> None:
    model = _llama()
    model.compile()  # nothing is compiled before the first call
    try:
        report = anyaccel.ops.patch(model)
        assert report.mode == "compile" and report.rms_norm == 0 and report.loss
    finally:
        hf_patch.unpatch(model)


def test_a_patched_tiny_llama_compiles_with_no_more_graph_breaks_and_the_eager_loss_and_gradients() -> None:
    unpatched = _llama()
    want, want_grads = _step(unpatched, unpatched)  # unpatched, eager
    _, _, unpatched_graphs = _graphs_and_step(_llama())
    got, grads, graphs = _graphs_and_step(_patched("compile"))
    assert graphs <= unpatched_graphs, f"{graphs} graphs patched, {unpatched_graphs} unpatched"
    _close(got, grads, want, want_grads)
    patched = _patched("compile")
    torch.compiler.reset()
    got, grads = _step(patched, torch.compile(patched, backend="aot_eager"))  # AOTAutograd's graphs
    _close(got, grads, want, want_grads)
