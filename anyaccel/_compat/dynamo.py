"""Dynamo's constant-result mark, set without importing Dynamo; whether a module was compiled.

Private name used (tested on torch 2.10.0, 2.13.0 and 2.15.0): the function attribute
``_dynamo_marked_constant``, which ``torch.compiler.assume_constant_result`` sets
(``torch/_dynamo/decorators.py``). Dynamo then runs a marked function once while tracing and bakes its result
into the graph as a constant. Calling the public decorator imports Dynamo (and with it Triton), which
importing anyaccel's front ends must not; so `mark_constant_result` calls it only where Dynamo is
already imported, and sets the attribute otherwise.

The public path is taken automatically whenever Dynamo is loaded. Where a torch renames the mark, the
private path would no longer mark the function: ``tests/_compat/test_dynamo.py`` compares the attributes
the public decorator sets with `MARK` on every supported torch, so that is a test failure, not a silent
graph break.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["MARK", "compiled_module", "mark_constant_result"]

F = TypeVar("F", bound=Callable[..., Any])

#: the attribute ``torch.compiler.assume_constant_result`` sets
MARK = "_dynamo_marked_constant"


def mark_constant_result(fn: F) -> F:
    """``torch.compiler.assume_constant_result(fn)`` where Dynamo is imported, else the same mark set directly.

    Returns:
        ``fn`` itself (marked).

    Side effects: sets an attribute on ``fn``.
    """
    if "torch._dynamo" in sys.modules:
        return torch.compiler.assume_constant_result(fn)
    setattr(fn, MARK, True)
    return fn


def compiled_module(model: Any) -> tuple[Any, bool]:
    """``(module, compiled)``: the module ``torch.compile(module)`` wrapped and True, for its wrapper; ``model``
    and whether ``model.compile()`` compiled it in place; ``(model, False)`` otherwise.

    Private names used (torch 2.10-2.15): the wrapper class ``torch._dynamo.eval_frame.OptimizedModule`` and its
    ``_orig_mod``, and the ``_compiled_call_impl`` attribute ``torch.nn.Module.compile`` sets. Neither exists
    before Dynamo is imported, so this never imports it. Where a torch renames them the public fallback is
    "not compiled" (the caller then needs its mode said explicitly).
    """
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    wrapper = getattr(eval_frame, "OptimizedModule", None)
    if wrapper is not None and isinstance(model, wrapper):
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, torch.nn.Module):
            return inner, True
    return model, getattr(model, "_compiled_call_impl", None) is not None
