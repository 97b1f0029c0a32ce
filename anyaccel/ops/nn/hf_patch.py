"""``anyaccel.ops.patch(model)``: anyaccel's model ops in a Hugging Face model, in place, found through
transformers' kernel-layer markers (no per-family table).

What is replaced (each optional), in any model whose classes carry the markers (`anyaccel.ops.nn.hf.markers`):

- every module whose class is marked ``"RMSNorm"`` or ``"RMSNormZeroCentered"`` (145 classes in transformers
  5.24), when an equivalence probe (`anyaccel.ops.nn.hf.equivalence`) finds the
  [`rms_norm`][anyaccel.ops.nn.functional.rms_norm] recipe that computes what its forward computes: Llama's
  rounding (``casting="llama"``), one rounding (``casting="torch"``: OLMo-2's ``(weight * h).to(dtype)``) or
  a ``1 + weight`` weight (zero-centred);
- every module marked ``"SiLU"`` (transformers' ``SiLUActivation``) by [`silu`][anyaccel.ops.nn.functional.silu],
  when the probe agrees;
- every module whose ``forward`` is Llama's MLP (``down_proj(act_fn(gate_proj(x)) * up_proj(x))``, compared
  as code) with a SiLU activation, by ``down_proj(swiglu(gate_proj(x), up_proj(x)))``;
- every function marked ``"rotary_pos_emb"`` that a module attaches with ``@use_kernelized_func``
  (``apply_rotary_pos_emb``), when the probe agrees, by [`rope_qk`][anyaccel.ops.nn.functional.rope_qk]. The
  function is a module global the attention layers call, so (like Liger-Kernel's patch) the swap applies to
  every model of that modeling module in the process until the last patched one is unpatched; calls with a
  table of a layout the probe did not accept (a partial rotary one, narrower than the head) run the
  original function;
- the ``*ForCausalLM`` model's forward, when it is Llama's (compared as code: a family that scales, caps or
  adds to the logits or the loss keeps its own) and called with ``labels`` in training mode, by one computing
  the loss with
  [`fused_linear_cross_entropy`][anyaccel.ops.nn.functional.fused_linear_cross_entropy] from the last hidden states,
  never
  materialising the logits (the output's ``logits`` is then None, as with Liger's patch); Hugging Face's
  label shift, ``ignore_index=-100``, ``num_items_in_batch`` and ``return_dict=False`` are kept, and a label
  outside the vocabulary fails as the model's own loss does (`IndexError` on the CPU, a device-side
  assertion on a GPU). Without labels, in evaluation
  (``Trainer.evaluate`` with ``compute_metrics`` needs the logits) or with an ``lm_head`` hooked or wrapped
  after the patch, the original forward runs;
- the attention implementation, ``"sdpa"`` -> ``"anyaccel_sdpa"`` (`anyaccel.ops.nn.hf.causal_mask`): the same
  SDPA attention, whose plain causal mask is left to SDPA's ``is_causal`` also while the model is traced
  (``torch.compile``, CUDA graphs), where transformers materialises it and SDPA then computes every block of
  the square, masked.

The model's behaviour is kept where a replacement would change it, each checked at patch time (and reported
in ``skipped``) and again at each call (for what was added later):

- **dtypes**: a patched forward given a dtype anyaccel's ops do not take (float64) runs the original one;
  so does the swapped rotary function, which other, unpatched models of the modeling module call too;
- **hooks and subclasses**: the fused loss reads ``lm_head.weight`` without calling ``lm_head``, so it is
  left out when ``lm_head`` has forward hooks or pre-hooks, is a subclass of ``nn.Linear``, or is wrapped; an
  MLP whose ``act_fn`` has hooks keeps its forward; a hooked or non-``Linear`` ``down_proj`` is called as is;
- **accelerate's hooks** (``cpu_offload``, ``disk_offload``, ``dispatch_model``/``device_map``): accelerate
  wraps a module's ``forward`` to load its offloaded weights (meta tensors outside the call) and calls the
  module's own forward from ``_old_forward``; patch replaces ``_old_forward``, so the wrapper still runs around
  anyaccel's forward, and [`unpatch`][anyaccel.ops.nn.hf_patch.unpatch] puts the wrapper's target back. A
  weight read without its module's call (``down_proj`` in the fused MLP, ``lm_head`` in the fused loss) is
  not read for a wrapped module: that module is called, or the loss left as it is (reported).

**One callable form per mode, chosen once** (``mode=``, as Hugging Face kernels' ``kernelize(model,
mode=...)``): ``"eager"`` replaces all of the above with the eager forms (`anyaccel.ops.nn.implementations`);
``"compile"`` (for ``torch.compile``, CUDA graphs included) replaces only what Inductor cannot do itself: the
loss (the fused linear cross-entropy, as torch ops Inductor traces) and the MLP's recomputation of its
product (`anyaccel.ops.nn.families.swiglu.linear.compiled`, whose element-wise math Inductor fuses); the
norms, SiLU and rotary embedding are left to Inductor, which fuses them with their neighbours (a custom op
would stop those fusions). Without ``mode`` it is detected once, here: ``"compile"`` for a
``torch.compile(model)`` wrapper (its module is patched) or a module compiled in place (``model.compile()``),
else ``"eager"``. Patch before compiling with ``mode="compile"``.

A marked layer anyaccel has no op for, or whose math differs from anyaccel's, is left as it is and named in
the report with the reason; nothing is an error. The model's parameters, state dict and module tree are
unchanged; [`unpatch`][anyaccel.ops.nn.hf_patch.unpatch] restores the forwards and functions.
Sources: transformers' ``integrations/hub_kernels.py`` (the markers), Liger-Kernel's
``apply_liger_kernel_to_llama`` (``liger_kernel/transformers/monkey_patch.py``) and transformers'
``LlamaForCausalLM.forward`` / ``ForCausalLMLoss`` (5.x).
"""

