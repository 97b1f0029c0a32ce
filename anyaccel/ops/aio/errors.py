"""Typed errors of the async I/O op, and their decoding from the kernels' messages.

The stable ABI raises every C++ error as ``RuntimeError``; the kernels (``csrc/aio/aio.cpp``,
``aio_engine.cpp``) start the message of each I/O error with a tag,
``[anyaccel.aio kind=<kind> errno=<n> failed=<f> ops=<o>] <text>``, which
[`from_kernel`][anyaccel.ops.aio.errors.from_kernel] turns into
one of the classes below, adding the fix for the errno. Every class is an
[`AIOError`][anyaccel.ops.aio.errors.AIOError], itself an
``OSError`` carrying ``errno``, so callers catch what they mean:

================================  =====================================  ======================================
class                             also an                                when
================================  =====================================  ======================================
[`AIOFileNotFoundError`][anyaccel.ops.aio.errors.AIOFileNotFoundError]     ``FileNotFoundError``                  the
file (reads) or its directory is
                                                                         missing (ENOENT)
[`AIOPermissionError`][anyaccel.ops.aio.errors.AIOPermissionError]       ``PermissionError``                    not
readable / writable: read-only
                                                                         file or file system (EACCES, EPERM,
                                                                         EROFS)
[`AIOIsADirectoryError`][anyaccel.ops.aio.errors.AIOIsADirectoryError]     ``IsADirectoryError``                  the
path is a directory (EISDIR)
[`DiskFullError`][anyaccel.ops.aio.errors.DiskFullError]            ``OSError``                            no space,
quota or file-size limit
                                                                         (ENOSPC, EDQUOT, EFBIG)
[`FileTooShortError`][anyaccel.ops.aio.errors.FileTooShortError]        ``EOFError``                           a read
past the end of the file: the
                                                                         file is shorter than the tensor
[`AIONotRegularFileError`][anyaccel.ops.aio.errors.AIONotRegularFileError]   ``ValueError``                         the
path or fd is a FIFO, socket or
                                                                         device, not a regular file
[`AIOConflictError`][anyaccel.ops.aio.errors.AIOConflictError]         ``ValueError``                         a transfer
races a pending one on the
                                                                         same memory or file bytes
[`AIOTimeoutError`][anyaccel.ops.aio.errors.AIOTimeoutError]          ``TimeoutError``                       ``wait()``
ran out of time (the
                                                                         transfers stay pending)
[`AIOHandleError`][anyaccel.ops.aio.errors.AIOHandleError]           ``ValueError``                         the handle
is closed, or was opened
                                                                         in the parent of a fork
[`AIOValidationError`][anyaccel.ops.aio.errors.AIOValidationError]       ``ValueError``
``validate=True`` found different
                                                                         bytes in the file
[`AIOError`][anyaccel.ops.aio.errors.AIOError]                                                        any other OS error
(EIO, EBADF, ...)
================================  =====================================  ======================================
"""

from __future__ import annotations

import errno as errno_codes
import re

#: What to do about an errno, appended to the message as "fix: ...".
FIXES: dict[int, str] = {
    errno_codes.ENOENT: "check the path; a write creates the file but not its directory, so create the directory "
                        "first",
    errno_codes.EACCES: "the file or its directory is not accessible to this process: choose a location it may "
                        "write (reads need read permission) or fix the permissions",
    errno_codes.EPERM: "the file is not writable (read-only or immutable, chattr +i): choose another file or make it "
                       "writable",
    errno_codes.EROFS: "the file system is mounted read-only: choose a directory on a writable file system",
    errno_codes.EISDIR: "pass the path of a file, not of a directory",
    errno_codes.ENOSPC: "free space on that file system, or point the offload / checkpoint directory at one with "
                        "room for every file",
    errno_codes.EDQUOT: "the disk quota of this user is exhausted: free space or raise the quota",
    errno_codes.EFBIG: "the file would pass the process's file-size limit (`ulimit -f`) or the largest file the "
                       "file system holds: raise the limit or split the data",
    errno_codes.EIO: "the device reported an I/O error: see the kernel log (`dmesg`) and the device's health",
    errno_codes.EBADF: "pass a file descriptor open for this direction (O_RDONLY/O_RDWR to read, O_WRONLY/O_RDWR to "
                       "write)",
    errno_codes.EMFILE: "the process has too many open files: wait() for pending transfers or raise `ulimit -n`",
    errno_codes.ECANCELED: "the handle was closed while the transfer was queued: wait() before close()",
}

