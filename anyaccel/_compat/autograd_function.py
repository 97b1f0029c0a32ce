"""A ``torch.autograd.Function`` whose ``apply`` skips torch's per-call signature bind.

Private names used (tested on torch 2.10.0, 2.13.0 and 2.15.0): ``torch._C._are_functorch_transforms_active``,
``torch._functorch.utils.unwrap_dead_wrappers`` and ``torch.autograd.forward_ad._current_level``.

``torch.autograd.Function.apply`` (in Python up to torch 2.14) binds the arguments to ``forward``'s signature
(``inspect.signature(...).bind``) on every call, only to fill in defaults. `function` makes a Function
whose ``apply``, on a call passing every parameter positionally with no functorch transform active, does
what torch's ``apply`` does after such a bind (unwrap dead functorch wrappers, then the C ``apply``), and when
there is no graph to record (grad mode off or no input requiring grad, no forward-AD level) calls ``forward``
directly. Keyword arguments are bound to positions first (torch 2.10's ``apply`` refuses them). Any other call
goes to torch's own ``apply`` (``super().apply``, public).

Fallback: where any private name above is missing, the returned class is a plain ``autograd.Function`` and
every call is torch's ``apply``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["fast_apply_available", "function"]


def _privates() -> tuple[Callable[[], bool], Callable[[Any], Any], Any] | None:
    """(transforms active?, unwrap_dead_wrappers, the forward_ad module) or None where one is missing."""
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    try:
        from torch._functorch.utils import unwrap_dead_wrappers
        from torch.autograd import forward_ad
    except ImportError:
        return None
    if active is None or not isinstance(getattr(forward_ad, "_current_level", None), int):
        return None
    return active, unwrap_dead_wrappers, forward_ad


def fast_apply_available() -> bool:
    """Whether `function` can give its classes the fast ``apply`` on this torch."""
    return _privates() is not None


def function(name: str, forward: Callable[..., Any], setup_context: Callable[..., None],
             backward: Callable[..., Any]) -> type[torch.autograd.Function]:
    """A ``torch.autograd.Function`` subclass named ``name`` with these static methods and a fast ``apply``.

    Args:
        name: the class name.
        forward: ``forward(*inputs)`` (positional parameters only for the fast path).
        setup_context: ``setup_context(ctx, inputs, output)``.
        backward: ``backward(ctx, *grads)``.

    Returns:
        The class; ``cls.apply(*inputs)`` runs it.
    """
    members: dict[str, Any] = {"forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
                               "backward": staticmethod(backward)}
    signature = inspect.signature(forward)
    params = signature.parameters.values()
    positional = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    arity = len(params) if positional else -1
    klass: Any = None
    privates = _privates()
    if privates is None:
        def public_apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
            if kwargs and positional:
                # keywords become positions: some torch versions' apply hands keywords on to the C apply,
                # which refuses them
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                args, kwargs = tuple(bound.args), {}
            return super(klass, cls).apply(*args, **kwargs)  # torch's own apply

        members["apply"] = classmethod(public_apply)
        klass = type(name, (torch.autograd.Function,), members)
        return klass
    transforms_active, unwrap_dead_wrappers, forward_ad = privates

    def apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs and positional:
            # keywords become positions here: some torch versions' apply (2.10, 2.11) binds them but then hands
            # them on to the C apply, which refuses keywords
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = tuple(bound.args), {}
        if kwargs or len(args) != arity or transforms_active():
            return super(klass, cls).apply(*args, **kwargs)  # torch's own apply
        # what torch's Function.apply does once its bind found nothing to fill in
        args = unwrap_dead_wrappers(args)
        if forward_ad._current_level < 0 and (not torch.is_grad_enabled() or not any(
                [isinstance(a, torch.Tensor) and a.requires_grad for a in args])):
            return forward(*args)
        return super(torch.autograd.Function, cls).apply(*args)

    members["apply"] = classmethod(apply)
    klass = type(name, (torch.autograd.Function,), members)
    return klass