from __future__ import annotations

import importlib
import logging
import threading
import types
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from anyaccel._compat import dynamo, modules
from anyaccel.ops.nn import functional as F
from anyaccel.ops.nn import validation as v
from anyaccel.ops.nn.hf import causal_mask as cmask
from anyaccel.ops.nn.hf import equivalence, markers
from anyaccel.ops.nn.implementations import check_mode

#: marked layer names replaced by anyaccel's RMSNorm (their math is checked by the probe)
NORM_LAYERS = frozenset({"RMSNorm", "RMSNormZeroCentered"})
#: the marked function name replaced by anyaccel's rope_qk
ROPE_LAYER = "rotary_pos_emb"
_ORIG = "_anyaccel_original_forward"
#: ``(attribute, was an instance attribute)``: where the patched forward sits, and whether `unpatch` puts the
#: original back (an instance attribute such as accelerate's wrapper) or deletes it (the class's shows again)
_SLOT = "_anyaccel_forward_slot"
#: accelerate's ``add_hook_to_module`` sets ``module.forward`` to a wrapper that runs the hook's
#: ``pre_forward`` (loading offloaded weights, moving inputs), then ``module._old_forward``, then
#: ``post_forward`` (offloading again); patching ``_old_forward`` keeps that wrapper around anyaccel's forward
_ACCELERATE_HOOK, _ACCELERATE_INNER = "_hf_hook", "_old_forward"
_ROPE_ATTR = "_anyaccel_rope"
_LOSS_KWARGS = ("num_items_in_batch", "shift_labels", "ignore_index")
_ROPE_LOCK = threading.Lock()
_ROPE_SWAPS: dict[tuple[str, str], tuple[Any, int]] = {}  # (module, global) -> (original, patched models)
_LOGGED: set[str] = set()
#: why a layer is not replaced under ``mode="compile"``
_LEFT_TO_INDUCTOR = "left to Inductor (mode='compile': it fuses this op with its neighbours)"
logger = logging.getLogger(__name__)


