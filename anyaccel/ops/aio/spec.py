"""The async I/O op family, described once (see [`anyaccel.spec`][anyaccel.spec]): DeepSpeed's ``AsyncIOBuilder``.

File reads and writes between host tensors and files, queued on a pool of worker threads and waited for
later, for ZeRO-Infinity's NVMe offload and fast checkpointing. The torch ops are the low-level surface
(a handle is an integer id: the stable ABI registers functions, not classes); users and DeepSpeed use
[`anyaccel.ops.aio.handle.AsyncIOHandle`][anyaccel.ops.aio.handle.AsyncIOHandle], DeepSpeed's ``aio_handle`` API, which
``load()``'s module
offers as ``module.aio_handle(...)``. Mechanism (``O_DIRECT`` ``pread``/``pwrite`` on a thread pool, chosen
by measurement), guarantees and errors: ``docs/aio.md``; the engine: ``csrc/aio/aio_engine.h``.
"""

from anyaccel.spec import Function, Implementation, NativeBuild, OpSpec

_HANDLE = ("handle", "[1, inf)")
_TRANSFER = "(int handle, Tensor{mut} buffer, str path, int fd, int file_offset) -> ()"
_TRANSFER_RANGES = (_HANDLE, ("fd", "[-1, 2147483647]"), ("file_offset", "[0, inf)"))

SPEC = OpSpec(
    family="aio",
    summary="async file I/O between host tensors and files (O_DIRECT pread/pwrite on a thread pool)",
    functions=(
        Function("aio_open", "(int block_size, int queue_depth, int intra_op_parallelism) -> int",
                 ranges=(("block_size", "[1, 1073741824]"), ("queue_depth", "[1, 65536]"),
                         ("intra_op_parallelism", "[1, 1024]")),
                 doc="open a handle: min(queue_depth * intra_op_parallelism, 32) worker threads; returns its id"),
        Function("aio_close", "(int handle) -> ()", ranges=(_HANDLE,),
                 doc="cancel what is queued, wait for the pieces in flight, stop the workers (no-op if closed)"),
        Function("aio_submit_read", _TRANSFER.format(mut="(a!)"), fake="anyaccel.ops.aio.fakes:aio_submit_read",
                 ranges=_TRANSFER_RANGES,
                 doc="queue a read of buffer.nbytes bytes at file_offset of path (or fd) into buffer"),
        Function("aio_submit_write", _TRANSFER.format(mut=""), fake="anyaccel.ops.aio.fakes:aio_submit_write",
                 ranges=_TRANSFER_RANGES,
                 doc="queue a write of buffer's bytes at file_offset of path (created if missing; not truncated)"),
        Function("aio_wait", "(int handle, float timeout_s) -> int", ranges=(_HANDLE, ("timeout_s", "[0, inf)")),
                 doc="wait up to timeout_s for every queued transfer: -1 if some still run, else how many "
                     "finished; raises after reaping if any failed"),
        Function("aio_pending", "(int handle) -> int", ranges=(_HANDLE,),
                 doc="transfers queued and not yet reaped by aio_wait"),
        Function("aio_page_lock", "(int address, int nbytes, bool lock) -> int",
                 ranges=(("address", "[0, inf)"), ("nbytes", "[0, inf)")),
                 doc="mlock (lock=True) or munlock host memory; returns 0 or the errno"),
    ),
    builds=(
        NativeBuild("AsyncIOBuilder", "async_io", "cpu", sources=("csrc/aio/aio.cpp", "csrc/aio/aio_engine.cpp"),
                    functions=("aio_open", "aio_close", "aio_submit_read", "aio_submit_write", "aio_wait",
                               "aio_pending", "aio_page_lock"),
                    accelerators=("*",)),
    ),
    implementations=(
        Implementation("posix", 10, ("cpu",), build="async_io",
                       description="O_DIRECT pread/pwrite on a worker-thread pool per handle "
                                   "(csrc/aio/aio_engine.cpp); no system library needed"),
    ),
    benchmarks=("benchmarks/aio.py",),
)
