"""Whether anyaccel's op computes what a marked Hugging Face layer computes, decided at patch time.

Two kinds of evidence, never the class name alone:

- **an equivalence probe**: the layer's own forward and anyaccel's candidate run on a small random input (on a
  copy of the layer with random weights and a distinctive epsilon, in float32, bfloat16 and mixed dtypes) and
  must agree to rounding: the same result dtype, float32 results within ``rtol=1e-5``, 16-bit results equal
  in at least 98% of the elements and within 2 ulp elsewhere. Two roundings where anyaccel does one (or the
  reverse) differ in about a fifth of the bfloat16 elements, so the probe tells Llama's RMSNorm from OLMo-2's;
  ``(1 + weight)`` or another epsilon attribute differ everywhere. Used for RMSNorm-like layers, SiLU and
  the rotary embedding.
- **the forward's code**: a module whose ``forward`` body is, token for token (`ast`), Llama's
  (``LlamaMLP.forward``, ``LlamaForCausalLM.forward``) computes what Llama's does with its submodules; used
  for the SwiGLU MLP and the causal-LM loss, whose probe would need the model's full weights.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from anyaccel.ops.nn import functional as F
from anyaccel.ops.nn import validation as v

#: attributes an RMSNorm layer keeps its epsilon in, tried in this order
EPS_ATTRIBUTES = ("variance_epsilon", "eps", "epsilon")
_PROBE_EPS = 0.25
#: (input dtype, weight dtype) pairs every probe runs
_PROBE_DTYPES = ((torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32))


def agree(got: torch.Tensor, want: torch.Tensor) -> str:
    """Why ``got`` is not ``want`` to rounding ("" when it is): dtype and shape equal; float32 within
    ``rtol=1e-5, atol=1e-6``; 16-bit: at most 2% of the elements differ, by at most 2 ulp of the larger."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"result {got.dtype} {list(got.shape)} where the layer gives {want.dtype} {list(want.shape)}"
    g, w = got.detach().double(), want.detach().double()
    if not bool(torch.isfinite(g).all()) or not bool(torch.isfinite(w).all()):
        return "non-finite probe result"
    if want.dtype == torch.float32 or want.dtype == torch.float64:
        ok = bool(torch.allclose(g, w, rtol=1e-5, atol=1e-6))
        return "" if ok else f"differs by up to {float((g - w).abs().max()):.3g} in float32"
    ulp = torch.finfo(want.dtype).eps  # 2^-7 for bfloat16, 2^-10 for float16
    differ = float((g != w).double().mean())
    worst = float(((g - w).abs() / (w.abs().clamp_min(torch.finfo(want.dtype).tiny) * ulp)).max())
    if differ <= 0.02 and worst <= 2.0:
        return ""
    return f"{differ:.0%} of {want.dtype} elements differ (up to {worst:.1f} ulp)"


@dataclass(frozen=True)
class NormRecipe:
    """How a layer's RMSNorm maps to [`rms_norm`][anyaccel.ops.nn.functional.rms_norm].

    Attributes:
        casting: ``"llama"`` (rounds the normalised value to x's dtype before the weight: Llama) or
            ``"torch"`` (one rounding at the end: OLMo-2, ``(weight * h).to(dtype)``).
        offset: the weight is used as ``1 + weight`` in float32 (zero-centred RMSNorm: Qwen3.5, Gemma).
        eps_attribute: the layer attribute holding epsilon.
    """

    casting: str
    offset: bool
    eps_attribute: str

    def __call__(self, module: torch.nn.Module, x: torch.Tensor, impl: str | None, mode: str | None = None
                 ) -> torch.Tensor:
        """anyaccel's RMSNorm of ``x`` with ``module``'s weight and epsilon (see the class docstring), in the
        callable form ``mode`` (`anyaccel.ops.nn.functional.rms_norm`)."""
        weight = getattr(module, "weight", None)
        if self.offset and isinstance(weight, torch.Tensor):
            weight = 1.0 + weight.float()
        return F.rms_norm(x, weight, float(getattr(module, self.eps_attribute)), casting=self.casting, impl=impl,
                          mode=mode)


def _recipes(module: torch.nn.Module) -> list[NormRecipe]:
    eps = [a for a in EPS_ATTRIBUTES if isinstance(getattr(module, a, None), float)]
    has_weight = isinstance(getattr(module, "weight", None), torch.Tensor)
    kinds = [("llama", False), ("torch", False), ("torch", True)] if has_weight else [("torch", False)]
    return [NormRecipe(c, o, a) for a in eps for c, o in kinds]


