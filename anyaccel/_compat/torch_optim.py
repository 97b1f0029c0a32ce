"""torch.optim internals: the global step-hook registries, the optimizer's hook tables, the profiler switch.

Private names used (tested on torch 2.10.0, 2.13.0 and 2.15.0):

* ``torch.optim.optimizer._global_optimizer_pre_hooks`` / ``_global_optimizer_post_hooks``: the registries
  ``register_optimizer_step_pre_hook``/``..._post_hook`` fill;
* ``Optimizer._optimizer_step_pre_hooks`` / ``_optimizer_step_post_hooks`` / ``_optimizer_step_code``:
  per-optimizer hooks and the profiler anchor ``Optimizer.profile_hook_step`` calls;
* ``Optimizer._optimizer_load_state_dict_pre_hooks`` / ``..._post_hooks``: the hooks ``load_state_dict`` runs;
* ``torch.autograd._profiler_enabled``: whether a profiler is recording.

[`step_entry`][anyaccel._compat.torch_optim.step_entry] runs torch.optim's step protocol
(``Optimizer.profile_hook_step``: profiler range, global
and per-optimizer pre-hooks, the step under ``no_grad``, ``_optimizer_step_code``, post-hooks) with the
registries above, opening the profiler range only while a profiler records. Its public fallback, taken per
call whenever a private name is missing, is torch's own public ``Optimizer.profile_hook_step`` wrapper.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.optim.optimizer as _torch_optim

__all__ = ["global_step_hooks", "load_state_dict_hooks", "profiler_enabled", "step_entry"]

_PRE = "_global_optimizer_pre_hooks"
_POST = "_global_optimizer_post_hooks"
_PROFILER_QUERY = "_profiler_enabled"
_OWN = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks", "_optimizer_step_code")


def global_step_hooks() -> tuple[Mapping[Any, Any], Mapping[Any, Any]] | None:
    """torch.optim's global step pre- and post-hook registries, or None where torch has no such mappings."""
    pre = getattr(_torch_optim, _PRE, None)
    post = getattr(_torch_optim, _POST, None)
    if isinstance(pre, Mapping) and isinstance(post, Mapping):
        return pre, post
    return None


def profiler_enabled() -> bool:
    """Whether a torch profiler is recording; True where torch has no private query (the range is then
    always opened, which costs a few microseconds and changes nothing else)."""
    query = getattr(torch.autograd, _PROFILER_QUERY, None)
    if query is None:
        return True
    return bool(query())


def load_state_dict_hooks(optimizer: torch.optim.Optimizer) -> tuple[list[Any], list[Any]]:
    """The ``load_state_dict`` pre- and post-hooks registered on ``optimizer`` (by
    ``register_load_state_dict_pre_hook``/``..._post_hook``), as lists; empty where torch keeps none."""
    pre = getattr(optimizer, "_optimizer_load_state_dict_pre_hooks", None)
    post = getattr(optimizer, "_optimizer_load_state_dict_post_hooks", None)
    return (list(pre.values()) if isinstance(pre, Mapping) else [],
            list(post.values()) if isinstance(post, Mapping) else [])


def step_entry(body: Callable[..., Any]) -> Callable[..., Any]:
    """Makes ``body`` an optimizer's ``step`` that runs torch.optim's step protocol once per call.

    torch wraps every ``Optimizer`` subclass's ``step`` in ``Optimizer.profile_hook_step`` (profiler range,
    global and per-optimizer pre-hooks, the step, ``_optimizer_step_code``, post-hooks). The function returned
    here does the same things in the same order, and opens the profiler range (``Optimizer.step#<Class>.step``)
    only while a profiler records; ``body`` runs with gradients disabled. It is marked ``hooked`` so torch does
    not wrap it again. Where torch lacks the private hook registries it calls torch's own
    ``Optimizer.profile_hook_step`` wrapper instead (decided per call).

    The hooks run once per step however ``step`` is reached: through ``super().step()`` from an override that
    is itself a ``step_entry`` (the outer one runs them) or that torch wrapped (torch's wrapper runs them),
    it runs ``body`` alone. A wrapper installed over it with ``functools.wraps`` (as
    ``torch.optim.lr_scheduler`` does) keeps the hooks running here.

    Args:
        body: ``body(self, *args, **kwargs)``, the step's work.

    Returns:
        The ``step`` method.
    """
    no_grad_body = torch.no_grad()(body)
    public = torch.optim.Optimizer.profile_hook_step(no_grad_body)

    @functools.wraps(body)
    def step(*args: Any, **kwargs: Any) -> Any:
        self = args[0]
        if self.__dict__.get("_in_step_entry") or not getattr(type(self).step, "_step_entry", False):
            # inside an outer step_entry, or under torch's wrapper of an override: the hooks ran there
            return no_grad_body(*args, **kwargs)
        hooks = global_step_hooks()
        self._in_step_entry = True
        try:
            if hooks is None or not all(hasattr(self, name) for name in _OWN):
                return public(*args, **kwargs)
            return _hooked_call(self, body, args, kwargs, hooks)
        finally:
            self._in_step_entry = False

    step.hooked = True  # type: ignore[attr-defined]  # torch's Optimizer._patch_step_function leaves it alone
    step._step_entry = True  # type: ignore[attr-defined]  # copied by functools.wraps onto wrappers of it
    return step


def _hooked_call(self: Any, body: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                 hooks: tuple[Mapping[Any, Any], Mapping[Any, Any]]) -> Any:
    """torch.optim's ``profile_hook_step`` sequence around ``body`` (see
    [`step_entry`][anyaccel._compat.torch_optim.step_entry]).

    Raises:
        RuntimeError: a pre-hook returned something other than None or ``(args, kwargs)`` (torch's message).
    """
    pre_hooks, post_hooks = hooks
    with (torch.autograd.profiler.record_function(f"Optimizer.step#{type(self).__name__}.step")
          if profiler_enabled() else contextlib.nullcontext()):
        for pre_hook in itertools.chain(pre_hooks.values(), self._optimizer_step_pre_hooks.values()):
            result = pre_hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{body} must return None or a tuple of (new_args, new_kwargs), but got "
                                       f"{result}.")
                args, kwargs = result
        with torch.no_grad():
            out = body(*args, **kwargs)
        self._optimizer_step_code()
        for post_hook in itertools.chain(self._optimizer_step_post_hooks.values(), post_hooks.values()):
            post_hook(self, args, kwargs)
    return out
