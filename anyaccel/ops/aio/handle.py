"""DeepSpeed's ``aio_handle`` API over the async I/O op's torch ops (``anyaccel.ops.aio.spec``).

``get_accelerator().create_op_builder("AsyncIOBuilder").load()`` returns an op module whose ``aio_handle(...)``
makes an [`AsyncIOHandle`][anyaccel.ops.aio.handle.AsyncIOHandle] (through
[`AsyncIOModule`][anyaccel.ops.aio.handle.AsyncIOModule], the adapter the DeepSpeed integration's ABI
declaration names, ``anyaccel/integrations/deepspeed/abi/aio.py``), with the constructor arguments, methods and
return values ZeRO-Infinity's swappers and DeepSpeed's fast checkpoint writer use
(``deepspeed/runtime/swap_tensor/*.py``, ``deepspeed/io/*.py``; DeepSpeed 0.19.8,
``csrc/aio/py_lib/py_ds_aio.cpp``):

- ``sync_pread`` / ``sync_pwrite`` / ``async_pread`` / ``async_pwrite`` / ``pread`` / ``pwrite`` / ``read`` /
  ``write`` and ``wait``; a sync call waits for every pending transfer of the handle and returns how many
  finished (DeepSpeed's count), an async call returns 0 once queued;
- ``new_cpu_locked_tensor`` / ``free_cpu_locked_tensor`` / ``is_pinned`` (page-aligned, page-locked buffers:
  `anyaccel.ops.aio.pinned`);
- ``get_block_size``, ``get_queue_depth``, ``get_single_submit``, ``get_overlap_events``,
  ``get_intra_op_parallelism``, ``get_alignment``.

Where anyaccel differs (all documented in ``docs/aio.md``): errors raise typed exceptions
([`anyaccel.ops.aio.errors`][anyaccel.ops.aio.errors]) instead of printing and returning -1 or asserting; ``wait()`` has
a timeout;
sizes need not divide by ``intra_op_parallelism``; ``single_submit`` and ``overlap_events`` (libaio
settings) are accepted and reported but change nothing; buffers on an accelerator go through a host
staging copy, as DeepSpeed's bounce buffer.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import torch

from anyaccel import settings
from anyaccel.ops.aio import errors, pinned

logger = logging.getLogger(__name__)

#: Seconds ``wait()`` waits by default; ``ANYACCEL_AIO_TIMEOUT`` overrides it.
DEFAULT_TIMEOUT_S = settings.AIO_TIMEOUT.default_s
TIMEOUT_ENV = settings.AIO_TIMEOUT.name
#: Longest single wait inside the kernel (seconds): Python gets control back this often (Ctrl-C works).
_WAIT_SLICE_S = 0.25
#: DeepSpeed's O_DIRECT alignment unit; ``get_alignment()`` is this times ``intra_op_parallelism``.
_DS_ALIGNMENT = 512


def default_timeout_s() -> float:
    """``ANYACCEL_AIO_TIMEOUT`` in seconds, else `DEFAULT_TIMEOUT_S`.

    Raises:
        SettingError: (a ``ValueError``) the variable is not a finite positive number of seconds.
    """
    return settings.AIO_TIMEOUT.get()


class AsyncIOHandle:
    """A queue of file transfers between host tensors and files, served by a pool of worker threads.

    Transfers of one handle run concurrently; ``wait()`` returns when all have finished. A transfer moves
    ``buffer.numel() * buffer.element_size()`` bytes at ``file_offset`` (bytes) of the file: any size and
    offset, the bulk through ``O_DIRECT`` (see ``docs/aio.md``). Reads need the file to hold every byte
    (else [`FileTooShortError`][anyaccel.ops.aio.errors.FileTooShortError], before anything is read); writes create the
    file (mode 0600) and never truncate it.

    Files: regular files only, by path or descriptor. A path with a NUL character is refused
    (``ValueError``), and so is a FIFO, socket or device
    ([`AIONotRegularFileError`][anyaccel.ops.aio.errors.AIONotRegularFileError]):
    paths are opened non-blocking and checked with ``fstat`` before anything else happens, so a FIFO is
    refused at once and never waited on (the open is not bounded by the ``wait()`` timeout: it never blocks).

    Buffers: any dtype and shape, contiguous; CPU tensors are read into / written from directly (their
    memory must stay valid until ``wait()``: the handle keeps a reference), accelerator tensors through a
    host staging copy (reads land in the device tensor at ``wait()``). Page-aligned buffers
    ([`new_cpu_locked_tensor`][anyaccel.ops.aio.handle.AsyncIOHandle.new_cpu_locked_tensor]) at 4096-aligned offsets
    take the fastest path.

    Threads: every method may be called from any thread; submissions and reaping are serialised per handle.
    Two pending transfers that share memory or file bytes, where one writes them, are refused
    ([`AIOConflictError`][anyaccel.ops.aio.errors.AIOConflictError]). After ``fork()``, open a new handle in the child.

    Args:
        ops: the loaded op module (``AsyncIOBuilder().load()``).
        block_size: bytes per ``O_DIRECT`` request (1 to 2**30; rounded up to 4096 inside).
        queue_depth: requests in flight per unit of ``intra_op_parallelism``.
        single_submit: libaio's batching switch in DeepSpeed; accepted, reported, no effect here.
        overlap_events: libaio's event overlap switch in DeepSpeed; accepted, reported, no effect here.
        intra_op_parallelism: DeepSpeed's threads per handle; worker threads are
            ``min(queue_depth * intra_op_parallelism, 32)``.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: an argument outside its range (the message names the accepted range).
    """

    def __init__(self, ops: Any, block_size: int = 1024 * 1024, queue_depth: int = 128, single_submit: bool = False,
                 overlap_events: bool = False, intra_op_parallelism: int = 1) -> None:
        from anyaccel.ops import validation
        from anyaccel.ops.aio.spec import SPEC

        self._closed = True  # until the kernel handle exists (a failed __init__ must not close anything)
        sizes = {"block_size": block_size, "queue_depth": queue_depth, "intra_op_parallelism": intra_op_parallelism}
        for name, value in sizes.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"aio_handle: {name}={value!r} is invalid; accepted: an int")
        validation.check_scalars(SPEC.function("aio_open"), sizes, error=ValueError)
        self._block_size = block_size
        self._queue_depth = queue_depth
        self._single_submit = bool(single_submit)
        self._overlap_events = bool(overlap_events)
        self._intra_op_parallelism = intra_op_parallelism
        self._submit_read = ops.aio_submit_read
        self._submit_write = ops.aio_submit_write
        self._wait_op = ops.aio_wait
        self._pending_op = ops.aio_pending
        self._close_op = ops.aio_close
        self._page_lock = ops.aio_page_lock
        self._lock = threading.RLock()
        self._after_wait: list[tuple[torch.Tensor, torch.Tensor]] = []  # (host staging, device target)
        self._validations: list[tuple[bool, torch.Tensor, str | int, int]] = []
        self._id = int(ops.aio_open(block_size, queue_depth, intra_op_parallelism))
        self._closed = False

    # ------------------------------------------------------------------ DeepSpeed's getters
    def get_block_size(self) -> int:
        """The ``block_size`` given (bytes)."""
        return self._block_size

    def get_queue_depth(self) -> int:
        """The ``queue_depth`` given."""
        return self._queue_depth

    def get_single_submit(self) -> bool:
        """The ``single_submit`` given (no effect on this mechanism)."""
        return self._single_submit

    def get_overlap_events(self) -> bool:
        """The ``overlap_events`` given (no effect on this mechanism)."""
        return self._overlap_events

    def get_intra_op_parallelism(self) -> int:
        """The ``intra_op_parallelism`` given."""
        return self._intra_op_parallelism

    def get_alignment(self) -> int:
        """DeepSpeed's buffer-size unit, ``512 * intra_op_parallelism`` bytes (kept for its callers, which size
        buffers by it); any size works here, page multiples at 4096-aligned offsets fastest."""
        return _DS_ALIGNMENT * self._intra_op_parallelism

    # ------------------------------------------------------------------ transfers
    def async_pread(self, buffer: torch.Tensor, filename: str | os.PathLike[str], file_offset: int = 0) -> int:
        """Queue a read of ``buffer``'s bytes from ``filename`` at ``file_offset`` (bytes); returns 0.

        Raises:
            AIOFileNotFoundError, AIOPermissionError, AIOIsADirectoryError: the file cannot be opened.
            AIONotRegularFileError: the file is a FIFO, socket or device.
            FileTooShortError: the file ends before ``file_offset + buffer bytes``.
            AIOConflictError: ``buffer`` overlaps the memory of a pending transfer.
            TypeError, ValueError: a bad argument (the message names the value and the accepted ones).
        """
        self._submit(True, buffer, filename, file_offset, validate=False)
        return 0

    def async_pwrite(self, buffer: torch.Tensor, filename: str | os.PathLike[str] | int | None = None,
                     file_offset: int = 0, *, fd: int | None = None) -> int:
        """Queue a write of ``buffer``'s bytes to ``filename`` (a path, or an open file descriptor, as in
        DeepSpeed's fast writer) at ``file_offset`` (bytes); returns 0. The file is created if missing and
        never truncated; the bytes are durable only after the caller's ``fsync``.

        ``fd=`` names an open file descriptor instead of ``filename``, as DeepSpeed's second ``async_pwrite``
        overload (``buffer, fd, file_offset``) lets a caller write ``async_pwrite(buffer=b, fd=f, file_offset=o)``.

        Raises:
            TypeError: both ``filename`` and ``fd`` are given, or neither.
            AIOFileNotFoundError: the directory does not exist.
            AIOPermissionError: the file or directory is not writable.
            AIONotRegularFileError: the file is a FIFO, socket or device.
            AIOConflictError: the write races a pending transfer on the same memory or file bytes.
            TypeError, ValueError: a bad argument.
        """
        if filename is not None and fd is not None:
            raise TypeError(f"async_pwrite: filename={filename!r} and fd={fd!r} both given; give one of them (a path "
                            "or an open file descriptor)")
        self._submit(False, buffer, filename if fd is None else fd, file_offset, validate=False)
        return 0

    def sync_pread(self, buffer: torch.Tensor, filename: str | os.PathLike[str], file_offset: int = 0) -> int:
        """Read ``buffer``'s bytes from ``filename`` at ``file_offset`` and wait for every pending transfer.

        Returns:
            The number of transfers finished (1 when nothing else was pending), as DeepSpeed.

        Raises what [`async_pread`][anyaccel.ops.aio.handle.AsyncIOHandle.async_pread] and
        [`wait`][anyaccel.ops.aio.handle.AsyncIOHandle.wait] raise.
        """
        return self.pread(buffer, filename, False, False, file_offset)

    def sync_pwrite(self, buffer: torch.Tensor, filename: str | os.PathLike[str] | int, file_offset: int = 0) -> int:
        """Write ``buffer``'s bytes to ``filename`` at ``file_offset`` and wait for every pending transfer.

        Returns:
            The number of transfers finished.

        Raises what [`async_pwrite`][anyaccel.ops.aio.handle.AsyncIOHandle.async_pwrite] and
        [`wait`][anyaccel.ops.aio.handle.AsyncIOHandle.wait] raise (a full disk:
        [`DiskFullError`][anyaccel.ops.aio.errors.DiskFullError]).
        """
        return self.pwrite(buffer, filename, False, False, file_offset)

    def pread(self, buffer: torch.Tensor, filename: str | os.PathLike[str] | int, validate: bool, async_op: bool,
              file_offset: int = 0) -> int:
        """DeepSpeed's ``pread(buffer, filename, validate, async, file_offset)``:
        [`async_pread`][anyaccel.ops.aio.handle.AsyncIOHandle.async_pread] when
        ``async_op``, else [`sync_pread`][anyaccel.ops.aio.handle.AsyncIOHandle.sync_pread]; with ``validate``, the
        bytes are compared with the file's after
        the wait ([`AIOValidationError`][anyaccel.ops.aio.errors.AIOValidationError] on a difference).

        Returns:
            0 when ``async_op``, else the number of transfers finished.
        """
        self._submit(True, buffer, filename, file_offset, validate=bool(validate))
        return 0 if async_op else self.wait()

    def pwrite(self, buffer: torch.Tensor, filename: str | os.PathLike[str] | int, validate: bool, async_op: bool,
               file_offset: int = 0) -> int:
        """DeepSpeed's ``pwrite(buffer, filename, validate, async, file_offset)`` (see
        [`pread`][anyaccel.ops.aio.handle.AsyncIOHandle.pread])."""
        self._submit(False, buffer, filename, file_offset, validate=bool(validate))
        return 0 if async_op else self.wait()

    def read(self, buffer: torch.Tensor, filename: str | os.PathLike[str], validate: bool, file_offset: int = 0) -> int:
        """DeepSpeed's synchronous ``read``: [`pread`][anyaccel.ops.aio.handle.AsyncIOHandle.pread] with
        ``async_op=False``."""
        return self.pread(buffer, filename, validate, False, file_offset)

    def write(self, buffer: torch.Tensor, filename: str | os.PathLike[str], validate: bool,
              file_offset: int = 0) -> int:
        """DeepSpeed's synchronous ``write``: [`pwrite`][anyaccel.ops.aio.handle.AsyncIOHandle.pwrite] with
        ``async_op=False``."""
        return self.pwrite(buffer, filename, validate, False, file_offset)

    @torch.compiler.disable
    def wait(self, timeout: float | None = None) -> int:
        """Wait until every queued transfer has finished, and release them.

        Args:
            timeout: seconds to wait at most; None: ``ANYACCEL_AIO_TIMEOUT``, else 600.

        Returns:
            The number of transfers finished since the last ``wait()`` (0 when none was pending).

        Raises:
            AIOTimeoutError: ``timeout`` passed first; the transfers stay pending (wait again to reap them).
            DiskFullError, FileTooShortError, AIOError: a transfer failed. Raised after every transfer of the
                handle has finished and been released; ``failed`` and ``operations`` count them. Reads into
                accelerator tensors are not copied to the device when any transfer failed.
            AIOValidationError: ``validate=True`` and the file's bytes differ.
            ValueError: ``timeout`` is negative or not finite.

        Side effects: copies reads into accelerator tensors (their host staging copies) to the device.
        """
        limit = default_timeout_s() if timeout is None else float(timeout)
        if not (0 <= limit < float("inf")):
            raise ValueError(f"wait: timeout={timeout!r} is invalid; accepted: a finite number of seconds >= 0, or "
                             "None for the default")
        deadline = time.monotonic() + limit
        with self._lock:
            self._check_open("wait")
            while True:
                remaining = deadline - time.monotonic()
                try:
                    count = self._call(self._wait_op, self._id, max(0.0, min(_WAIT_SLICE_S, remaining)))
                except errors.AIOError:  # every transfer was reaped: forget their copies and checks
                    self._after_wait, self._validations = [], []
                    raise
                if count >= 0:
                    break
                if remaining <= 0:
                    raise errors.AIOTimeoutError(
                        None, f"wait: {self._pending()} transfers still running after {limit:g} s; they stay "
                        f"pending (call wait() again to reap them); raise the timeout, or {TIMEOUT_ENV}, for "
                        "slow disks")
            after, self._after_wait = self._after_wait, []
            checks, self._validations = self._validations, []
        for staging, target in after:
            target.copy_(staging.view(target.shape))
        for read, buffer, file, offset in checks:
            _validate(read, buffer, file, offset)
        return count

    def pending(self) -> int:
        """Transfers queued (running or finished) and not yet reaped by
        [`wait`][anyaccel.ops.aio.handle.AsyncIOHandle.wait]."""
        with self._lock:
            self._check_open("pending")
            return self._pending()

    # ------------------------------------------------------------------ pinned buffers
    def new_cpu_locked_tensor(self, num_elem: int, example_tensor: torch.Tensor) -> torch.Tensor:
        """A 1-D host tensor of ``num_elem`` uninitialised elements of ``example_tensor``'s dtype, page-aligned
        and page-locked where possible (`anyaccel.ops.aio.pinned.new_locked_tensor`).

        Raises:
            ValueError: ``num_elem`` is not an int >= 0.
        """
        return pinned.new_locked_tensor(num_elem, example_tensor.dtype, self._page_lock)

    def free_cpu_locked_tensor(self, tensor: torch.Tensor) -> bool:
        """Unlock a tensor of [`new_cpu_locked_tensor`][anyaccel.ops.aio.handle.AsyncIOHandle.new_cpu_locked_tensor];
        returns whether it was one (torch frees the memory
        with the tensor's last reference)."""
        return pinned.free_locked_tensor(tensor, self._page_lock)

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is page-locked: torch-pinned, or inside a buffer of
        [`new_cpu_locked_tensor`][anyaccel.ops.aio.handle.AsyncIOHandle.new_cpu_locked_tensor]."""
        return pinned.is_locked(tensor)

    # ------------------------------------------------------------------ lifetime
    def close(self, timeout: float | None = None) -> None:
        """Wait for the pending transfers (see [`wait`][anyaccel.ops.aio.handle.AsyncIOHandle.wait]), then stop the
        worker threads. Idempotent.

        Args:
            timeout: seconds to wait at most for the pending transfers; None: ``ANYACCEL_AIO_TIMEOUT``, else 600.

        Raises:
            AIOTimeoutError: ``timeout`` passed first. Nothing is closed or cancelled: the handle stays open and
                its transfers pending, so ``wait()`` or ``close()`` called again reaps them.
            DiskFullError, FileTooShortError, AIOError, AIOValidationError: as ``wait()``; every transfer has
                been reaped, and the handle is closed.
            ValueError: ``timeout`` is negative or not finite (the handle stays open).

        An interruption (``KeyboardInterrupt``) while waiting also leaves the handle open with its transfers
        pending. The finalizer closes a handle nobody closed, cancelling what is still queued after the default
        wait (a warning is logged).
        """
        if self._closed:  # also after a failed __init__, which never made a kernel handle (nor a lock)
            return
        with self._lock:
            if self._closed:
                return
            try:
                if self._pending():
                    self.wait(timeout)
            except errors.AIOTimeoutError:
                limit = default_timeout_s() if timeout is None else float(timeout)
                raise errors.AIOTimeoutError(
                    None, f"close: {self._pending()} transfers still running after {limit:g} s; the handle stays "
                    "open and they stay pending (call wait() or close() again to reap them); raise the timeout, or "
                    f"{TIMEOUT_ENV}, for slow disks") from None
            except errors.AIOError:  # wait() reaped every transfer before raising: nothing is left to keep
                self._shut()
                raise
            # anything else (a bad timeout, Ctrl-C) left the transfers pending: the handle stays open for them
            self._shut()

    def _shut(self) -> None:
        """Close the kernel handle (stops its workers; a transfer still queued is cancelled). Idempotent."""
        if not self._closed:
            self._closed = True
            self._close_op(self._id)

    def __enter__(self) -> AsyncIOHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception as exc:  # never raise from a finalizer
            logger.warning("aio handle %s closed with an error: %s", getattr(self, "_id", "?"), exc)
            if not self._closed:  # nobody can reap them any more: cancel what is left
                self._shut()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"id={self._id}"
        return (f"AsyncIOHandle({state}, block_size={self._block_size}, queue_depth={self._queue_depth}, "
                f"intra_op_parallelism={self._intra_op_parallelism})")

    # ------------------------------------------------------------------ internals
    def _check_open(self, what: str) -> None:
        if self._closed:
            raise errors.AIOHandleError(None, f"{what}: the aio handle is closed; make a new one")

    def _pending(self) -> int:
        return int(self._call(self._pending_op, self._id))

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except RuntimeError as exc:
            typed = errors.from_kernel(exc)
            if typed is None:
                raise
            raise typed from None

    @torch.compiler.disable  # the transfer outlives the call: never inside a graph (see fakes.py)
    def _submit(self, read: bool, buffer: torch.Tensor, file: Any, file_offset: int, validate: bool) -> None:
        what = "pread" if read else "pwrite"
        if not isinstance(buffer, torch.Tensor):
            raise TypeError(f"{what}: buffer={type(buffer).__name__} is invalid; accepted: a torch.Tensor")
        path, fd = _file_argument(what, file)
        if not isinstance(file_offset, int) or isinstance(file_offset, bool) or file_offset < 0:
            raise ValueError(f"{what}: file_offset={file_offset!r} is invalid; accepted: an int >= 0 (bytes)")
        if buffer.layout != torch.strided or not buffer.is_contiguous():
            raise ValueError(f"{what}: buffer (sizes {list(buffer.shape)}, strides {list(buffer.stride())}) is not a "
                             "contiguous dense tensor; pass a contiguous one (a .contiguous() copy would not receive "
                             "what is read)")
        data = buffer.detach()
        staging = None
        if data.device.type != "cpu":  # DeepSpeed's bounce buffer: host memory for the device tensor
            staging = torch.empty(data.numel(), dtype=data.dtype, pin_memory=pinned.accelerator_pinning())
            if not read:
                staging.copy_(data.reshape(-1))
        with self._lock:
            self._check_open(what)
            op = self._submit_read if read else self._submit_write
            self._call(op, self._id, data if staging is None else staging, path, fd, file_offset)
            if staging is not None and read:
                self._after_wait.append((staging, data))
            if validate:
                self._validations.append((read, data, file, file_offset))


def _file_argument(what: str, file: Any) -> tuple[str, int]:
    """``(path, -1)`` for a path, ``("", fd)`` for a file descriptor.

    Raises:
        TypeError: neither a ``str``/``os.PathLike`` nor an ``int``, or an empty path.
        ValueError: a negative descriptor, or a path with a NUL character (the kernel's C string would end
            there: ``"ckpt.pt\\0.tmp"`` would write ``ckpt.pt``).
    """
    if isinstance(file, int) and not isinstance(file, bool):
        if file < 0:
            raise ValueError(f"{what}: fd={file} is invalid; accepted: an open file descriptor (>= 0)")
        return "", file
    if isinstance(file, (str, os.PathLike)):
        path = os.fspath(file)
        if isinstance(path, str) and path:
            cut = path.find("\0")
            if cut >= 0:
                raise ValueError(f"{what}: filename={path!r} contains a NUL character (at index {cut}), which no file "
                                 f"name can hold: the system would cut the path there and use {path[:cut]!r}; "
                                 "accepted: a path without NUL; fix the code that builds the name")
            return path, -1
    raise TypeError(f"{what}: filename={file!r} is invalid; accepted: a non-empty str or os.PathLike path, or an int "
                    "file descriptor")


def _validate(read: bool, buffer: torch.Tensor, file: str | int, offset: int) -> None:
    """Compare ``buffer``'s bytes with the file's at ``offset`` (DeepSpeed's ``validate``).

    Raises:
        AIOValidationError: they differ (the message gives the first differing byte).
    """
    expected = buffer.detach().cpu().contiguous().view(-1).view(torch.uint8)
    nbytes = expected.numel()
    if isinstance(file, int):
        data = os.pread(file, nbytes, offset)
    else:
        with open(file, "rb") as f:
            f.seek(offset)
            data = f.read(nbytes)
    got = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    if got.numel() == nbytes and torch.equal(got, expected):
        return
    diff = (got != expected[:got.numel()]).nonzero()
    first = int(diff[0]) if diff.numel() else got.numel()
    what = "read" if read else "write"
    raise errors.AIOValidationError(
        None, f"validate: after the {what} of {nbytes} bytes at offset {offset} of {file!r}, the file's bytes "
        f"differ from the buffer's from byte {offset + first} on")


class AsyncIOModule:
    """DeepSpeed's ``async_io`` module ABI on a loaded anyaccel op module (the spec's ``deepspeed`` adapter):
    ``module.aio_handle(...)`` makes an [`AsyncIOHandle`][anyaccel.ops.aio.handle.AsyncIOHandle].

    Args:
        module: the [`OpModule`][anyaccel.op_builder.core.module.OpModule] of the ``async_io`` build.
        functions: the ABI function names the module offers (the spec's ``("aio_handle",)``).
    """

    def __init__(self, module: Any, functions: tuple[str, ...] = ("aio_handle",)) -> None:
        self._module = module

    def aio_handle(self, block_size: int = 1024 * 1024, queue_depth: int = 128, single_submit: bool = False,
                   overlap_events: bool = False, intra_op_parallelism: int = 1) -> AsyncIOHandle:
        """A new handle (DeepSpeed's ``aio_handle`` constructor, same arguments and defaults; see
        [`AsyncIOHandle`][anyaccel.ops.aio.handle.AsyncIOHandle])."""
        return AsyncIOHandle(self._module, block_size, queue_depth, single_submit, overlap_events,
                             intra_op_parallelism)
