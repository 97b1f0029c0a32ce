"""The pinned host memory op family, described once (see [`anyaccel.spec`][anyaccel.spec]): DeepSpeed's
``PinMemoryBuilder``.

Page-aligned host allocations of exact size (whole pages, no caching allocator rounding them to powers of
two), locked in RAM with ``mlock`` where asked and allowed (``RLIMIT_MEMLOCK``), for ZeRO-Offload's big host
buffers. The torch ops are the low-level surface (a region is its base address: the stable ABI registers
functions, not classes); users and DeepSpeed use
[`anyaccel.ops.pin_memory.handle.PinHandle`][anyaccel.ops.pin_memory.handle.PinHandle], DeepSpeed's
``pin_handle`` API, which ``load()``'s module offers as ``module.pin_handle()``. Lifetime, guarantees and the
device registration done by the accelerator: ``docs/pin_memory.md``; the table: ``csrc/pin_memory/pin_memory.cpp``.
"""

from anyaccel.spec import Function, Implementation, NativeBuild, OpSpec

_ADDRESS = ("address", "[0, inf)")

SPEC = OpSpec(
    family="pin_memory",
    summary="page-aligned host allocations locked with mlock (DeepSpeed's native pinned memory)",
    functions=(
        Function("pin_alloc", "(int nbytes, bool lock) -> int", ranges=(("nbytes", "[1, inf)"),),
                 doc="allocate nbytes rounded up to whole pages, page-aligned, mlock-ed when lock; returns the "
                     "base address; raises when the memory cannot be allocated"),
        Function("pin_find", "(int address, int nbytes) -> int", ranges=(_ADDRESS, ("nbytes", "[0, inf)")),
                 doc="base address of the pinned region holding bytes [address, address + nbytes), else 0"),
        Function("pin_lock_state", "(int base) -> int", ranges=(("base", "[0, inf)"),),
                 doc="-1 not asked to lock, 0 mlock-ed, > 0 mlock's errno; -2 when base is no pinned region"),
        Function("pin_release", "(int address) -> int", ranges=(_ADDRESS,),
                 doc="end the pinning of the region at base address (munlock); the memory stays until "
                     "pin_free; 1 if it was pinned, else 0"),
        Function("pin_free", "(int address) -> int", ranges=(_ADDRESS,),
                 doc="munlock and free the region at base address; 1 if it was a region, else 0 (nothing freed)"),
        Function("pin_stats", "(int which) -> int", ranges=(("which", "[0, 5]"),),
                 doc="0 pinned regions, 1 their bytes, 2 mlock-ed regions, 3 their bytes, 4 released regions "
                     "not yet freed, 5 their bytes"),
    ),
    builds=(
        NativeBuild("PinMemoryBuilder", "pin_memory", "cpu", sources=("csrc/pin_memory/pin_memory.cpp",),
                    functions=("pin_alloc", "pin_find", "pin_lock_state", "pin_release", "pin_free", "pin_stats"),
                    accelerators=("*",)),
    ),
    implementations=(
        Implementation("posix", 10, ("cpu",), build="pin_memory",
                       description="posix_memalign + mlock within RLIMIT_MEMLOCK (csrc/pin_memory/pin_memory.cpp)"),
    ),
)
