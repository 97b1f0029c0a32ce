"""``anyaccel.ops.patch(model)``: anyaccel's model ops in a Hugging Face Llama-family model, in place.

What is replaced (each optional), for the architectures of `SUPPORTED`:

- every ``<Arch>RMSNorm`` module's forward by [`rms_norm`][anyaccel.ops.nn.functional.rms_norm] with
  ``casting="llama"`` (the module's rounding and result dtype);
- every ``<Arch>MLP`` module's forward, when its activation is SiLU, by
  ``down_proj(swiglu(gate_proj(x), up_proj(x)))``;
- the modeling module's ``apply_rotary_pos_emb`` by [`rope_qk`][anyaccel.ops.nn.functional.rope_qk] (a module
  global that the attention layers call: like Liger-Kernel's patch, this swap applies to every model of
  that architecture in the process until the last patched one is unpatched; the math is the same);
- the ``<Arch>ForCausalLM`` model's forward, when called with ``labels``, by one that computes the loss
  with [`fused_linear_cross_entropy`][anyaccel.ops.nn.functional.fused_linear_cross_entropy] from the last hidden
  states, never
  materialising the logits (the output's ``logits`` is then None, as with Liger's patch); Hugging Face's
  label shift, ``ignore_index=-100`` and ``num_items_in_batch`` are kept. Without labels the original
  forward runs.

The model's parameters, state dict and module tree are unchanged; [`unpatch`][anyaccel.ops.nn.hf_patch.unpatch] restores
the forwards.
Sources: Liger-Kernel's ``apply_liger_kernel_to_llama`` (``liger_kernel/transformers/monkey_patch.py``)
and transformers' ``LlamaForCausalLM.forward`` / ``ForCausalLMLoss`` (5.x).
"""

from __future__ import annotations

import importlib
import threading
import types
from dataclasses import dataclass, field
from typing import Any

import torch

from anyaccel.ops.nn import functional as F
from anyaccel.ops.nn.errors import UnsupportedOpError

#: ``config.model_type`` -> (modeling module, class-name prefix).
SUPPORTED: dict[str, tuple[str, str]] = {
    "llama": ("transformers.models.llama.modeling_llama", "Llama"),
    "mistral": ("transformers.models.mistral.modeling_mistral", "Mistral"),
    "qwen2": ("transformers.models.qwen2.modeling_qwen2", "Qwen2"),
    "qwen3": ("transformers.models.qwen3.modeling_qwen3", "Qwen3"),
}
_ORIG = "_anyaccel_original_forward"
_LOSS_KWARGS = ("num_items_in_batch", "shift_labels", "ignore_index")
_ROPE_LOCK = threading.Lock()
_ROPE_SWAPS: dict[str, tuple[Any, int]] = {}  # modeling module -> (original function, patched models)


@dataclass
class PatchReport:
    """What [`patch`][anyaccel.ops.nn.hf_patch.patch] replaced.

    Attributes:
        model_type: the architecture.
        rms_norm, mlp: modules whose forward was replaced.
        rope: whether the modeling module's ``apply_rotary_pos_emb`` is anyaccel's.
        loss: whether the causal-LM forward computes the fused linear cross-entropy.
        skipped: what was left as it was, and why.
    """

    model_type: str
    rms_norm: int = 0
    mlp: int = 0
    rope: bool = False
    loss: bool = False
    skipped: list[str] = field(default_factory=list)


def _arch(model: torch.nn.Module) -> tuple[str, str, str]:
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED:
        raise UnsupportedOpError(f"patch: model_type={model_type!r} is not supported; accepted: "
                                 f"{', '.join(sorted(SUPPORTED))} (Hugging Face Llama-family models)")
    module, prefix = SUPPORTED[str(model_type)]
    return str(model_type), module, prefix


def _set_forward(module: torch.nn.Module, forward: Any) -> None:
    if not hasattr(module, _ORIG):
        setattr(module, _ORIG, module.forward)
    setattr(module, "forward", types.MethodType(forward, module))  # noqa: B010 (an instance attribute)