def probe_rms_norm(module: torch.nn.Module) -> tuple[NormRecipe | None, str]:
    """The recipe under which anyaccel's RMSNorm computes what ``module.forward`` computes.

    Args:
        module: an RMSNorm-like layer (``forward(hidden_states)``), weight ``[N]`` or none.

    Returns:
        ``(recipe, "")``, or ``(None, reason)`` when no recipe agrees or the layer cannot be probed (on the
        meta device, no epsilon attribute, a forward that raises on the probe).

    The probe runs on a deep copy moved to the CPU, under ``torch.no_grad()``, with anyaccel's portable
    implementation: it decides the math; each implementation's agreement with it is the op tests' business
    (Triton's interpreter, for one, truncates to bfloat16 where GPUs round).

    Side effects: none on ``module``.
    """
    weight = getattr(module, "weight", None)
    param = weight if isinstance(weight, torch.Tensor) else next(iter(module.parameters()), None)
    if param is not None and param.device.type == "meta":
        return None, "on the meta device (cannot be probed)"
    candidates = _recipes(module)
    if not candidates:
        return None, f"no float epsilon attribute ({', '.join(EPS_ATTRIBUTES)})"
    width = int(weight.shape[-1]) if isinstance(weight, torch.Tensor) and weight.dim() == 1 else 0
    if width == 0:
        return None, "no one-dimensional weight to read the normalised size from"
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(4, width, generator=gen) * 0.3
    w0 = torch.randn(width, generator=gen) * 0.5 + 1.0
    reasons: list[str] = []
    for recipe in candidates:
        why = _try_recipe(module, recipe, x0, w0)
        if not why:
            return recipe, ""
        reasons.append(f"{recipe.casting}{'+offset' if recipe.offset else ''}/{recipe.eps_attribute}: {why}")
    return None, "math differs from anyaccel's rms_norm (" + "; ".join(reasons[:3]) + ")"


def _try_recipe(module: torch.nn.Module, recipe: NormRecipe, x0: torch.Tensor, w0: torch.Tensor) -> str:
    forward = type(module).forward
    for x_dtype, w_dtype in _PROBE_DTYPES:
        try:
            probe = copy.deepcopy(module).to("cpu")
            with torch.no_grad():
                probe.weight.data = w0.to(w_dtype)
        except Exception as exc:  # noqa: BLE001 (a sharded or quantised weight: not probed, so not replaced)
            return f"cannot be copied to the CPU for the probe ({type(exc).__name__}: {exc})"
        with torch.no_grad():
            for attr in EPS_ATTRIBUTES:
                if isinstance(getattr(probe, attr, None), float):
                    setattr(probe, attr, _PROBE_EPS if attr == recipe.eps_attribute else 1e-6)
            x = x0.to(x_dtype)
            try:
                want = forward(probe, x)
                got = recipe(probe, x, "torch")
            except Exception as exc:  # noqa: BLE001 (any failure means "not equivalent"; the reason is kept)
                return f"probe raised {type(exc).__name__}: {exc}"
        why = agree(got, want)
        if why:
            return f"{x_dtype}/{w_dtype} input/weight: {why}"
    return ""


def probe_silu(module: torch.nn.Module) -> str:
    """Why ``module.forward(x)`` is not anyaccel's ``silu(x)`` ("" when it is), probed in float32 and
    bfloat16 on a random ``[3, 17]`` CPU input with the portable implementation. Side effects: none."""
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(3, 17, generator=gen) * 3
    for dtype in (torch.float32, torch.bfloat16):
        x = x0.to(dtype)
        try:
            with torch.no_grad():
                why = agree(F.silu(x, impl="torch"), type(module).forward(module, x))
        except Exception as exc:  # noqa: BLE001 (a failing probe means "not equivalent")
            return f"probe raised {type(exc).__name__}: {exc}"
        if why:
            return f"math differs from anyaccel's silu ({why})"
    return ""


#: the parameters of Hugging Face's ``apply_rotary_pos_emb``
ROPE_PARAMETERS = ("q", "k", "cos", "sin", "unsqueeze_dim")


