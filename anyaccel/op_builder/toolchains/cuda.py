"""CUDA toolkit policy for GPU op builders: finding nvcc, the toolkit/torch version check and the arch list.

These are pure or nearly pure functions; the ``CUDAOpBuilder`` (another module) calls them while
building. Nothing here runs on import or on a warm load.

Policy (a toolkit that cannot build for this torch fails with a fix before compiling; a build for other GPUs
or another toolkit is never loaded):

- toolkit and torch CUDA *major* versions differ -> `ToolchainError` with code ``cuda_mismatch``
  naming both versions and the fixes, unless ``ANYACCEL_SKIP_CUDA_CHECK=1``; a *minor* difference is logged;
- the GPU arch list comes from ``TORCH_CUDA_ARCH_LIST`` when set, else from the compute capabilities of
  all visible devices; it is part of the cache key and is handed to the compiler through
  `anyaccel.op_builder.core.environ.scoped_environ`, never by a permanent ``os.environ`` change.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from anyaccel import settings
from anyaccel.op_builder.errors import ToolchainError

logger = logging.getLogger(__name__)

SKIP_CHECK_ENV = settings.SKIP_CUDA_CHECK.name
ARCH_LIST_ENV = "TORCH_CUDA_ARCH_LIST"
_NVCC_RELEASE = re.compile(r"release (\d+)\.(\d+)")
# One arch entry: "9.0", "9.0a", "10.0f", "8.6+PTX", "sm_90" is not accepted by torch either.
_ARCH = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")


def find_cuda_home(env: Mapping[str, str] | None = None) -> Path | None:
    """The CUDA toolkit root: ``CUDA_HOME``, else ``CUDA_PATH``, else the toolkit of the nvcc on PATH, else
    /usr/local/cuda.

    A variable that is set wins as given (a wrong one is reported, never silently replaced). An nvcc on
    PATH counts when its grandparent holds the toolkit (``bin/nvcc`` and ``include/cuda_runtime_api.h``);
    a wrapper script elsewhere (``/usr/local/bin/nvcc``) falls through to /usr/local/cuda.

    Returns:
        The directory, or None when none of these exists.
    """
    env = os.environ if env is None else env
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            return Path(env[var]) if Path(env[var]).is_dir() else None
    candidates = []
    nvcc = shutil.which("nvcc", path=env.get("PATH", os.defpath))
    if nvcc:
        candidates.append(Path(os.path.realpath(nvcc)).parent.parent)
    candidates.append(Path("/usr/local/cuda"))
    for home in candidates:
        if (home / "bin" / "nvcc").is_file() and (home / "include" / "cuda_runtime_api.h").is_file():
            return home
    return None


def find_nvcc(env: Mapping[str, str] | None = None) -> Path | None:
    """``<cuda home>/bin/nvcc`` if it exists, else None (see `find_cuda_home`)."""
    home = find_cuda_home(env)
    if home is None:
        return None
    nvcc = home / "bin" / "nvcc"
    return nvcc if os.access(nvcc, os.X_OK) else None


def header_cuda_version(cuda_home: Path) -> tuple[int, int] | None:
    """The toolkit's version from ``<cuda_home>/include/cuda_runtime_api.h`` (``#define CUDART_VERSION 13000``).

    A file read, no process, so the cache key may use it. Returns None when the header is missing or has
    no such line.
    """
    try:
        text = (cuda_home / "include" / "cuda_runtime_api.h").read_text(errors="replace")
    except OSError:
        return None
    m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", text)
    if m is None:
        return None
    value = int(m.group(1))
    return value // 1000, (value % 1000) // 10


def parse_nvcc_version(text: str) -> tuple[int, int]:
    """Parse ``nvcc --version`` output ("... Cuda compilation tools, release 13.0, V13.0.88").

    Raises:
        ValueError: no ``release X.Y`` in ``text``.
    """
    m = _NVCC_RELEASE.search(text)
    if not m:
        raise ValueError(f"no 'release X.Y' in nvcc --version output: {text[:200]!r}")
    return int(m.group(1)), int(m.group(2))


def check_cuda_versions(
    toolkit: str, torch_cuda: str | None, env: Mapping[str, str] | None = None
) -> None:
    """Apply the toolkit policy to a toolkit version and torch's CUDA version.

    Args:
        toolkit: the toolkit version, "13.0" (from `parse_nvcc_version`).
        torch_cuda: ``torch.version.cuda``, e.g. "12.8"; None for a CPU-only torch.
        env: environment to read ``ANYACCEL_SKIP_CUDA_CHECK`` from; ``os.environ`` when None.

    Raises:
        ToolchainError: code ``cuda_mismatch`` when torch has no CUDA, or when the major versions differ and
            the check is not skipped; the message names both versions and the fixes.
    """
    env = os.environ if env is None else env
    if torch_cuda is None:
        raise ToolchainError(
            "cuda_mismatch",
            f"this torch is a CPU-only build but a CUDA op was requested (toolkit {toolkit}); install a CUDA "
            f"build of torch",
        )
    t_major, t_minor = (toolkit.split(".") + ["0"])[:2]
    r_major, r_minor = (torch_cuda.split(".") + ["0"])[:2]
    if t_major != r_major:
        if settings.SKIP_CUDA_CHECK.get(env):
            logger.warning("CUDA toolkit %s vs torch CUDA %s: major versions differ; check skipped by %s=1",
                           toolkit, torch_cuda, SKIP_CHECK_ENV)
            return
        raise ToolchainError(
            "cuda_mismatch",
            f"CUDA toolkit {toolkit} (nvcc) and torch's CUDA {torch_cuda} have different major versions; "
            f"either install CUDA toolkit {r_major}.x and set CUDA_HOME to it, or install a torch built "
            f"for CUDA {t_major}.x; {SKIP_CHECK_ENV}=1 skips this check",
        )
    if t_minor != r_minor:
        logger.info("CUDA toolkit %s vs torch CUDA %s: minor versions differ (usually fine)", toolkit, torch_cuda)


def parse_arch_list(text: str) -> list[str]:
    """Parse a ``TORCH_CUDA_ARCH_LIST`` value ("8.0;9.0a 10.0+PTX") into sorted, de-duplicated entries.

    Raises:
        ValueError: an entry is not of the form ``major.minor[a|f][+PTX]``; the message names it.
    """
    entries = [e for e in re.split(r"[;\s,]+", text.strip()) if e]
    for e in entries:
        if not _ARCH.match(e):
            raise ValueError(
                f"{ARCH_LIST_ENV} entry {e!r} is not of the form major.minor[a|f][+PTX] (e.g. '9.0', "
                f"'9.0a', '8.6+PTX'); fix {ARCH_LIST_ENV}"
            )
    def order(e: str) -> tuple[int, int, str]:
        m = _ARCH.match(e)
        assert m is not None  # checked above
        return int(m.group(1)), int(m.group(2)), e

    return sorted(set(entries), key=order)


def cuda_arch_list(
    capabilities: Sequence[tuple[int, int]] = (), env: Mapping[str, str] | None = None
) -> list[str]:
    """The GPU architectures to compile for.

    Args:
        capabilities: (major, minor) compute capabilities of the visible devices, e.g. ``[(9, 0)]``.
        env: environment to read ``TORCH_CUDA_ARCH_LIST`` from; ``os.environ`` when None.

    Returns:
        ``TORCH_CUDA_ARCH_LIST`` parsed when set; else one "major.minor" entry per distinct capability,
        the highest with ``+PTX`` so newer GPUs can JIT the kernel.

    Raises:
        ValueError: the variable is malformed, or it is unset and ``capabilities`` is empty (no visible
            GPU): set ``TORCH_CUDA_ARCH_LIST`` to build without a GPU.
    """
    env = os.environ if env is None else env
    explicit = env.get(ARCH_LIST_ENV, "").strip()
    if explicit:
        return parse_arch_list(explicit)
    if not capabilities:
        raise ValueError(f"no visible GPU to take the arch list from; set {ARCH_LIST_ENV} (e.g. '9.0')")
    archs = [f"{major}.{minor}" for major, minor in sorted(set(capabilities))]
    archs[-1] += "+PTX"
    return archs


def visible_capabilities() -> list[tuple[int, int]]:
    """Compute capabilities of every visible CUDA device; empty without CUDA.

    Side effects: initialises CUDA in this process (build time only).
    """
    import torch

    cuda = torch.get_device_module("cuda")
    if not cuda.is_available():
        return []
    caps = [cuda.get_device_capability(i) for i in range(cuda.device_count())]
    return [(int(major), int(minor)) for major, minor in caps]