@dataclass
class PatchReport:
    """What [`patch`][anyaccel.ops.nn.hf_patch.patch] replaced and what it left.

    Attributes:
        model_type: ``config.model_type`` (the class name when there is none).
        mode: the callable form chosen, ``"eager"`` or ``"compile"``.
        rms_norm: RMSNorm-like modules whose forward was replaced.
        mlp: SwiGLU MLP modules whose forward was replaced.
        silu: SiLU activation modules whose forward was replaced.
        rope: whether some modeling module's ``apply_rotary_pos_emb`` is anyaccel's for this model.
        loss: whether the causal-LM forward computes the fused linear cross-entropy.
        causal_mask: whether the model's attention is ``"anyaccel_sdpa"``
            (`anyaccel.ops.nn.hf.causal_mask`).
        replaced: ``"Class (layer)"`` -> how many modules (or ``"module.function (layer)"`` -> 1).
        skipped: what was left as it was, one line each with the reason.
    """

    model_type: str
    mode: str = "eager"
    rms_norm: int = 0
    mlp: int = 0
    silu: int = 0
    rope: bool = False
    loss: bool = False
    causal_mask: bool = False
    replaced: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: what was replaced and what was not (and why)."""
        done = ", ".join(f"{k} x{n}" for k, n in self.replaced.items()) or "nothing"
        left = "; ".join(self.skipped) or "nothing"
        return f"anyaccel.ops.patch({self.model_type}, mode={self.mode!r}): replaced {done}; not replaced: {left}"


def _forward_slot(module: torch.nn.Module) -> str:
    """The attribute holding the forward that the module's call runs: accelerate's inner forward where
    accelerate's hooks wrap the module, else ``forward``."""
    if hasattr(module, _ACCELERATE_HOOK) and _ACCELERATE_INNER in vars(module):
        return _ACCELERATE_INNER
    return "forward"


def _set_forward(module: torch.nn.Module, forward: Any) -> None:
    slot = getattr(module, _SLOT, (_forward_slot(module), False))[0]
    if not hasattr(module, _ORIG):
        setattr(module, _ORIG, getattr(module, slot))
        setattr(module, _SLOT, (slot, slot in vars(module)))
    setattr(module, slot, types.MethodType(forward, module))


def _restore_forward(module: torch.nn.Module) -> None:
    """Undo `_set_forward`: the instance attribute it replaced is put back (accelerate's wrapper, a user's),
    else the instance attribute is deleted."""
    slot, was_instance = getattr(module, _SLOT, ("forward", False))
    if was_instance:
        setattr(module, slot, getattr(module, _ORIG))
    elif slot in vars(module):
        delattr(module, slot)
    delattr(module, _ORIG)
    if hasattr(module, _SLOT):
        delattr(module, _SLOT)


def _calls_through(module: torch.nn.Module) -> str:
    """Why ``module`` must be called rather than its weight read ("" when its weight may be read): a subclass
    or wrapper may change what it computes, a hook must run, and accelerate's offload hooks load the weight
    only during the call (it is a meta tensor outside it)."""
    if type(module) is not torch.nn.Linear:
        return f"it is a {type(module).__name__}, not a torch.nn.Linear (a subclass may compute something else)"
    if hasattr(module, _ACCELERATE_HOOK) or "forward" in vars(module):
        return ("its forward is wrapped (accelerate's offload or device-map hooks load its weight only during "
                "its call)")
    if modules.has_forward_hooks(module):
        return "it has forward hooks or pre-hooks, which would not run"
    return ""


def _accepted(*tensors: torch.Tensor | None) -> bool:
    """Whether anyaccel's ops compute on these dtypes (float32/bfloat16/float16); else the patched forwards
    run the original one (float64, for instance, is torch's)."""
    return all(t is None or t.dtype in v.float_dtypes() for t in tensors)


