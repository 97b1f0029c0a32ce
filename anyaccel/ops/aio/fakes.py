"""The validating fakes of the async I/O op's tensor functions (schemas in `anyaccel.ops.aio.spec`).

Registered by the build for its namespace (with the build's device type bound), they run while
``torch.compile`` traces a call and for ``device="meta"`` tensors. They check what the kernel checks before
it touches a file (the spec's scalar ranges, then `check_buffer` and `check_file`, in the
kernel's order and words: ``csrc/aio/aio.cpp``), so a bad call fails the same way while tracing and at run
time; then they refuse the call (`NOT_TRACEABLE`).

Why refuse: a transfer goes on after the op returns, until ``wait()``. A compiled graph cannot express
that: functionalization runs a read on a copy of the buffer and copies it back at once (before the bytes
arrive), and a write's buffer may be reused by the graph's memory planning while it is being written.
Both would silently give wrong bytes, so tracing one of these ops is an error; the handle's methods are
``torch.compiler.disable``-d, so code that calls them inside a compiled function runs them eagerly.
"""

from __future__ import annotations

from typing import Any

from anyaccel.ops import validation

#: The refusal of a valid call (see the module docstring).
NOT_TRACEABLE = ("{op}: cannot run on fake or meta tensors, so torch.compile cannot trace it: the transfer goes on "
                 "after the call returns, which a graph cannot express; call the aio handle outside the compiled "
                 "region (its methods are torch.compiler.disable-d) and wait() there")


def check_buffer(op: str, buffer: Any) -> None:
    """Raise ``RuntimeError`` unless ``buffer`` is a dense, contiguous tensor (any dtype, shape, size)."""
    import torch

    if buffer.layout != torch.strided:
        raise RuntimeError(f"{op}: buffer has a non-strided layout; pass a dense (strided) tensor")
    if not buffer.is_contiguous():
        raise RuntimeError(f"{op}: buffer is not contiguous (sizes {list(buffer.shape)}, strides "
                           f"{list(buffer.stride())}); pass a contiguous tensor (a .contiguous() copy would not "
                           "receive what is read)")


#: The refusal of a path with a NUL character (C would end the path there and open another file).
NUL_IN_PATH = ("{op}: the path contains a NUL character, which no file name can hold (the system would cut the "
               "path there and open another file); pass the path without it")


def check_file(op: str, path: str, fd: int) -> None:
    """Raise ``RuntimeError`` unless exactly one of ``path`` (non-empty, without NUL) and ``fd`` (>= 0) names
    the file."""
    if (not path) == (fd < 0):
        raise RuntimeError(f"{op}: pass either a non-empty path or an fd >= 0, not {'neither' if not path else 'both'}")
    if "\0" in path:
        raise RuntimeError(NUL_IN_PATH.format(op=op))


def _check(op: str, handle: int, buffer: Any, path: str, fd: int, file_offset: int) -> None:
    from anyaccel.ops.aio.spec import SPEC

    validation.check_scalars(SPEC.function(op), {"handle": handle, "fd": fd, "file_offset": file_offset})
    check_buffer(op, buffer)
    check_file(op, path, fd)
    raise RuntimeError(NOT_TRACEABLE.format(op=op))


def aio_submit_read(device_type: str, handle: int, buffer: Any, path: str, fd: int, file_offset: int) -> None:
    """Fake of ``aio_submit_read``: validates like the kernel, then refuses to be traced.

    Args:
        device_type: the build's device type (bound by the builder; the kernel serves CPU tensors).
        handle, buffer, path, fd, file_offset: the op's arguments (see the spec).

    Raises:
        RuntimeError: a scalar outside its range, a non-contiguous or non-strided buffer, or not exactly one
            of path and fd, with the kernel's message; else `NOT_TRACEABLE`.
    """
    _check("aio_submit_read", handle, buffer, path, fd, file_offset)


def aio_submit_write(device_type: str, handle: int, buffer: Any, path: str, fd: int, file_offset: int) -> None:
    """Fake of ``aio_submit_write``: validates like the kernel, then refuses to be traced (see
    `aio_submit_read`).

    Raises:
        RuntimeError: as `aio_submit_read`.
    """
    _check("aio_submit_write", handle, buffer, path, fd, file_offset)