def patch(model: torch.nn.Module, *, rms_norm: bool = True, swiglu: bool = True, rope: bool = True,
          loss: bool = True, loss_accum_dtype: torch.dtype = torch.float32, impl: str | None = None
          ) -> PatchReport:
    """Replace the RMSNorm, SwiGLU MLP, rotary embedding and loss of a Llama-family model in place.

    Args:
        model: a ``transformers`` model of a `SUPPORTED` architecture (``LlamaForCausalLM``,
            ``LlamaModel``, ...).
        rms_norm: replace the RMSNorm modules' forward.
        swiglu: replace the SwiGLU MLPs' forward.
        rope: replace the rotary-embedding function of the model's module.
        loss: replace the causal-LM loss with the fused linear cross-entropy.
        loss_accum_dtype: that loss's ``accum_dtype`` (see
            [`fused_linear_cross_entropy`][anyaccel.ops.nn.functional.fused_linear_cross_entropy]): ``torch.float32``
            (default) or the
            lm_head weight's dtype (Liger-Kernel's choice), which allocates no fp32 buffer of twice the lm_head
            weight's size while the loss runs (about a tenth off a Llama 3.2 1B-shaped training step's peak memory
            at sequence 4096; ``docs/nn_ops.md``).
        impl: force an implementation for every op (``"triton"``, ``"torch"``, ``"triton_interpreter"``);
            else each family's choice for the inputs' device.

    Returns:
        A [`PatchReport`][anyaccel.ops.nn.hf_patch.PatchReport].

    Raises:
        UnsupportedOpError: the model's ``config.model_type`` is not supported.

    Side effects: sets instance ``forward`` attributes on the model's modules; swaps the modeling
    module's ``apply_rotary_pos_emb`` (process-wide, see the module docstring). Patching twice is harmless.
    """
    model_type, module_name, prefix = _arch(model)
    report = PatchReport(model_type)
    for m in model.modules():
        name = type(m).__name__
        if rms_norm and name == f"{prefix}RMSNorm" and not hasattr(m, _ORIG):
            _set_forward(m, _rms_norm_forward(impl))
            report.rms_norm += 1
        elif swiglu and name == f"{prefix}MLP" and not hasattr(m, _ORIG):
            act = str(getattr(getattr(m, "config", None), "hidden_act", "silu"))
            if act in ("silu", "swish"):
                _set_forward(m, _mlp_forward(impl))
                report.mlp += 1
            else:
                report.skipped.append(f"{name}: activation {act!r} is not SiLU")
    if rope and not getattr(model, "_anyaccel_rope", False):
        _swap_rope(module_name, impl)
        setattr(model, "_anyaccel_rope", True)  # noqa: B010 (a marker on the instance)
    report.rope = bool(getattr(model, "_anyaccel_rope", False))
    if loss and type(model).__name__.endswith("ForCausalLM") and hasattr(model, "lm_head"):
        if not hasattr(model, _ORIG):
            _set_forward(model, _causal_lm_forward(impl, loss_accum_dtype))
        report.loss = True
    elif loss:
        report.skipped.append(f"loss: {type(model).__name__} is not a *ForCausalLM with an lm_head")
    return report


def unpatch(model: torch.nn.Module) -> None:
    """Restore every forward [`patch`][anyaccel.ops.nn.hf_patch.patch] replaced in ``model`` (and the rotary function
    once no patched
    model of the architecture is left)."""
    for m in model.modules():
        if hasattr(m, _ORIG):
            del m.forward
            delattr(m, _ORIG)
    if getattr(model, "_anyaccel_rope", False):
        _restore_rope(_arch(model)[1])
        del model._anyaccel_rope


def _rms_norm_forward(impl: str | None) -> Any:
    def forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(hidden_states, self.weight, self.variance_epsilon, casting="llama", impl=impl)

    return forward


def _mlp_forward(impl: str | None) -> Any:
    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.swiglu(self.gate_proj(x), self.up_proj(x), impl=impl))

    return forward


def _rope_function(impl: str | None) -> Any:
    def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                             unsqueeze_dim: int = 1, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        return F.rope_qk(q, k, cos, sin, impl=impl)

    return apply_rotary_pos_emb


def _swap_rope(module_name: str, impl: str | None) -> None:
    mod: Any = importlib.import_module(module_name)
    with _ROPE_LOCK:
        original, count = _ROPE_SWAPS.get(module_name, (mod.apply_rotary_pos_emb, 0))
        if count == 0:
            mod.apply_rotary_pos_emb = _rope_function(impl)
        _ROPE_SWAPS[module_name] = (original, count + 1)


def _restore_rope(module_name: str) -> None:
    with _ROPE_LOCK:
        if module_name not in _ROPE_SWAPS:
            return
        original, count = _ROPE_SWAPS[module_name]
        if count <= 1:
            mod: Any = importlib.import_module(module_name)
            mod.apply_rotary_pos_emb = original
            del _ROPE_SWAPS[module_name]
        else:
            _ROPE_SWAPS[module_name] = (original, count - 1)


def _causal_lm_forward(impl: str | None, accum_dtype: torch.dtype) -> Any:
    def forward(self: Any, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, past_key_values: Any = None,
                inputs_embeds: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                use_cache: bool | None = None, logits_to_keep: int | torch.Tensor = 0, **kwargs: Any) -> Any:
        original = getattr(self, _ORIG)
        if labels is None:
            return original(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            past_key_values=past_key_values, inputs_embeds=inputs_embeds, use_cache=use_cache,
                            logits_to_keep=logits_to_keep, **kwargs)
        from transformers.modeling_outputs import CausalLMOutputWithPast

        loss_kwargs = {k: kwargs.pop(k) for k in _LOSS_KWARGS if k in kwargs}
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=past_key_values, inputs_embeds=inputs_embeds, use_cache=use_cache,
                             **kwargs)
        hidden = outputs.last_hidden_state
        ignore_index = int(loss_kwargs.get("ignore_index", -100))
        shift = loss_kwargs.get("shift_labels")
        if shift is None:
            shift = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
        shift = shift.to(hidden.device)
        items = loss_kwargs.get("num_items_in_batch")
        head = self.lm_head
        loss = F.fused_linear_cross_entropy(hidden, head.weight, shift, getattr(head, "bias", None),
                                            ignore_index=ignore_index, reduction="sum" if items is not None
                                            else "mean", accum_dtype=accum_dtype, impl=impl)
        if items is not None:
            loss = loss / (items.to(loss.device) if isinstance(items, torch.Tensor) else items)
        result: Any = CausalLMOutputWithPast
        return result(loss=loss, logits=None, past_key_values=outputs.past_key_values,
                      hidden_states=outputs.hidden_states, attentions=outputs.attentions)

    return forward
