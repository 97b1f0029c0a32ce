"""The step protocol of anyaccel's optimizers: torch.optim's step hooks and profiler range, run once per step.

torch wraps every ``Optimizer`` subclass's ``step`` in ``Optimizer.profile_hook_step`` (profiler range
``Optimizer.step#<Class>.step``, global and per-optimizer pre-hooks, the step, post-hooks). :func:`step_entry`
runs that same public wrapper, with the step under ``no_grad``, once per step however ``step`` is reached.

A cheaper re-implementation through torch.optim's private hook registries (opening the profiler range only
while a profiler records) was measured against this and dropped: under 3% end to end (``docs/cpu_adam.md``,
"Private shortcuts").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["step_entry"]


def step_entry(body: Callable[..., Any]) -> Callable[..., Any]:
    """Makes ``body`` an optimizer's ``step`` that runs torch.optim's step protocol once per call.

    The outermost call runs ``torch.optim.Optimizer.profile_hook_step`` around ``body`` (under
    ``torch.no_grad()``). Reached through ``super().step()`` from an override that is itself a ``step_entry``
    (the outer one runs the hooks) or that torch wrapped (torch's wrapper runs them), it runs ``body`` alone.
    The function is marked ``hooked`` so that torch does not wrap it again, and a wrapper installed over it with
    ``functools.wraps`` (as ``torch.optim.lr_scheduler`` does) keeps the hooks running here.

    Args:
        body: ``body(self, *args, **kwargs)``, the step's work.

    Returns:
        The ``step`` method.

    Raises:
        RuntimeError: a pre-hook returned something other than None or ``(args, kwargs)`` (torch's message).
    """
    no_grad_body = torch.no_grad()(body)
    hooked = torch.optim.Optimizer.profile_hook_step(no_grad_body)

    @functools.wraps(body)
    def step(*args: Any, **kwargs: Any) -> Any:
        self = args[0]
        if self.__dict__.get("_in_step_entry") or not getattr(type(self).step, "_step_entry", False):
            # inside an outer step_entry, or under torch's wrapper of an override: the hooks ran there
            return no_grad_body(*args, **kwargs)
        self._in_step_entry = True
        try:
            return hooked(*args, **kwargs)
        finally:
            self._in_step_entry = False

    step.hooked = True  # type: ignore[attr-defined]  # torch's Optimizer._patch_step_function leaves it alone
    step._step_entry = True  # type: ignore[attr-defined]  # copied by functools.wraps onto wrappers of it
    return step
