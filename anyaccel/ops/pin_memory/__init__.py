"""Pinned host memory: DeepSpeed's ``PinMemoryBuilder`` / ``pin_handle`` on anyaccel.

- ``spec.py``: the op spec (torch ops ``pin_alloc``, ``pin_find``, ``pin_release``, ``pin_free``, ...);
- ``handle.py``: [`PinHandle`][anyaccel.ops.pin_memory.handle.PinHandle], DeepSpeed's ``pin_handle`` API over those ops,
  and the
  ``module.pin_handle()`` factory the loaded module offers.

Usage::

    from anyaccel import get_accelerator
    pins = get_accelerator().create_op_builder("PinMemoryBuilder").load().pin_handle()
    buf = pins.new_cpu_locked_tensor(1 << 20, torch.empty(0, dtype=torch.float32))
    assert pins.is_pinned(buf[16:32])
    pins.free_cpu_locked_tensor(buf)

With ``DS_PIN_MEMORY_BACKEND=native`` the accelerator's ``pin_memory`` / ``pin_empty`` / ``unpin_memory`` /
``is_pinned`` use it (``docs/pin_memory.md``). Importing this package loads nothing.
"""

from __future__ import annotations

from anyaccel.lazy_exports import lazy_exports

_EXPORTS = {
    "PinHandle": "anyaccel.ops.pin_memory.handle:PinHandle",
    "PinStats": "anyaccel.ops.pin_memory.handle:PinStats",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
