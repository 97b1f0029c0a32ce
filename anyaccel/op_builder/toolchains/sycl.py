"""SYCL toolchain policy for XPU op builders: finding the SYCL compiler (DPC++ or AdaptiveCpp) and the XPU arch list.

Two kinds of functions, as in `anyaccel.op_builder.toolchains.host`:

- *identity* functions (`find_sycl_compiler`, `xpu_arch_list`) look only at the file system
  and the environment; the cache key uses them, so a warm load spawns no process;
- `probe_sycl_compiler` RUNS the compiler (``icpx --version``) and is called only while building
  (and by ``anyaccel report``). A compiler is trusted only when it runs and says it is Intel's oneAPI
  DPC++/C++ compiler (or an open-source DPC++ ``clang++`` build): a stale ``ONEAPI_ROOT`` that points at
  a removed install is never taken for a toolchain.

Where the compiler is looked for, in order:

1. ``ANYACCEL_SYCL_CXX`` (a name or path, like ``CXX``); set but naming nothing -> an error, never a silent
   fallback;
2. ``icpx`` on ``PATH`` (what ``torch.utils.cpp_extension`` itself runs);
3. ``$ONEAPI_ROOT/compiler/latest/bin/icpx`` (a candidate only; it must still pass the ``--version`` check);
4. ``acpp`` on ``PATH``: AdaptiveCpp (https://github.com/AdaptiveCpp/AdaptiveCpp), an open SYCL 2020
   implementation, used only where no icpx is installed.

The two flavours build differently (`SyclCompiler.flavour`): DPC++ through torch's own SYCL rules,
AdaptiveCpp through the host-compiler ninja build with ``acpp`` as the compiler (see
`anyaccel.op_builder.backends.sycl`).

The arch list follows ``torch.utils.cpp_extension._get_sycl_arch_list`` (torch 2.7+): ``TORCH_XPU_ARCH_LIST``
when set, else the archs the running torch was built for (``torch.xpu.get_arch_list()``) without the
``dg2*`` entries, which torch also drops by default (no fp64 in hardware).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from anyaccel import settings
from anyaccel.op_builder.errors import ToolchainError
from anyaccel.op_builder.toolchains.host import find_tool

logger = logging.getLogger(__name__)

#: The override variable, read like ``CXX``: its first word is a compiler name or path.
SYCL_CXX_ENV = settings.SYCL_CXX.name
#: torch's variable for the device architectures of SYCL ahead-of-time compilation ("pvc,bmg").
ARCH_LIST_ENV = "TORCH_XPU_ARCH_LIST"
#: The compiler name torch's ninja rule runs (``sycl = icpx`` in ``_write_ninja_file``).
TORCH_SYCL_COMPILER_NAME = "icpx"
#: AdaptiveCpp's compiler driver, looked for on PATH after every place icpx may be.
ACPP_COMPILER_NAME = "acpp"
#: `SyclCompiler.flavour` values.
DPCPP = "dpcpp"
ACPP = "acpp"
ONEAPI_ROOT_ENV = "ONEAPI_ROOT"
#: How long ``--version`` may take, seconds (the first run of icpx on a cold disk takes a few seconds).
VERSION_TIMEOUT_S = 60.0

# ``--version`` banners of compilers that understand -fsycl: Intel's icpx ("Intel(R) oneAPI DPC++/C++
# Compiler 2025.0.4 (2025.0.4.20241205)") and open-source intel/llvm builds ("clang version 20.0.0git
# (https://github.com/intel/llvm ...)").
_DPCPP_BANNERS = (re.compile(r"Intel\(R\) oneAPI DPC\+\+/C\+\+ Compiler", re.IGNORECASE),
                  re.compile(r"clang version .*intel/llvm", re.IGNORECASE))
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
# ``acpp --acpp-version`` prints "acpp [AdaptiveCpp compilation driver], Copyright ..." then
# "  AdaptiveCpp version: 24.06.0" (``acpp --version`` is forwarded to its clang).
_ACPP_VERSION = re.compile(r"AdaptiveCpp version:\s*(\d+)\.(\d+)\.(\d+)")
# A device architecture name as accepted by ocloc's -device (pvc, bmg, dg2-g10, xe-lpg, 12.60.7, ...).
_ARCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class SyclCompiler:
    """A SYCL compiler that ran and identified itself.

    Attributes:
        path: its absolute path (symlinks kept).
        version: (major, minor, patch) from the banner, e.g. (2025, 0, 4).
        banner: the first line of ``--version``.
        home: the install root, ``realpath(path)/../..`` (what torch calls ``SYCL_HOME``: ``include/`` and
            ``lib/`` with ``libsycl.so`` live there).
        flavour: `DPCPP` (icpx, intel/llvm clang++) or `ACPP` (AdaptiveCpp's ``acpp``).
    """

    path: Path
    version: tuple[int, int, int]
    banner: str
    home: Path
    flavour: str = DPCPP

    @property
    def torch_version(self) -> int:
        """The version as ``torch.utils.cpp_extension._get_icpx_version`` writes it: 2025.0.4 -> 20250004."""
        major, minor, patch = self.version
        return int(f"{major}{minor:02}{patch:02}")


def find_sycl_compiler(env: Mapping[str, str] | None = None) -> Path | None:
    """The SYCL compiler candidate, by file-system lookups only (no process; used by the cache key).

    Args:
        env: environment to read ``ANYACCEL_SYCL_CXX``, ``PATH`` and ``ONEAPI_ROOT`` from; ``os.environ``
            when None.

    Returns:
        The absolute path of the first candidate in the order of the module docstring (icpx before acpp), or
        None.

    Raises:
        ToolchainError: ``sycl_compiler_missing`` when ``ANYACCEL_SYCL_CXX`` is set but names nothing executable.
    """
    env = os.environ if env is None else env
    found = find_tool(env, SYCL_CXX_ENV, (TORCH_SYCL_COMPILER_NAME,), "sycl_compiler_missing",
                      "point it at the oneAPI DPC++ compiler (e.g. /opt/intel/oneapi/compiler/latest/bin/icpx) "
                      "or unset it")
    if found is not None:
        return found
    root = env.get(ONEAPI_ROOT_ENV, "").strip()
    if root:
        candidate = Path(root) / "compiler" / "latest" / "bin" / TORCH_SYCL_COMPILER_NAME
        if os.access(candidate, os.X_OK):
            return candidate
    acpp = shutil.which(ACPP_COMPILER_NAME, path=env.get("PATH", os.defpath))
    return Path(os.path.abspath(acpp)) if acpp else None


def _searched(env: Mapping[str, str]) -> str:
    root = env.get(ONEAPI_ROOT_ENV, "").strip()
    where = f"{SYCL_CXX_ENV} unset, no {TORCH_SYCL_COMPILER_NAME} on PATH"
    if root:
        where += f", no executable {Path(root) / 'compiler/latest/bin' / TORCH_SYCL_COMPILER_NAME} ({ONEAPI_ROOT_ENV})"
    else:
        where += f", {ONEAPI_ROOT_ENV} unset"
    return where + f", no {ACPP_COMPILER_NAME} on PATH"


def _run_version(path: Path, flag: str, timeout: float) -> tuple[int, str]:
    """``<path> <flag>``: its exit status and its stdout and stderr, stripped."""
    try:
        out = subprocess.run([str(path), flag], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError("sycl_compiler_missing", f"the SYCL compiler {path} does not run ({exc}); install the "
                             f"oneAPI DPC++/C++ compiler and source its setvars.sh (or AdaptiveCpp), or fix "
                             f"{SYCL_CXX_ENV}") from None
    return out.returncode, (out.stdout + out.stderr).strip()


def probe_sycl_compiler(path: Path, timeout: float = VERSION_TIMEOUT_S) -> SyclCompiler:
    """Run ``<path> --version`` and accept it if it is a DPC++ compiler; else run ``<path> --acpp-version``
    and accept it if it is AdaptiveCpp's driver.

    Args:
        path: the candidate from `find_sycl_compiler`.
        timeout: seconds to wait for each run.

    Returns:
        The `SyclCompiler` (``flavour`` `DPCPP` or `ACPP`; for AdaptiveCpp, ``version`` is AdaptiveCpp's and
        ``banner`` its first line).

    Raises:
        ToolchainError: ``sycl_compiler_missing`` when it does not run, exits non-zero, or says it is neither
            compiler (e.g. a plain g++ named by mistake); the message quotes what it printed.

    Side effects: spawns the compiler once (DPC++) or twice (AdaptiveCpp, or a compiler that is neither).
    """
    code, text = _run_version(path, "--version", timeout)
    banner = text.splitlines()[0] if text else ""
    if code == 0 and any(p.search(text) for p in _DPCPP_BANNERS):
        m = _VERSION.search(banner) or _VERSION.search(text)
        version = (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else (0, 0, 0)
        return SyclCompiler(path=path, version=version, banner=banner,
                            home=Path(os.path.realpath(path)).parent.parent)
    acpp_code, acpp_text = _run_version(path, "--acpp-version", timeout)
    m = _ACPP_VERSION.search(acpp_text)
    if acpp_code == 0 and m:
        return SyclCompiler(path=path, version=(int(m.group(1)), int(m.group(2)), int(m.group(3))),
                            banner=acpp_text.splitlines()[0], home=Path(os.path.realpath(path)).parent.parent,
                            flavour=ACPP)
    raise ToolchainError(
        "sycl_compiler_missing",
        f"{path} is not a SYCL compiler: `{path.name} --version` exited {code} and printed {banner[:160]!r}, and "
        f"`{path.name} --acpp-version` did not name an AdaptiveCpp version; SYCL sources need Intel's icpx "
        f"(oneAPI Base Toolkit), an intel/llvm clang++ or AdaptiveCpp's acpp, named by {SYCL_CXX_ENV} or found "
        f"as {TORCH_SYCL_COMPILER_NAME} (else {ACPP_COMPILER_NAME}) on PATH",
    )


def require_sycl_compiler(env: Mapping[str, str] | None = None) -> SyclCompiler:
    """Find the SYCL compiler and check it by running it (build time only).

    Raises:
        ToolchainError: ``sycl_compiler_missing`` naming every place looked at when no candidate exists, or the
            errors of `find_sycl_compiler` and `probe_sycl_compiler`.

    Side effects: runs ``--version`` of the candidate.
    """
    env = os.environ if env is None else env
    path = find_sycl_compiler(env)
    if path is None:
        raise ToolchainError(
            "sycl_compiler_missing",
            f"no SYCL compiler found ({_searched(env)}); XPU ops compile SYCL sources with Intel's icpx: install "
            f"the oneAPI DPC++/C++ compiler and `source /opt/intel/oneapi/setvars.sh` (or put AdaptiveCpp's "
            f"{ACPP_COMPILER_NAME} on PATH), or set {SYCL_CXX_ENV} to it",
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