def _skip(report: PatchReport, line: str) -> None:
    if line not in report.skipped:
        report.skipped.append(line)


def patch(model: torch.nn.Module, *, rms_norm: bool = True, swiglu: bool = True, rope: bool = True,
          loss: bool = True, silu: bool = True, causal_mask: bool = True, loss_accum_dtype: torch.dtype = torch.float32,
          impl: str | None = None, mode: str | None = None) -> PatchReport:
    """Replace the marked layers, the SwiGLU MLPs, the rotary embedding and the loss of a Hugging Face model.

    Args:
        model: any ``torch.nn.Module``; transformers models of the families carrying the kernel-layer markers
            (Llama, Mistral, Qwen2/3, OLMo-2, Granite, SmolLM3, Phi-3 ...) get what their markers allow.
        rms_norm: replace the RMSNorm-like modules' forward.
        swiglu: replace the SwiGLU MLPs' forward.
        rope: replace the marked rotary-embedding functions of the model's modeling modules.
        loss: replace the causal-LM loss with the fused linear cross-entropy.
        silu: replace the SiLU activation modules' forward (those not inside a replaced MLP run).
        causal_mask: switch an ``"sdpa"`` model to ``"anyaccel_sdpa"``, which keeps SDPA's causal kernels when
            the model is compiled or captured (see `anyaccel.ops.nn.hf.causal_mask`).
        loss_accum_dtype: that loss's ``accum_dtype`` (see
            [`fused_linear_cross_entropy`][anyaccel.ops.nn.functional.fused_linear_cross_entropy]): ``torch.float32``
            (default) or the
            lm_head weight's dtype (Liger-Kernel's choice), which allocates no fp32 buffer of twice the lm_head
            weight's size while the loss runs (about a tenth off a Llama 3.2 1B-shaped training step's peak memory
            at sequence 4096; ``docs/nn_ops.md``).
        impl: force an implementation for every op (``"triton"``, ``"torch"``, ``"triton_interpreter"``);
            else each family's choice for the inputs' device.
        mode: ``"eager"``, ``"compile"`` or None (detected: see the module docstring). Under ``"compile"`` the
            norms, SiLU and rotary embedding are not replaced (reported in ``skipped``). A module patched
            already keeps its form: `unpatch` first to change the mode.

    Returns:
        A [`PatchReport`][anyaccel.ops.nn.hf_patch.PatchReport]; its
        [`summary`][anyaccel.ops.nn.hf_patch.PatchReport.summary] is also logged (INFO, logger
        ``anyaccel.ops.nn.hf_patch``) once per distinct line.

    Raises:
        OpInputError: ``mode`` is not ``"eager"``, ``"compile"`` or None. Nothing for an unknown model: what
            cannot be replaced is reported in ``skipped``. At call time the patched model raises what the model
            does (``IndexError`` for a label outside the vocabulary).

    Side effects: sets instance ``forward`` attributes on the model's modules; swaps modeling modules'
    ``apply_rotary_pos_emb`` (process-wide, see the module docstring); registers ``"anyaccel_sdpa"`` with
    transformers' attention interfaces and sets the model's attention implementation; runs the equivalence probes (small
    CPU or device computations on copies of one module per class). Patching twice is harmless.
    """
    check_mode(mode)
    model, compiled = dynamo.compiled_module(model)
    mode = mode or ("compile" if compiled else "eager")
    config = getattr(model, "config", None)
    report = PatchReport(str(getattr(config, "model_type", None) or type(model).__name__), mode)
    eager = mode == "eager"
    norm_recipes: dict[tuple[type, bool], tuple[equivalence.NormRecipe | None, str]] = {}
    silu_checks: dict[type, str] = {}
    functions: dict[tuple[str, str], markers.KernelizedFunction] = {}
    counts: Counter[str] = Counter()
    for m in model.modules():
        cls = type(m)
        layer = markers.layer_name(cls)
        if layer in NORM_LAYERS | {"SiLU"} and not eager and not hasattr(m, _ORIG):
            _skip(report, f"{cls.__name__} ({layer}): {_LEFT_TO_INDUCTOR}")
        elif layer in NORM_LAYERS and rms_norm and not hasattr(m, _ORIG):
            key = (cls, isinstance(getattr(m, "weight", None), torch.Tensor))
            if key not in norm_recipes:
                norm_recipes[key] = equivalence.probe_rms_norm(m)
            recipe, why = norm_recipes[key]
            if recipe is not None:
                _set_forward(m, _rms_norm_forward(recipe, impl, mode))
                report.rms_norm += 1
                counts[f"{cls.__name__} ({layer})"] += 1
            else:
                _skip(report, f"{cls.__name__} ({layer}): {why}")
        elif layer == "SiLU" and silu and not hasattr(m, _ORIG):
            if cls not in silu_checks:
                silu_checks[cls] = equivalence.probe_silu(m)
            if not silu_checks[cls]:
                _set_forward(m, _silu_forward(impl, mode))
                report.silu += 1
                counts[f"{cls.__name__} ({layer})"] += 1
            else:
                _skip(report, f"{cls.__name__} ({layer}): {silu_checks[cls]}")
        elif layer is not None and layer not in NORM_LAYERS and layer != "SiLU":
            _skip(report, f"{cls.__name__} ({layer}): anyaccel has no op for this layer")
        if swiglu and not hasattr(m, _ORIG) and _is_llama_mlp(m):
            why = _mlp_hooked(m)
            if why:
                _skip(report, f"{cls.__name__} (SwiGLU MLP): {why}")
            else:
                _set_forward(m, _mlp_forward(impl, mode))
                report.mlp += 1
                counts[f"{cls.__name__} (SwiGLU MLP)"] += 1
        for fn in markers.kernelized_functions(m):
            functions.setdefault((fn.module, fn.name), fn)
    if rope and not eager:
        for fn in functions.values():
            _skip(report, f"{fn.module.rsplit('.', 1)[-1]}.{fn.name} ({fn.layer}): {_LEFT_TO_INDUCTOR}")
    elif rope:
        _patch_functions(model, functions.values(), report, counts, impl)
    report.rope = bool(getattr(model, _ROPE_ATTR, ()))
    if loss:
        why = _loss_applies(model)
        if not why:
            if not hasattr(model, _ORIG):
                _set_forward(model, _causal_lm_forward(impl, loss_accum_dtype, mode))
            report.loss = True
            counts[f"{type(model).__name__} (ForCausalLMLoss)"] += 1
        else:
            _skip(report, f"loss: {why}")
    if causal_mask:
        why = cmask.applies(model)
        if not why:
            cmask.apply(model)
            report.causal_mask = True
            counts[f"{type(model).__name__} (attention: {cmask.ATTENTION_NAME})"] += 1
        else:
            _skip(report, f"attention mask: {why}")
    report.replaced = dict(counts)
    line = report.summary()
    if line not in _LOGGED:
        _LOGGED.add(line)
        logger.info("%s", line)
    return report