def parameters(fn: Any) -> tuple[str, ...]:
    """The parameter names of a function, or of a module instance's forward (``self`` dropped)."""
    target = type(fn).forward if isinstance(fn, torch.nn.Module) else fn
    try:
        names = tuple(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return ()
    return names[1:] if isinstance(fn, torch.nn.Module) else names


#: rotary table layouts: ``"full"``, Hugging Face's ``cat(f, f)`` over the head dimension ``D``; ``"pairs"``,
#: one angle per rotated pair, ``D / 2`` wide (GPT-OSS)
ROPE_LAYOUTS = ("full", "pairs")


def probe_rope(original: Callable[..., Any], replacement: Callable[..., Any], layout: str = "full") -> str:
    """Why ``replacement(q, k, cos, sin)`` is not ``original(q, k, cos, sin)`` ("" when it is).

    Probed in float32 on the CPU with queries ``[2, 3, 5, 8]``, grouped keys ``[2, 1, 5, 8]`` and tables
    ``[2, 5, W]`` (unsqueezed at dimension 1 by the function) of the given layout (`ROPE_LAYOUTS`):
    ``W = 8``, ``cos = cat(cos(f), cos(f))``, or ``W = 4``, ``cos = cos(f)``. A function of other parameters
    than `ROPE_PARAMETERS` is refused.
    """
    if parameters(original) != ROPE_PARAMETERS:
        return f"parameters {parameters(original)} are not {ROPE_PARAMETERS}"
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 5, 8, generator=gen), torch.randn(2, 1, 5, 8, generator=gen)
    inv = 1.0 / (10000.0 ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8))
    freqs = torch.outer(torch.arange(5, dtype=torch.float32) + 3.0, inv)
    emb = (torch.cat((freqs, freqs), dim=-1) if layout == "full" else freqs).expand(2, 5, -1)
    cos, sin = emb.cos(), emb.sin()
    try:
        with torch.no_grad():
            want, got = original(q, k, cos, sin), replacement(q, k, cos, sin)
    except Exception as exc:  # noqa: BLE001 (a failing probe means "not equivalent")
        return f"probe raised {type(exc).__name__}: {exc}"
    for name, g, w in zip("qk", got, want, strict=True):
        why = agree(g, w)
        if why:
            return f"math differs from anyaccel's rope_qk ({name}: {why})"
    return ""


def rope_function(original: Callable[..., Any], impl: str | None, layouts: frozenset[str] = frozenset({"full"})
                  ) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """Hugging Face's ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`` on anyaccel's ``rope_qk``
    for the table layouts in ``layouts`` (`ROPE_LAYOUTS`: ``"full"``,
    a table as wide as the head, whose halves repeat; ``"pairs"``, half as wide); any other table (a partial
    rotary one, narrower than the head), keys of another head dimension or a dtype anyaccel's ops do not take
    (float64: the function is swapped for every model of the modeling module, patched or not) go to
    ``original``. The halves of
    a full table are not compared at run time (that would synchronise the device): the rotary-embedding
    modules of every family marked in transformers 5.24 build it as ``cat(freqs, freqs)``."""
    full, pairs = "full" in layouts, "pairs" in layouts

    def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                             unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        d, w = q.shape[-1], cos.shape[-1]
        if k.shape[-1] != d or not ((full and w == d) or (pairs and 2 * w == d)) or \
                q.dtype not in v.float_dtypes() or k.dtype not in v.float_dtypes():
            return original(q, k, cos, sin, unsqueeze_dim)
        return F.rope_qk(q, k, cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim), impl=impl)

    return apply_rotary_pos_emb


def rope_layouts(original: Callable[..., Any]) -> tuple[frozenset[str], str]:
    """The table layouts in which anyaccel's rope computes what ``original`` computes, and, when there is
    none, why (the full layout's probe result)."""
    reasons = {layout: probe_rope(original, rope_function(original, "torch", frozenset({layout})),
                                              layout) for layout in ROPE_LAYOUTS}
    return frozenset(k for k, why in reasons.items() if not why), reasons["full"]


def _body(fn: Any) -> str | None:
    """The ``ast.dump`` of a function's body without its docstring, with its parameters renamed ``a0, a1,
    ...`` (None when there is no readable source)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(fn))))
    except (OSError, TypeError, SyntaxError):
        return None
    node = tree.body[0] if tree.body else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    renames = {a.arg: f"a{i}" for i, a in enumerate(node.args.args)}
    body = node.body[1:] if node.body and isinstance(node.body[0], ast.Expr) and \
        isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str) else node.body
    module = ast.Module(body=list(body), type_ignores=[])
    for sub in ast.walk(module):
        if isinstance(sub, ast.Name) and sub.id in renames:
            sub.id = renames[sub.id]
    return ast.dump(module, annotate_fields=False)


_SAME_FORWARD: dict[tuple[type, type], bool] = {}


def same_forward(cls: type, reference: type) -> bool:
    """Whether ``cls.forward``'s body is ``reference.forward``'s (docstring and parameter names aside).
    Cached per class pair."""
    key = (cls, reference)
    if key not in _SAME_FORWARD:
        mine = _body(getattr(cls, "forward", None))
        _SAME_FORWARD[key] = mine is not None and mine == _body(getattr(reference, "forward", None))
    return _SAME_FORWARD[key]