_TAG = re.compile(r"^\[anyaccel\.aio ((?:\w+=\S+ ?)+)\] ", re.DOTALL)


class AIOError(OSError):
    """Base of the async I/O op's errors: an ``OSError`` with ``errno`` (None when no OS call failed).

    Attributes:
        failed: how many transfers of the failing ``wait()`` failed (0 for errors raised at submission).
        operations: how many transfers that ``wait()`` reaped, failed ones included (0 at submission).
    """

    def __init__(self, err: int | None, message: str, failed: int = 0, operations: int = 0) -> None:
        super().__init__(err, message)
        self.failed = failed
        self.operations = operations

    def __str__(self) -> str:
        return str(self.strerror)

    def __reduce__(self):  # picklable by its constructor arguments (multiprocessing, pytest-xdist)
        return (type(self), (self.errno, self.strerror, self.failed, self.operations))


class AIOFileNotFoundError(AIOError, FileNotFoundError):
    """The file to read, or the directory of a file to write, does not exist (ENOENT)."""


class AIOPermissionError(AIOError, PermissionError):
    """The file cannot be opened for this direction: read-only file, directory or file system."""


class AIOIsADirectoryError(AIOError, IsADirectoryError):
    """The path names a directory."""


class DiskFullError(AIOError):
    """A write ran out of room: no space (ENOSPC), quota (EDQUOT) or file-size limit (EFBIG).

    Bytes before the failing piece may have been written; the file's content is not the buffer's.
    """


class FileTooShortError(AIOError, EOFError):
    """A read needs bytes past the end of the file (the file is shorter than offset + tensor bytes).

    Raised before anything is read when the file is already short, and by ``wait()`` when it shrank during
    the read; never a silent partial read.
    """


class AIONotRegularFileError(AIOError, ValueError):
    """The path or file descriptor is a FIFO, socket, character or block device, not a regular file.

    Refused at submission, before any byte moves: such a file has no bytes of its own at file offsets (a
    FIFO's ``pread`` fails, ``/dev/zero`` never ends), and opening a FIFO blocks until a peer opens the
    other end. The open that finds out is non-blocking, so the refusal is immediate.
    """


class AIOConflictError(AIOError, ValueError):
    """A transfer would race a pending one: both use the same memory or file bytes and one writes them."""


class AIOTimeoutError(AIOError, TimeoutError):
    """``wait()`` ran longer than its timeout; the transfers stay pending and a later ``wait()`` reaps them."""


class AIOHandleError(AIOError, ValueError):
    """The handle is closed, or was opened in another process (before a ``fork()``)."""


class AIOValidationError(AIOError, ValueError):
    """``validate=True``: the file's bytes differ from the buffer's after the transfer."""


_BY_ERRNO: dict[int, type[AIOError]] = {
    errno_codes.ENOENT: AIOFileNotFoundError,
    errno_codes.EACCES: AIOPermissionError,
    errno_codes.EPERM: AIOPermissionError,
    errno_codes.EROFS: AIOPermissionError,
    errno_codes.EISDIR: AIOIsADirectoryError,
    errno_codes.ENOSPC: DiskFullError,
    errno_codes.EDQUOT: DiskFullError,
    errno_codes.EFBIG: DiskFullError,
}
_BY_KIND: dict[str, type[AIOError]] = {
    "short_file": FileTooShortError,
    "conflict": AIOConflictError,
    "handle": AIOHandleError,
    "not_regular": AIONotRegularFileError,
}


def from_kernel(exc: BaseException) -> AIOError | None:
    """The typed error for a ``RuntimeError`` raised by an aio kernel, or None when it carries no aio tag
    (an argument check: those messages are the fakes' and stay ``RuntimeError``).

    Args:
        exc: the exception the torch op raised.

    Returns:
        An [`AIOError`][anyaccel.ops.aio.errors.AIOError] subclass instance whose message is the kernel's text plus ``";
        fix: ..."`` for
        known errnos.
    """
    text = str(exc)
    m = _TAG.match(text)
    if m is None:
        return None
    tags = dict(item.split("=", 1) for item in m[1].split())
    err = int(tags.get("errno", "0")) or None
    kind = tags.get("kind", "os")
    message = text[m.end():]
    cls = _BY_KIND.get(kind) or (_BY_ERRNO.get(err, AIOError) if err is not None else AIOError)
    fix = FIXES.get(err) if err is not None and kind == "os" else None
    if fix:
        message += f"; fix: {fix}"
    return cls(err, message, int(tags.get("failed", "0")), int(tags.get("ops", "0")))