def _patch_functions(model: torch.nn.Module, functions: Any, report: PatchReport, counts: Counter[str],
                     impl: str | None) -> None:
    swapped: list[tuple[str, str]] = list(getattr(model, _ROPE_ATTR, ()))
    for fn in functions:
        key = (fn.module, fn.name)
        label = f"{fn.module.rsplit('.', 1)[-1]}.{fn.name} ({fn.layer})"
        if fn.layer != ROPE_LAYER:
            _skip(report, f"{label}: anyaccel has no op for this function")
            continue
        if key in swapped:
            counts[label] += 1
            continue
        why = _swap_rope(fn.module, fn.name, impl)
        if why:
            _skip(report, f"{label}: {why}")
        else:
            swapped.append(key)
            counts[label] += 1
    if swapped:
        setattr(model, _ROPE_ATTR, swapped)


def unpatch(model: torch.nn.Module) -> None:
    """Restore every forward [`patch`][anyaccel.ops.nn.hf_patch.patch] replaced in ``model``, and each rotary function
    once no patched
    model of its modeling module is left. Side effects: deletes the instance ``forward`` attributes patch set,
    or puts back the instance attribute patch replaced (accelerate's hook wrapper keeps wrapping the module's
    own forward)."""
    for m in model.modules():
        if hasattr(m, _ORIG):
            _restore_forward(m)
    for module_name, name in getattr(model, _ROPE_ATTR, ()):
        _restore_rope(module_name, name)
    if hasattr(model, _ROPE_ATTR):
        delattr(model, _ROPE_ATTR)
    cmask.restore(model)


