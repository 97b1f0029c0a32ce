"""CPU SIMD level ("ISA level") selection for CPU ops.

The level decides exactly one preprocessor macro and the matching compiler flags (table in
docs/architecture.md, "CPU ISA levels"), and it is part of the op's cache key, so an AVX-512 build is
never loaded on a CPU without AVX-512 (where it would die of an illegal instruction).

Detection is instant: on x86 it reads ``torch.backends.cpu.get_cpu_capability()`` (PyTorch's own
cpuinfo-based dispatch level); on aarch64, where torch names an SVE level only for one vector length, it reads
the kernel's hardware capability bits (``getauxval(AT_HWCAP)``, else the ``Features`` line of
``/proc/cpuinfo``) and keeps the levels whose ``cpuinfo_flags`` are all there (``sve`` for SVE).
py-cpuinfo, which costs about a second per call because it starts a subprocess, is called at most once per
process and only off the warm path: to double-check a level forced with ``ANYACCEL_CPU_ISA``
that torch does not report, and for the report.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from anyaccel import settings
from anyaccel.op_builder.errors import ISAError

logger = logging.getLogger(__name__)

ISA_ENV = settings.CPU_ISA.name


@dataclass(frozen=True)
class ISALevel:
    """One CPU SIMD level.

    Attributes:
        name: the level's name, as accepted by ``ANYACCEL_CPU_ISA``.
        macro: the one preprocessor macro defined for it (None for ``portable``).
        flags: the compiler flags that enable its instructions (GCC/Clang spelling).
        machines: the ``platform.machine()`` values it exists on (empty: every machine).
        cpuinfo_flags: the py-cpuinfo flags a CPU must report to run it (on aarch64 also the Linux feature
            names of `arm_features`, which py-cpuinfo reports there as flags).
    """

    name: str
    macro: str | None
    flags: tuple[str, ...]
    machines: frozenset[str]
    cpuinfo_flags: tuple[str, ...]

    def compile_args(self) -> list[str]:
        """The macro definition (if any) followed by the flags, ready for the compiler command line."""
        return ([f"-D{self.macro}"] if self.macro else []) + list(self.flags)


_X86 = frozenset({"x86_64", "AMD64", "amd64", "i686", "i386"})
_ARM64 = frozenset({"aarch64", "arm64", "ARM64"})

# Source: docs/architecture.md "CPU ISA levels"; cpuinfo flag names as py-cpuinfo spells them.
ISA_LEVELS: dict[str, ISALevel] = {
    lvl.name: lvl
    for lvl in (
        ISALevel("avx512", "ANYACCEL_ISA_AVX512",
                 ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mf16c"), _X86,
                 ("avx512f", "avx512bw", "avx512vl", "avx512dq", "fma", "f16c")),
        ISALevel("avx2", "ANYACCEL_ISA_AVX2", ("-mavx2", "-mfma", "-mf16c"), _X86, ("avx2", "fma", "f16c")),
        # Vector-length agnostic SVE (any length from 128 to 2048 bits): GCC 8+ and Clang 7+ accept the flag.
        ISALevel("sve", "ANYACCEL_ISA_SVE", ("-march=armv8.2-a+sve",), _ARM64, ("sve",)),
        # NEON (Advanced SIMD) and its fp16 conversions are baseline on aarch64; the flag states it.
        ISALevel("neon", "ANYACCEL_ISA_NEON", ("-march=armv8-a+simd",), _ARM64, ()),
        ISALevel("portable", None, (), frozenset(), ()),
    )
}

# torch.backends.cpu.get_cpu_capability() -> the levels it implies (PyTorch's ATen CPU capability names).
_CAPABILITY_LEVELS: dict[str, tuple[str, ...]] = {
    "AVX512": ("avx512", "avx2", "portable"),
    "AVX2": ("avx2", "portable"),
}


# Linux AT_HWCAP bits of aarch64 (arch/arm64/include/uapi/asm/hwcap.h: HWCAP_FP, HWCAP_ASIMD, HWCAP_FPHP,
# HWCAP_ASIMDHP, HWCAP_SVE) under the names /proc/cpuinfo's "Features" line and py-cpuinfo use.
_AT_HWCAP = 16
_ARM64_HWCAP_BITS: dict[str, int] = {"fp": 1 << 0, "asimd": 1 << 1, "fphp": 1 << 9, "asimdhp": 1 << 10,
                                     "sve": 1 << 22}


def _read_hwcap() -> int | None:
    """``getauxval(AT_HWCAP)`` from the C library, or None where there is none (not glibc/musl Linux)."""
    import ctypes

    try:
        getauxval = ctypes.CDLL(None).getauxval
    except (OSError, AttributeError):
        return None
    getauxval.restype = ctypes.c_ulong
    getauxval.argtypes = [ctypes.c_ulong]
    return int(getauxval(_AT_HWCAP))


def _read_proc_cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def arm_features(hwcap: int | None = None, cpuinfo_text: str | None = None) -> frozenset[str]:
    """The aarch64 CPU features this process may use, as Linux names them (``asimd``, ``sve``, ...).

    Instant: no subprocess. The hardware capability bits the kernel passes the process (``getauxval(AT_HWCAP)``)
    are the authority (they are also what a kernel that disabled SVE clears); where they cannot be read, the
    ``Features`` line of ``/proc/cpuinfo``. Only meaningful on aarch64.

    Args:
        hwcap: the ``AT_HWCAP`` word (for tests); read from the C library when None and ``cpuinfo_text`` is None.
        cpuinfo_text: the text of ``/proc/cpuinfo`` (for tests); read when needed and None.

    Returns:
        The feature names; empty when neither source can be read (then only NEON and portable are chosen).
    """
    if hwcap is None and cpuinfo_text is None:
        hwcap = _read_hwcap()
    if hwcap is not None and hwcap != 0:
        return frozenset(name for name, bit in _ARM64_HWCAP_BITS.items() if hwcap & bit)
    text = _read_proc_cpuinfo() if cpuinfo_text is None else cpuinfo_text
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "features":
            return frozenset(value.split())
    return frozenset()


def torch_capability() -> str:
    """Return ``torch.backends.cpu.get_cpu_capability()`` (e.g. "AVX512", "AVX2", "DEFAULT"); instant."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def supported_levels(capability: str | None = None, machine: str | None = None,
                     features: frozenset[str] | None = None) -> tuple[str, ...]:
    """The levels this CPU runs, best first (the order of `ISA_LEVELS`).

    On x86 torch's CPU capability decides; on other machines the levels of that machine whose
    ``cpuinfo_flags`` are all among the CPU's features (`arm_features` on aarch64).

    Args:
        capability: torch's CPU capability string; read from torch when None (x86 only).
        machine: ``platform.machine()``; read when None.
        features: the CPU's feature names (for tests, e.g. ``frozenset({"sve"})`` to fake an SVE CPU); read
            with `arm_features` when None and ``machine`` is this machine, else none.

    Returns:
        Level names, best first, always ending with ``portable``.
    """
    this_machine = platform.machine()
    machine = this_machine if machine is None else machine
    if machine in _X86:
        capability = torch_capability() if capability is None else capability
        return _CAPABILITY_LEVELS.get(capability.upper(), ("portable",))
    if features is None:
        features = arm_features() if machine == this_machine and machine in _ARM64 else frozenset()
    found = tuple(lv.name for lv in ISA_LEVELS.values()
                  if lv.machines and machine in lv.machines and level_supported_by_flags(lv, features, machine))
    return found + ("portable",)


