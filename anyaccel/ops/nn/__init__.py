"""Model ops on every accelerator: norms, softmax, SwiGLU, rotary embedding, (fused linear) cross-entropy.

Three ways to use them (docs/nn_ops.md):

- direct calls: ``anyaccel.ops.nn.families.rms_norm(x, weight)``, ...
  ([`anyaccel.ops.nn.functional`][anyaccel.ops.nn.functional]);
- the aten-override mode: ``anyaccel.ops.enable()`` / ``with anyaccel.ops.use_ops():``
  (`anyaccel.ops.override`);
- patching a Hugging Face model: ``anyaccel.ops.patch(model)`` ([`anyaccel.ops.nn.hf_patch`][anyaccel.ops.nn.hf_patch]).

Each op family (``families/rms_norm``, ``layer_norm``, ``softmax``, ``swiglu``, ``rope``, ``cross_entropy``)
has an op spec, a Triton implementation and a portable torch one, chosen by
[`anyaccel.ops.dispatch`][anyaccel.ops.dispatch].
Importing this package imports neither Triton nor the implementations.
"""

from __future__ import annotations

from anyaccel.lazy_exports import lazy_exports

_FUNCTIONS = ("cross_entropy", "fused_add_rms_norm", "fused_linear_cross_entropy", "layer_norm", "log_softmax",
              "rms_norm", "rope", "rope_qk", "silu", "softmax", "swiglu")

__all__ = sorted((*_FUNCTIONS, "patch", "unpatch"))


__getattr__, __dir__ = lazy_exports(__name__, {
    **{name: "anyaccel.ops.nn.functional" for name in _FUNCTIONS},
    "patch": "anyaccel.ops.nn.hf_patch",
    "unpatch": "anyaccel.ops.nn.hf_patch",
})