def _is_llama_mlp(m: torch.nn.Module) -> bool:
    if not all(isinstance(getattr(m, n, None), torch.nn.Module) for n in ("gate_proj", "up_proj", "down_proj")):
        return False
    act = getattr(m, "act_fn", None)
    if not (isinstance(act, torch.nn.SiLU) or (act is not None and markers.layer_name(type(act)) == "SiLU")):
        return False
    llama = _llama()
    return llama is not None and equivalence.same_forward(type(m), llama.LlamaMLP)


def _mlp_hooked(m: torch.nn.Module) -> str:
    """Why the MLP is left as it is ("" when it may be replaced): its ``act_fn`` has hooks, which the fused
    SwiGLU (never calling ``act_fn``) would skip. Hooks registered after `patch` are seen at each call, where
    the original forward then runs."""
    act = m.act_fn
    if isinstance(act, torch.nn.Module) and modules.has_forward_hooks(act):
        return "its act_fn has forward hooks or pre-hooks, which the fused SwiGLU would not run"
    return ""


def _loss_applies(model: torch.nn.Module) -> str:
    """Why the fused loss may not replace ``model``'s ("" when it may)."""
    name = type(model).__name__
    head = getattr(model, "lm_head", None)
    if not name.endswith("ForCausalLM") or not isinstance(head, torch.nn.Linear):
        return f"{name} is not a *ForCausalLM with a Linear lm_head"
    why = _calls_through(head)
    if why:
        return f"the fused loss reads lm_head's weight without calling lm_head, and {why}"
    llama = _llama()
    if llama is None or not equivalence.same_forward(type(model), llama.LlamaForCausalLM):
        return f"{name}.forward is not Llama's (it may scale, cap or add to the logits or the loss)"
    loss_function = getattr(model, "loss_function", None)
    if getattr(loss_function, "__name__", "") != "ForCausalLMLoss":
        return f"{name}.loss_function is {getattr(loss_function, '__name__', loss_function)!r}, not ForCausalLMLoss"
    return ""


def _llama() -> Any:
    try:
        return importlib.import_module("transformers.models.llama.modeling_llama")
    except ImportError:
        return None


def _rms_norm_forward(recipe: equivalence.NormRecipe, impl: str | None, mode: str) -> Any:
    def forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        if not _accepted(hidden_states, getattr(self, "weight", None)):
            return getattr(self, _ORIG)(hidden_states)
        return recipe(self, hidden_states, impl, mode)

    return forward


