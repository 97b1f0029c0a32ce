"""Elementwise type promotion, as torch's own primitives compute it (``torch._prims_common``).

Private names used (tested on torch 2.10.0, 2.13.0 and 2.15.0): ``torch._prims_common.elementwise_dtypes`` and
``ELEMENTWISE_TYPE_PROMOTION_KIND``. Fallback where either is missing or the rule name is gone: the public
``torch.result_type``, folded over the operands as 1-element or 0-dim ``meta`` tensors (so a dimensioned
tensor outranks a 0-dim one and a Python scalar, as in torch), with the rule's conversion applied after.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["RULES", "elementwise_dtypes"]

#: The promotion rules by anyaccel's name -> torch's ``ELEMENTWISE_TYPE_PROMOTION_KIND`` member.
RULES: dict[str, str] = {"default": "DEFAULT", "int_to_float": "INT_TO_FLOAT", "always_bool": "ALWAYS_BOOL",
                         "no_opmath": "NO_OPMATH"}

#: dtypes computed in a wider type (torch's ``get_computation_dtype``).
_OPMATH = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.complex32: torch.complex64}


def elementwise_dtypes(*args: Any, rule: str) -> tuple[torch.dtype, torch.dtype]:
    """``(computation dtype, result dtype)`` of an elementwise op over ``args`` under ``rule``.

    Args:
        args: tensors and Python scalars (at least one tensor).
        rule: a key of `RULES` (``"default"``: ``torch.add``'s rules; ``"int_to_float"``: integers and
            bools become the default float dtype; ``"always_bool"``: a bool result; ``"no_opmath"``: 16-bit
            floats computed in their own type).

    Raises:
        ValueError: ``rule`` is not a key of `RULES`.
    """
    if rule not in RULES:
        raise ValueError(f"elementwise_dtypes: rule={rule!r}; accepted: {sorted(RULES)}")
    try:
        from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND
        from torch._prims_common import elementwise_dtypes as torch_dtypes
        kind = getattr(ELEMENTWISE_TYPE_PROMOTION_KIND, RULES[rule])
    except (ImportError, AttributeError):
        return _public_dtypes(args, rule)
    compute, result = torch_dtypes(*args, type_promotion_kind=kind)
    return compute, result


def _public_dtypes(args: tuple[Any, ...], rule: str) -> tuple[torch.dtype, torch.dtype]:
    """`elementwise_dtypes` from ``torch.result_type`` (the fallback)."""
    acc: Any = None
    for a in args:
        item = torch.empty((1,) if a.dim() > 0 else (), dtype=a.dtype, device="meta") \
            if isinstance(a, torch.Tensor) else a
        if acc is None:
            acc = item
            continue
        dim = any(isinstance(x, torch.Tensor) and x.dim() > 0 for x in (acc, item))
        both_scalars = not isinstance(acc, torch.Tensor) and not isinstance(item, torch.Tensor)
        dtype = torch.result_type(torch.tensor(acc), item) if both_scalars else torch.result_type(
            *((acc, item) if isinstance(acc, torch.Tensor) else (item, acc)))
        acc = torch.empty((1,) if dim else (), dtype=dtype, device="meta")
    result = acc.dtype if isinstance(acc, torch.Tensor) else torch.tensor(acc).dtype
    if rule == "int_to_float" and not (result.is_floating_point or result.is_complex):
        result = torch.get_default_dtype()
    if rule == "no_opmath":
        return result, result
    compute = _OPMATH.get(result, result)
    return (compute, torch.bool) if rule == "always_bool" else (compute, result)
