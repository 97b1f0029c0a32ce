"""The equivalence checks and the markers read from source: a marked layer whose math differs from
anyaccel's op is found out by the probe and reported, not swapped; marked layers anyaccel has no op for are
reported; the static marker reader sees transformers' decorators although they are no-ops here."""

from __future__ import annotations

import pytest
import torch

import anyaccel.ops
from anyaccel.ops.nn import hf_patch
from anyaccel.ops.nn.hf import equivalence, markers

transformers = pytest.importorskip("transformers")
from transformers.integrations import use_kernel_forward_from_hub  # noqa: E402 (after the skip)


@use_kernel_forward_from_hub("RMSNorm")
class BF16OffsetRMSNorm(torch.nn.Module):
    """Gemma-like ``(1 + weight)``, but computed in the input's dtype: no anyaccel recipe gives it."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(n))
        self.eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return h * (1 + self.weight.to(x.dtype))


@use_kernel_forward_from_hub("RMSNorm")
class MeanCentredNorm(torch.nn.Module):
    """Marked RMSNorm, but a LayerNorm without bias in fact."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.variance_epsilon = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float() - x.float().mean(-1, keepdim=True)
        return (self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))
                ).to(x.dtype)


@use_kernel_forward_from_hub("SoftmaxTopKRouter")
class Router(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_markers_are_read_from_the_source_when_the_decorators_are_no_ops() -> None:
    assert not hasattr(BF16OffsetRMSNorm, "kernel_layer_name")  # transformers' stub decorator left no trace
    assert markers.layer_name(BF16OffsetRMSNorm) == "RMSNorm"
    assert markers.layer_name(type("Sub", (MeanCentredNorm,), {})) == "RMSNorm"  # inherited
    assert markers.layer_name(torch.nn.Linear) is None
    from transformers.models.llama import modeling_llama

    attention = modeling_llama.LlamaAttention(transformers.LlamaConfig(hidden_size=32, num_attention_heads=4), 0)
    assert markers.kernelized_functions(attention) == [
        markers.KernelizedFunction("transformers.models.llama.modeling_llama", "apply_rotary_pos_emb",
                                   "rotary_pos_emb")]


def test_a_runtime_marker_wins_and_marks_torch_classes_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``kernels``' ``replace_kernel_forward_from_hub`` does to a class (here to torch's SiLU)."""
    monkeypatch.setattr(torch.nn.SiLU, "kernel_layer_name", "SiLU", raising=False)
    assert markers.layer_name(torch.nn.SiLU) == "SiLU"
    monkeypatch.setattr(MeanCentredNorm, "kernel_layer_name", "Other", raising=False)
    assert markers.layer_name(MeanCentredNorm) == "Other"
    report = anyaccel.ops.patch(torch.nn.Sequential(torch.nn.SiLU()), impl="torch")
    assert report.replaced == {"SiLU (SiLU)": 1}


@pytest.mark.parametrize("cls", [BF16OffsetRMSNorm, MeanCentredNorm])
def test_a_marked_norm_with_other_math_is_reported_not_replaced(cls: type[torch.nn.Module]) -> None:
    recipe, why = equivalence.probe_rms_norm(cls(16))
    assert recipe is None and "math differs" in why
    model = torch.nn.Sequential(cls(16), Router())
    report = anyaccel.ops.patch(model, impl="torch")
    assert report.rms_norm == 0 and report.replaced == {}
    assert any(line.startswith(f"{cls.__name__} (RMSNorm): math differs") for line in report.skipped)
    assert "Router (SoftmaxTopKRouter): anyaccel has no op for this layer" in report.skipped
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_the_probe_tells_the_three_rms_norm_recipes_apart() -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNorm

    got = {c.__name__: equivalence.probe_rms_norm(c(24))[0] for c in (LlamaRMSNorm, Olmo2RMSNorm, Qwen3_5RMSNorm)}
    assert got == {"LlamaRMSNorm": equivalence.NormRecipe("llama", False, "variance_epsilon"),
                   "Olmo2RMSNorm": equivalence.NormRecipe("torch", False, "variance_epsilon"),
                   "Qwen3_5RMSNorm": equivalence.NormRecipe("torch", True, "eps")}


def test_zero_centred_norm_is_patched_and_matches() -> None:
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNorm

    norm = Qwen3_5RMSNorm(24).to(torch.bfloat16)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(3, 24, dtype=torch.bfloat16, requires_grad=True)
    want = norm(x)
    (gw,) = torch.autograd.grad(want.float().sum(), norm.weight)
    report = anyaccel.ops.patch(norm, impl="torch")
    try:
        assert report.replaced == {"Qwen3_5RMSNorm (RMSNormZeroCentered)": 1}
        got = norm(x)
        (gg,) = torch.autograd.grad(got.float().sum(), norm.weight)
    finally:
        hf_patch.unpatch(norm)
    torch.testing.assert_close(got, want, rtol=0.016, atol=1e-2)
    torch.testing.assert_close(gg, gw, rtol=0.016, atol=3 * 0.016)


def test_a_rope_function_with_other_math_is_refused() -> None:
    def interleaved(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                    unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        def rot(x: torch.Tensor) -> torch.Tensor:  # GPT-J pairs
            return torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)

        c, s = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        return q * c + rot(q) * s, k * c + rot(k) * s

    assert "math differs" in equivalence.probe_rope(interleaved, equivalence.rope_function(interleaved, "torch"))
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    assert equivalence.probe_rope(apply_rotary_pos_emb, equivalence.rope_function(apply_rotary_pos_emb, "torch")) == ""


def test_a_partial_rotary_table_runs_the_original_function() -> None:
    calls = []

    def original(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(cos.shape[-1])
        return q, k

    rope = equivalence.rope_function(original, "torch")
    q = torch.randn(1, 2, 3, 8)
    rope(q, q, torch.randn(1, 3, 4), torch.randn(1, 3, 4))
    assert calls == [4]


def test_the_mlp_and_loss_are_replaced_only_for_llamas_forward() -> None:
    from transformers.models.granite.modeling_granite import GraniteForCausalLM, GraniteMLP
    from transformers.models.llama.modeling_llama import LlamaForCausalLM, LlamaMLP
    from transformers.models.phi3.modeling_phi3 import Phi3MLP

    assert equivalence.same_forward(GraniteMLP, LlamaMLP) and not equivalence.same_forward(Phi3MLP, LlamaMLP)
    assert not equivalence.same_forward(GraniteForCausalLM, LlamaForCausalLM)


def test_the_probe_finds_each_functions_table_layout() -> None:
    """Llama's function takes a full ``cat(f, f)`` table, GPT-OSS's one angle per pair (half as wide); the
    replacement serves each in its layout and sends the other to the original."""
    from transformers.models.gpt_oss.modeling_gpt_oss import apply_rotary_pos_emb as gpt_oss
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama

    assert equivalence.rope_layouts(llama)[0] == frozenset({"full"})
    assert equivalence.rope_layouts(gpt_oss)[0] == frozenset({"pairs"})
    rope = equivalence.rope_function(gpt_oss, "torch", frozenset({"pairs"}))
    q, k = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)
    freqs = torch.randn(1, 5, 4)
    for g, w in zip(rope(q, k, freqs.cos(), freqs.sin()), gpt_oss(q, k, freqs.cos(), freqs.sin()), strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_the_report_is_logged_once_and_patching_twice_is_harmless(caplog: pytest.LogCaptureFixture,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    monkeypatch.setattr(hf_patch, "_LOGGED", set())
    model = torch.nn.Sequential(LlamaRMSNorm(8), LlamaRMSNorm(8))
    x = torch.randn(2, 8)
    want = model(x)
    with caplog.at_level("INFO", logger="anyaccel.ops.nn.hf_patch"):
        first = anyaccel.ops.patch(model, impl="torch")
        hf_patch.unpatch(model)
        again = anyaccel.ops.patch(model, impl="torch")
        twice = anyaccel.ops.patch(model, impl="torch")
    try:
        assert first.replaced == again.replaced == {"LlamaRMSNorm (RMSNorm)": 2} and twice.rms_norm == 0
        torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-6)
    finally:
        hf_patch.unpatch(model)
    assert [r.getMessage() for r in caplog.records].count(first.summary()) == 1
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_importing_the_patch_and_kernels_modules_imports_neither_transformers_nor_kernels() -> None:
    import json
    import subprocess
    import sys

    probe = ("import json, sys; import anyaccel.ops.nn.hf_patch, anyaccel.ops.nn.hf.kernels_hub; "
             "print(json.dumps(sorted(m for m in ('transformers', 'kernels') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