def _silu_forward(impl: str | None, mode: str) -> Any:
    def forward(self: Any, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (transformers' parameter name)
        if not _accepted(input):
            return getattr(self, _ORIG)(input)
        return F.silu(input, impl=impl, mode=mode)

    return forward


def _mlp_forward(impl: str | None, mode: str) -> Any:
    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        if not _accepted(x) or _mlp_hooked(self):
            return getattr(self, _ORIG)(x)
        gate, up, down = self.gate_proj(x), self.up_proj(x), self.down_proj
        if not _calls_through(down) and gate.shape == up.shape and gate.dtype == up.dtype == down.weight.dtype:
            # the product silu(gate) * up is recomputed in the backward, not kept (a third of the MLP's
            # activations); a down_proj that is not a plain Linear (LoRA, quantised, hooked, offloaded by
            # accelerate) is called as is
            return F.swiglu_linear(gate, up, down.weight, down.bias, impl=impl, mode=mode)
        if mode == "compile":  # left to Inductor
            return down(self.act_fn(gate) * up)
        return down(F.swiglu(gate, up, impl=impl, mode=mode))

    return forward


def _swap_rope(module_name: str, name: str, impl: str | None) -> str:
    """Swap the global (reference-counted); "" on success, else why not."""
    mod: Any = importlib.import_module(module_name)
    with _ROPE_LOCK:
        if (module_name, name) in _ROPE_SWAPS:
            original, count = _ROPE_SWAPS[module_name, name]
            _ROPE_SWAPS[module_name, name] = (original, count + 1)
            return ""
        original = getattr(mod, name, None)
        if original is None:
            return f"{module_name} has no global {name!r}"
        layouts, why = equivalence.rope_layouts(original)
        if not layouts:
            return why
        setattr(mod, name, equivalence.rope_function(original, impl, layouts))
        _ROPE_SWAPS[module_name, name] = (original, 1)
    return ""


def _restore_rope(module_name: str, name: str) -> None:
    with _ROPE_LOCK:
        if (module_name, name) not in _ROPE_SWAPS:
            return
        original, count = _ROPE_SWAPS[module_name, name]
        if count <= 1:
            setattr(importlib.import_module(module_name), name, original)
            del _ROPE_SWAPS[module_name, name]
        else:
            _ROPE_SWAPS[module_name, name] = (original, count - 1)


def _causal_lm_forward(impl: str | None, accum_dtype: torch.dtype, mode: str) -> Any:
    def forward(self: Any, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, past_key_values: Any = None,
                inputs_embeds: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                use_cache: bool | None = None, logits_to_keep: int | torch.Tensor = 0, **kwargs: Any) -> Any:
        original = getattr(self, _ORIG)
        if past_key_values is not None:  # transformers renames it ``cache`` (5.24 warns on the old name)
            kwargs["past_key_values"] = past_key_values
        if labels is None or not self.training or _calls_through(self.lm_head) or not _accepted(self.lm_head.weight):
            # the model's own forward: no labels, evaluation (Trainer.evaluate's compute_metrics needs the
            # logits), an lm_head hooked or wrapped since patch(), or a dtype anyaccel's ops do not take
            return original(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            inputs_embeds=inputs_embeds, labels=labels, use_cache=use_cache,
                            logits_to_keep=logits_to_keep, **kwargs)
        from transformers.modeling_outputs import CausalLMOutputWithPast

        loss_kwargs = {k: kwargs.pop(k) for k in _LOSS_KWARGS if k in kwargs}
        return_dict = kwargs.pop("return_dict", None)
        if return_dict is None:  # transformers' can_return_tuple: the call's, else the config's
            return_dict = getattr(self.config, "return_dict", True)
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             inputs_embeds=inputs_embeds, use_cache=use_cache, return_dict=True, **kwargs)
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
                                            else "mean", accum_dtype=accum_dtype, impl=impl,
                                            mode=mode)
        if items is not None:
            loss = loss / (items.to(loss.device) if isinstance(items, torch.Tensor) else items)
        output_type: Any = CausalLMOutputWithPast
        result = output_type(loss=loss, logits=None, past_key_values=outputs.past_key_values,
                             hidden_states=outputs.hidden_states, attentions=outputs.attentions)
        return result if return_dict is not False else result.to_tuple()

    return forward
