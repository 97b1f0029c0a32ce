"""Model ops on every accelerator: norms, softmax, SwiGLU, rotary embedding, (fused linear) cross-entropy.

Three ways to use them (docs/nn_ops.md):

- direct calls: ``anyaccel.ops.nn.families.rms_norm(x, weight)``, ... (:mod:`anyaccel.ops.nn.functional`);
- the aten-override mode: ``anyaccel.ops.enable()`` / ``with anyaccel.ops.use_ops():``
  (:mod:`anyaccel.ops.override`);
- patching a Hugging Face model: ``anyaccel.ops.patch(model)`` (:mod:`anyaccel.ops.nn.hf_patch`).

Each op family (``families/rms_norm``, ``layer_norm``, ``softmax``, ``swiglu``, ``rope``, ``cross_entropy``)
has an op spec, a Triton implementation and a portable torch one, chosen by :mod:`anyaccel.ops.dispatch`.
Importing this package imports neither Triton nor the implementations.
"""

from __future__ import annotations

from typing import Any

_FUNCTIONS = ("cross_entropy", "fused_add_rms_norm", "fused_linear_cross_entropy", "layer_norm", "log_softmax",
              "rms_norm", "rope", "rope_qk", "silu", "softmax", "swiglu")

__all__ = sorted((*_FUNCTIONS, "patch", "unpatch"))


def __getattr__(name: str) -> Any:
    """Imports the front ends on first use; the attribute is then set on the package, so later lookups
    (one per eager call in ``anyaccel.ops.nn.rms_norm(...)``) skip this function."""
    if name in _FUNCTIONS:
        from anyaccel.ops.nn import functional as module
    elif name in ("patch", "unpatch"):
        from anyaccel.ops.nn import hf_patch as module  # type: ignore[no-redef]
    else:
        raise AttributeError(f"module 'anyaccel.ops.nn' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value
