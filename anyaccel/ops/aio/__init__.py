"""Async file I/O between host tensors and files: DeepSpeed's ``AsyncIOBuilder`` / ``aio_handle`` on anyaccel.

- ``spec.py``: the op spec (torch ops ``aio_open``, ``aio_submit_read``, ``aio_wait``, ...);
- ``handle.py``: [`AsyncIOHandle`][anyaccel.ops.aio.handle.AsyncIOHandle], DeepSpeed's ``aio_handle`` API over those
  ops, and the
  ``module.aio_handle(...)`` factory the loaded module offers;
- ``pinned.py``: page-aligned, page-locked host buffers (``new_cpu_locked_tensor``);
- ``errors.py``: the typed errors; ``fakes.py``: the validating fakes.

Usage::

    from anyaccel import get_accelerator
    aio = get_accelerator().create_op_builder("AsyncIOBuilder").load()
    h = aio.aio_handle(block_size=1 << 20, queue_depth=8)
    buf = h.new_cpu_locked_tensor(1 << 20, torch.empty(0, dtype=torch.float32))
    h.sync_pwrite(buf, "/nvme/x.bin")
    h.async_pread(buf, "/nvme/x.bin"); assert h.wait() == 1

Importing this package loads nothing (see ``docs/aio.md``).
"""

from __future__ import annotations

from anyaccel.lazy_exports import lazy_exports

_EXPORTS = {
    "AsyncIOHandle": "anyaccel.ops.aio.handle:AsyncIOHandle",
    "AIOError": "anyaccel.ops.aio.errors:AIOError",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
