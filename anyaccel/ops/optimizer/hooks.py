"""The step protocol of anyaccel's optimizers: torch.optim's step hooks and profiler range, run once per step,
one step at a time per optimizer.

``step_entry`` makes a function an optimizer's ``step``; see `anyaccel._compat.torch_optim.step_entry`
for what it runs and how it falls back to torch's public ``Optimizer.profile_hook_step``. Around that, it holds
the optimizer's step lock ([`step_lock`][anyaccel.ops.optimizer.hooks.step_lock]), so steps called from several threads
run one after the other.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from anyaccel._compat.torch_optim import step_entry as _protocol_entry

__all__ = ["step_entry", "step_lock"]

_LOCK_ATTRIBUTE = "_step_lock"
_CREATING = threading.Lock()


def step_lock(optimizer: Any) -> threading.RLock:
    """The optimizer's step lock, made on first use: a re-entrant lock held by ``step()``, ``state_dict()`` and
    ``load_state_dict()``.

    Re-entrant, so a step reached again on the same thread (an override calling ``super().step()``, a closure
    or hook that steps the same optimizer) does not wait for itself. It lives in the instance's ``__dict__``
    under a private name, which pickling and ``copy.deepcopy`` leave out (a copy gets a lock of its own).
    """
    lock = optimizer.__dict__.get(_LOCK_ATTRIBUTE)
    if lock is None:
        with _CREATING:
            lock = optimizer.__dict__.setdefault(_LOCK_ATTRIBUTE, threading.RLock())
    return lock


def step_entry(body: Callable[..., Any]) -> Callable[..., Any]:
    """Makes ``body`` an optimizer's ``step``: torch.optim's step protocol (hooks, profiler range, no_grad) under
    the optimizer's [`step_lock`][anyaccel.ops.optimizer.hooks.step_lock].

    Two threads calling ``step()`` on one optimizer are serialised: each call runs whole (hooks, validation,
    every launch) before the other starts, so every call counts once. The lock costs one uncontended acquire
    and release per call.

    Args:
        body: ``body(self, *args, **kwargs)``, the step's work.

    Returns:
        The ``step`` method (marked as torch's wrapper expects, see the compat function).
    """
    inner = _protocol_entry(body)

    @functools.wraps(inner)
    def step(*args: Any, **kwargs: Any) -> Any:
        with step_lock(args[0]):
            return inner(*args, **kwargs)

    return step
