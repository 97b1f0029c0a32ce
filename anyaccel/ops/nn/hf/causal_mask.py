"""Keep SDPA's ``is_causal`` when a patched Hugging Face model is traced (``torch.compile``, CUDA graphs).

transformers builds the attention mask before the attention layers (``masking_utils.create_causal_mask``). For
SDPA it returns no mask, and lets ``torch.nn.functional.scaled_dot_product_attention`` apply causality with
``is_causal=True``, when the mask would be the plain causal one: no padding, ``q_length == kv_length`` or
``q_length == 1`` (``masking_utils._ignore_causal_mask_sdpa``). While tracing it does not skip: transformers
5.17 to 5.23 materialise the ``(batch, 1, q, kv)`` boolean mask whenever Dynamo traces (``is_tracing``), and
later versions skip while compiling only on torch 2.14 and newer (before pytorch#176499 Dynamo read
``torch.compiler.is_exporting()`` as True). SDPA with an explicit mask cannot use the causal flash kernels: it
computes every block of the square, masked, so a compiled Llama's attention takes several times the eager
model's.

This module registers one attention implementation, ``"anyaccel_sdpa"``: transformers' own SDPA attention
function (``integrations/sdpa_attention.py``) with a mask function that returns no mask for the plain causal
case decided from Python values alone (no tensor is read, so nothing breaks the graph), and calls
transformers' ``sdpa_mask`` for every other case. It is the route transformers documents for a custom
attention (``AttentionInterface.register`` / ``AttentionMaskInterface.register``, "Attention Interface" in its
docs). [`apply`][anyaccel.ops.nn.hf.causal_mask.apply] switches a model to it with the model's public
``set_attn_implementation``; [`restore`][anyaccel.ops.nn.hf.causal_mask.restore] switches back.

The plain causal case, as transformers decides it, restricted to what is known without a tensor's values:

- no 2D ``attention_mask`` was passed (a passed mask of all ones is a tensor whose values the trace cannot
  read, so transformers' own mask is built, as before);
- the mask is causal (``mask_function`` is transformers' ``causal_mask_function``: packed sequences, sliding
  windows, chunked or bidirectional attention and ``or``/``and`` overlays use other functions) and
  ``allow_is_causal_skip`` is set (transformers clears it for a compiled decoding step with a static cache);
- ``q_length``, ``kv_length`` and the offsets are Python ints: a symbolic length (``torch.export`` or
  ``torch.compile`` with dynamic shapes) could take a value where the plain causal mask is wrong, the case
  pytorch#108108 describes, so it keeps transformers' mask;
- ``q_length == kv_length`` (SDPA's upper-left causal mask is then the model's) or ``q_length == 1`` (one new
  token sees every key; transformers' SDPA function passes ``is_causal=False`` for it).
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any

import torch

#: the attention implementation name a patched model's config carries
ATTENTION_NAME = "anyaccel_sdpa"
#: the implementation the patch replaces (transformers' default where torch's SDPA is available)
REPLACED = "sdpa"
_REGISTERED = threading.Lock()
_registered: list[bool] = []
#: transformers' ``masking_utils``, imported once outside any trace: Dynamo (torch 2.10) cannot trace an import
#: from transformers' lazy top-level module
_masking_utils: list[ModuleType] = []


def _masking() -> ModuleType:
    if not _masking_utils:
        _masking_utils.append(importlib.import_module("transformers.masking_utils"))
    return _masking_utils[0]


def sdpa_mask(**kwargs: Any) -> torch.Tensor | None:
    """transformers' SDPA mask function (``masking_utils.sdpa_mask``, whose keyword arguments it takes), except
    that the plain causal case (module docstring) returns None without reading a tensor.

    Returns:
        None where SDPA's ``is_causal`` computes the model's mask; else what transformers' ``sdpa_mask``
        returns (a ``(batch, 1, q_length, kv_length)`` bool tensor, or None where it skips the mask itself).
    """
    masking_utils = _masking()
    if _plain_causal(kwargs, masking_utils.causal_mask_function):
        return None
    return masking_utils.sdpa_mask(**kwargs)


def _plain_causal(kwargs: dict[str, Any], causal: Any) -> bool:
    sizes = [kwargs.get(k, 0) for k in ("q_length", "kv_length", "q_offset", "kv_offset")]
    if not all(type(s) is int for s in sizes):
        return False
    q_length, kv_length = sizes[0], sizes[1]
    return (kwargs.get("allow_is_causal_skip", True) and kwargs.get("attention_mask") is None
            and kwargs.get("mask_function", causal) is causal and kwargs.get("local_size") is None
            and (q_length == 1 or q_length == kv_length))


def register() -> None:
    """Register ``"anyaccel_sdpa"`` with transformers' attention and mask interfaces (once per process;
    idempotent, thread-safe).

    Raises:
        ImportError: transformers is not installed.
    """
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

    masking_utils = _masking()
    with _REGISTERED:
        if not _registered:
            AttentionInterface.register(ATTENTION_NAME, ALL_ATTENTION_FUNCTIONS[REPLACED])
            masking_utils.AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
            _registered.append(True)


def applies(model: torch.nn.Module) -> str:
    """Why ``model``'s attention is left as it is ("" when [`apply`][anyaccel.ops.nn.hf.causal_mask.apply] may
    switch it): it must be a transformers ``PreTrainedModel`` whose config uses ``"sdpa"``."""
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if current == ATTENTION_NAME:
        return ""
    if not callable(getattr(model, "set_attn_implementation", None)):
        return f"{type(model).__name__} has no set_attn_implementation (not a transformers PreTrainedModel)"
    if current != REPLACED:
        return f"the model's attention implementation is {current!r}, not {REPLACED!r}"
    return ""


def apply(model: torch.nn.Module) -> None:
    """Switch ``model`` (and its sub-models) from ``"sdpa"`` to ``"anyaccel_sdpa"``.

    Side effects: registers the implementation (`register`); sets the config's attention implementation through
    ``model.set_attn_implementation``. The computation is unchanged: the same SDPA call, with the same mask or
    ``is_causal`` as an untraced model gets.

    Raises:
        ValueError: ``applies(model)`` names a reason (check it first).
    """
    why = applies(model)
    if why:
        raise ValueError(f"anyaccel_sdpa does not apply: {why}")
    register()
    model.set_attn_implementation(ATTENTION_NAME)  # type: ignore[operator]


def restore(model: torch.nn.Module) -> None:
    """Undo [`apply`][anyaccel.ops.nn.hf.causal_mask.apply]: a model on ``"anyaccel_sdpa"`` goes back to
    ``"sdpa"``; any other model is left as it is."""
    if getattr(getattr(model, "config", None), "_attn_implementation", None) == ATTENTION_NAME:
        model.set_attn_implementation(REPLACED)  # type: ignore[operator]