@functools.lru_cache(maxsize=1)
def cpuinfo_flags() -> frozenset[str]:
    """The CPU feature flags py-cpuinfo reports, computed once per process (about 1.1 s).

    Side effects: py-cpuinfo starts a subprocess. Returns an empty set when py-cpuinfo is not installed
    or fails.
    """
    try:
        import cpuinfo
    except ImportError:
        logger.debug("py-cpuinfo is not installed; no CPU flag refinement")
        return frozenset()
    try:
        return frozenset(cpuinfo.get_cpu_info().get("flags", ()))
    except (OSError, ValueError, RuntimeError) as exc:  # py-cpuinfo's own failures
        logger.debug("py-cpuinfo failed: %s", exc)
        return frozenset()


def level_supported_by_flags(level: ISALevel, flags: frozenset[str], machine: str) -> bool:
    """Whether a CPU with py-cpuinfo ``flags`` on ``machine`` can run ``level``."""
    if level.machines and machine not in level.machines:
        return False
    return all(f in flags for f in level.cpuinfo_flags)


def resolve_isa(
    env: Mapping[str, str] | None = None,
    capability: str | None = None,
    machine: str | None = None,
    implemented: Sequence[str] | None = None,
    features: frozenset[str] | None = None,
) -> ISALevel:
    """Choose the CPU ISA level for a build.

    ``ANYACCEL_CPU_ISA`` wins when set; otherwise the best level torch reports for this CPU among the levels
    the op's sources implement (an op spec's ``isa_levels``; every level when None). This is the priority
    order of a CPU op's ISA implementations: the first level both the CPU runs and the sources offer.

    Args:
        env: the environment to read ``ANYACCEL_CPU_ISA`` from; ``os.environ`` when None.
        capability: torch's CPU capability (for tests); read from torch when None.
        machine: ``platform.machine()`` (for tests); read when None.
        implemented: the levels the sources implement, best first; ``portable`` is always accepted.
        features: the CPU's feature names on non-x86 machines (for tests); see `supported_levels`.

    Returns:
        The chosen `ISALevel`.

    Raises:
        ISAError: the variable names no level (the message lists the valid ones), or names a level this
            CPU cannot run (checked against torch, then once against py-cpuinfo before refusing).
    """
    env = os.environ if env is None else env
    machine = platform.machine() if machine is None else machine
    levels = supported_levels(capability, machine, features)
    if implemented is not None:
        levels = tuple(lv for lv in levels if lv in implemented or lv == "portable")
    forced = (settings.CPU_ISA.raw(env) or "").lower()
    if not forced:
        return ISA_LEVELS[levels[0]]
    level = ISA_LEVELS.get(forced)
    if level is None or (implemented is not None and forced not in implemented and forced != "portable"):
        valid = [lv for lv in ISA_LEVELS if implemented is None or lv in implemented or lv == "portable"]
        raise ISAError(
            f"{ISA_ENV}={env[ISA_ENV]!r} is not a CPU ISA level of this op; valid levels: {', '.join(valid)}. "
            f"Set it to one of these or unset it to use the best level of this CPU ({levels[0]})."
        )
    if level.name in levels:
        return level
    if level_supported_by_flags(level, cpuinfo_flags(), machine):
        logger.info("%s=%s: torch does not report it but py-cpuinfo does; using it", ISA_ENV, level.name)
        return level
    raise ISAError(
        f"{ISA_ENV}={level.name} is not supported by this CPU ({machine}, torch capability "
        f"{capability or torch_capability()}); supported levels: {', '.join(levels)}. "
        f"Choose one of these, or build on the machine that will run the op."
    )
