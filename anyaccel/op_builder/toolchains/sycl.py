"""The SYCL op-builder backend's toolkits (DPC++ and AdaptiveCpp) as data, finding the compiler, and the XPU arch list.

A [`SYCLToolkit`][anyaccel.op_builder.toolchains.sycl.SYCLToolkit] holds the toolchain record of one SYCL
compiler (``icpx`` or ``acpp``, `anyaccel.op_builder.toolchains.records`: how it is found and probed, its flags
per target, its source suffixes) and says which of the record's targets the backend's builds take.

Two kinds of functions, as in `anyaccel.op_builder.toolchains.host`:

- *identity* functions (`find_sycl_compiler`, `xpu_arch_list`) look only at the file system
  and the environment; the cache key uses them, so a warm load spawns no process;
- `probe_sycl_compiler` RUNS the compiler (the records' probes: ``icpx --version``, then
  ``acpp --acpp-version``) and is called only while building (``anyaccel report`` probes the same records). A
  compiler is trusted only when it runs and its banner is one of the records': a stale ``ONEAPI_ROOT`` that points
  at a removed install is never taken for a toolchain.

Where the compiler is looked for: the records' look-ups, icpx's first (`TOOLKITS` order):

1. ``ANYACCEL_SYCL_CXX`` (a name or path, like ``CXX``; both records' variable); set but naming nothing -> an
   error, never a silent fallback;
2. ``icpx`` on ``PATH`` (what ``torch.utils.cpp_extension`` itself runs), then ``$ONEAPI_ROOT/compiler/latest/bin``
   and the default oneAPI directory (candidates only; the compiler must still pass the ``--version`` check);
3. ``acpp`` on ``PATH``, then ``$ACPP_HOME/bin``: AdaptiveCpp (https://github.com/AdaptiveCpp/AdaptiveCpp), an
   open SYCL 2020 implementation, used only where no icpx is installed.

The two build differently (`SYCLToolkit.torch_xpu`): DPC++'s XPU builds through torch's own SYCL rules;
host-device builds, and AdaptiveCpp's, through the host-compiler ninja build with the SYCL compiler as the
compiler (see `anyaccel.op_builder.backends.sycl`).

The arch list follows ``torch.utils.cpp_extension._get_sycl_arch_list`` (torch 2.7+): ``TORCH_XPU_ARCH_LIST``
when set, else the archs the running torch was built for (``torch.xpu.get_arch_list()``) without the
``dg2*`` entries, which torch also drops by default (no fp64 in hardware).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from anyaccel import settings
from anyaccel.op_builder.errors import ToolchainError
from anyaccel.op_builder.toolchains import records

logger = logging.getLogger(__name__)

#: The override variable, read like ``CXX``: its first word is a compiler name or path.
SYCL_CXX_ENV = settings.SYCL_CXX.name
#: torch's variable for the device architectures of SYCL ahead-of-time compilation ("pvc,bmg").
ARCH_LIST_ENV = "TORCH_XPU_ARCH_LIST"
#: The compiler name torch's ninja rule runs (``sycl = icpx`` in ``_write_ninja_file``).
TORCH_SYCL_COMPILER_NAME = "icpx"
#: `SyclCompiler.flavour` values: the toolkits' (and their records') names.
DPCPP = "icpx"
ACPP = "acpp"
ONEAPI_ROOT_ENV = "ONEAPI_ROOT"
#: How long ``--version`` may take, seconds (the first run of icpx on a cold disk takes a few seconds).
VERSION_TIMEOUT_S = 60.0
# A device architecture name as accepted by ocloc's -device (pvc, bmg, dg2-g10, xe-lpg, 12.60.7, ...).
_ARCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class SYCLToolkit:
    """How the SYCL backend builds with one SYCL compiler: its toolchain record and the routes it takes.

    Attributes:
        name: the toolkit's name, its record's (``"icpx"``, ``"acpp"``).
        toolchain: the compiler's record: its look-up, probe, flags per target, source suffixes and the flags
            a ``.sycl`` source needs.
        host_device_target: the record's target of a host-device build (the SYCL runtime's CPU device):
            ``"spir64_x86_64"`` (DPC++'s OpenCL CPU device), ``"omp"`` (AdaptiveCpp's OpenMP backend).
        torch_xpu: its objects can share torch's XPU queue (a DPC++ ``sycl::queue``), so it makes XPU builds,
            through torch's SYCL rules; False: XPU builds are refused (AdaptiveCpp).
    """

    name: str
    toolchain: records.Toolchain
    host_device_target: str
    torch_xpu: bool


#: The SYCL toolkits, best first (icpx where installed, else acpp). Backend differences as data.
TOOLKITS: dict[str, SYCLToolkit] = {t.name: t for t in (
    SYCLToolkit(DPCPP, records.TOOLCHAINS["icpx"], host_device_target="spir64_x86_64", torch_xpu=True),
    SYCLToolkit(ACPP, records.TOOLCHAINS["acpp"], host_device_target="omp", torch_xpu=False),
)}


@dataclass(frozen=True)
class SyclCompiler:
    """A SYCL compiler that ran and identified itself as one of the `TOOLKITS`' records.

    Attributes:
        path: its absolute path (symlinks kept).
        version: (major, minor, patch) from the banner, e.g. (2025, 0, 4).
        banner: the first line of its version output.
        home: the install root, ``realpath(path)/../..`` (what torch calls ``SYCL_HOME``: ``include/`` and
            ``lib/`` with ``libsycl.so`` live there).
        toolkit: the toolkit whose record it answered as.
    """

    path: Path
    version: tuple[int, int, int]
    banner: str
    home: Path
    toolkit: SYCLToolkit = TOOLKITS[DPCPP]

    @property
    def flavour(self) -> str:
        """The toolkit's name: `DPCPP` (icpx, intel/llvm clang++) or `ACPP` (AdaptiveCpp's ``acpp``)."""
        return self.toolkit.name

    @property
    def torch_version(self) -> int:
        """The version as ``torch.utils.cpp_extension._get_icpx_version`` writes it: 2025.0.4 -> 20250004."""
        major, minor, patch = self.version
        return int(f"{major}{minor:02}{patch:02}")


def find_sycl_compiler(env: Mapping[str, str] | None = None) -> Path | None:
    """The SYCL compiler candidate, by file-system lookups only (no process; used by the cache key): the first
    `TOOLKITS` record `records.locate` finds.

    Args:
        env: environment to read ``ANYACCEL_SYCL_CXX``, ``PATH``, ``ONEAPI_ROOT`` and ``ACPP_HOME`` from;
            ``os.environ`` when None.

    Returns:
        The absolute path of the first candidate in the order of the module docstring (icpx before acpp), or
        None.

    Raises:
        ToolchainError: ``sycl_compiler_missing`` when ``ANYACCEL_SYCL_CXX`` is set but names nothing executable.
    """
    env = os.environ if env is None else env
    return next((p for p in (records.locate(t.toolchain, env) for t in TOOLKITS.values()) if p is not None), None)


def probe_sycl_compiler(path: Path, timeout: float = VERSION_TIMEOUT_S) -> SyclCompiler:
    """Probe ``path`` as each of the `TOOLKITS`' records in turn (`records.probe`: ``--version`` for icpx,
    ``--acpp-version`` for acpp) and accept it as the first whose banner it prints.

    Args:
        path: the candidate from `find_sycl_compiler`.
        timeout: seconds to wait for each run.

    Returns:
        The `SyclCompiler` (``flavour`` `DPCPP` or `ACPP`; for AdaptiveCpp, ``version`` is AdaptiveCpp's and
        ``banner`` its first line).

    Raises:
        ToolchainError: ``sycl_compiler_missing`` when it does not run, or answers as none of the records (e.g. a
            plain g++ named by mistake); the message quotes what it printed.

    Side effects: spawns the compiler once per record tried.
    """
    tried = []
    for toolkit in TOOLKITS.values():
        found = records.probe(toolkit.toolchain, path, timeout)
        if found.ok:
            major, minor, patch = found.numbers(3)
            return SyclCompiler(path=path, version=(major, minor, patch), banner=found.banner,
                                home=Path(os.path.realpath(path)).parent.parent, toolkit=toolkit)
        if not found.ran:
            raise ToolchainError("sycl_compiler_missing", f"the SYCL compiler {path} does not run ({found.why_not}); "
                                 f"install the oneAPI DPC++/C++ compiler and source its setvars.sh (or AdaptiveCpp), "
                                 f"or fix {SYCL_CXX_ENV}")
        tried.append(found.why_not)
    raise ToolchainError(
        "sycl_compiler_missing",
        f"{path} is not a SYCL compiler: {'; '.join(tried)}; SYCL sources need Intel's icpx (oneAPI Base Toolkit), "
        f"an intel/llvm clang++ or AdaptiveCpp's acpp, named by {SYCL_CXX_ENV} or found as "
        f"{' (else '.join(TOOLKITS)}) on PATH",
    )


def require_sycl_compiler(env: Mapping[str, str] | None = None) -> SyclCompiler:
    """Find the SYCL compiler and check it by running it (build time only).

    Raises:
        ToolchainError: ``sycl_compiler_missing`` naming every place looked at when no candidate exists, or the
            errors of `find_sycl_compiler` and `probe_sycl_compiler`.

    Side effects: runs the candidate's version probes.
    """
    env = os.environ if env is None else env
    path = find_sycl_compiler(env)
    if path is None:
        where = "; ".join(records.searched(t.toolchain, env) for t in TOOLKITS.values())
        raise ToolchainError(
            "sycl_compiler_missing",
            f"no SYCL compiler found ({where}); XPU ops compile SYCL sources with Intel's icpx: install "
            f"the oneAPI DPC++/C++ compiler and `source /opt/intel/oneapi/setvars.sh` (or put AdaptiveCpp's "
            f"{ACPP} on PATH), or set {SYCL_CXX_ENV} to it",
        )
    return probe_sycl_compiler(path)


def parse_arch_list(text: str) -> list[str]:
    """Parse a ``TORCH_XPU_ARCH_LIST`` value ("pvc,bmg" or "pvc; xe-lpg") into sorted, unique names.

    Raises:
        ValueError: an entry is not an architecture name (letters, digits, '.', '-', '_'); names it.
    """
    entries = [e for e in re.split(r"[;,\s]+", text.strip()) if e]
    for e in entries:
        if not _ARCH.match(e):
            raise ValueError(f"{ARCH_LIST_ENV} entry {e!r} is not a device architecture name (e.g. 'pvc', 'bmg', "
                             f"'xe-lpg'); fix {ARCH_LIST_ENV}")
    return sorted(set(entries))


def xpu_arch_list(env: Mapping[str, str] | None = None) -> list[str]:
    """The XPU device architectures to compile ahead of time for (empty: JIT ``spir64`` only).

    Args:
        env: environment to read ``TORCH_XPU_ARCH_LIST`` from; ``os.environ`` when None.

    Returns:
        ``TORCH_XPU_ARCH_LIST`` parsed when the variable is set (set but empty means "JIT only", as in
        torch), else ``torch.xpu.get_arch_list()`` without ``dg2*`` (torch's default; empty for a torch
        without XPU support).

    Raises:
        ValueError: a malformed entry (see `parse_arch_list`).

    Side effects: imports torch when the variable is unset (no device initialisation: the list is compiled
    into torch).
    """
    env = os.environ if env is None else env
    if ARCH_LIST_ENV in env:
        return parse_arch_list(env[ARCH_LIST_ENV])
    import torch

    return sorted(a for a in torch.get_device_module("xpu").get_arch_list() if not a.startswith("dg2"))
