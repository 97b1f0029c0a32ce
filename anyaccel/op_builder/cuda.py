"""``CUDAOpBuilder``: the op-builder base for CUDA (and, through hipify, ROCm) kernels.

A CUDA builder is data: its sources, include paths and flags. This base adds what every GPU op needs:
the toolkit flavour of the running torch (:data:`anyaccel.op_builder.cuda_flags.TOOLKITS`), the arch list
(``TORCH_CUDA_ARCH_LIST`` or the visible devices, via :mod:`anyaccel.op_builder.cuda_toolchain`), its
``-gencode`` flags, and the arch list as part of the cache key (user pain P12).

Nothing here touches a device at import; ``arch_list()`` initialises CUDA only when no explicit list is
set, at build time.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Optional

from anyaccel.op_builder import cuda_flags, cuda_toolchain

logger = logging.getLogger(__name__)

CSRC = Path(__file__).resolve().parent.parent / "csrc"


class CUDAOpBuilder:
    """Base of the CUDA op builders (``FusedAdamBuilder``, ``FusedLionBuilder``).

    Subclasses set ``NAME``, ``BUILD_VAR`` and ``SOURCES`` (paths relative to ``anyaccel/csrc``).

    Attributes:
        NAME: the op's name, also the first part of its torch op namespace.
        BUILD_VAR: the environment variable that asks ``setup.py`` to prebuild this op.
        SOURCES: ``.cu`` sources relative to ``anyaccel/csrc``.
    """

    NAME: str = ""
    BUILD_VAR: str = ""
    SOURCES: tuple[str, ...] = ()

    def absolute_name(self) -> str:
        """The op's dotted name, ``anyaccel.ops.<NAME>_op`` (DeepSpeed's vocabulary)."""
        return f"anyaccel.ops.{self.NAME}_op"

    def sources(self) -> list[str]:
        """Absolute paths of the op's sources."""
        return [str(CSRC / s) for s in self.SOURCES]

    def include_paths(self) -> list[str]:
        """Include directories: ``anyaccel/csrc/includes`` (the ``cuda/`` headers live there)."""
        return [str(CSRC / "includes")]

    def toolkit(self) -> Optional[cuda_flags.GPUToolkit]:
        """The toolkit flavour of the running torch (CUDA, ROCm or None for a CPU torch).

        Side effects: imports torch (no device initialisation).
        """
        import torch

        return cuda_flags.toolkit_for(getattr(torch.version, "hip", None), torch.version.cuda)

    def arch_list(self) -> list[str]:
        """The GPU archs to compile for: ``TORCH_CUDA_ARCH_LIST`` or every visible device's capability.

        Raises:
            ValueError: the variable is malformed, or unset with no visible GPU.

        Side effects: initialises CUDA when the variable is unset.
        """
        explicit = os.environ.get(cuda_toolchain.ARCH_LIST_ENV, "").strip()
        caps = [] if explicit else cuda_toolchain.visible_capabilities()
        return cuda_toolchain.cuda_arch_list(caps)

    def cxx_args(self) -> list[str]:
        """Host-compiler flags."""
        return ["-O3", "-std=c++17"]

    def nvcc_args(self) -> list[str]:
        """Device-compiler flags: the toolkit's base flags plus one ``-gencode`` per arch."""
        tk = self.toolkit() or cuda_flags.TOOLKITS["cuda"]
        return list(tk.base_flags) + cuda_flags.arch_flags(tk, self.arch_list())

    def extra_ldflags(self) -> list[str]:
        """Linker flags: none (the CUDA runtime comes through torch's libraries)."""
        return []

    def compatibility(self) -> tuple[bool, str]:
        """Whether this op can be built and run here, and why not.

        Checks a CUDA/ROCm build of torch, a visible device and a device compiler, without starting a
        process or initialising a device (``torch.cuda.is_available()`` only asks the driver for a count).
        """
        import torch

        tk = self.toolkit()
        if tk is None:
            return False, "this torch is a CPU-only build"
        if not torch.cuda.is_available():
            return False, "no CUDA/ROCm device is visible"
        if tk.name == "cuda" and cuda_toolchain.find_nvcc() is None:
            return False, "nvcc was not found (set CUDA_HOME to the CUDA toolkit)"
        return True, f"{tk.name} toolkit found"

    def is_compatible(self, verbose: bool = False) -> bool:
        """DeepSpeed's ``is_compatible``: :meth:`compatibility`'s first element, the reason logged."""
        ok, reason = self.compatibility()
        if verbose or not ok:
            logger.info("%s: %s", self.NAME, reason)
        return ok

    def load(self, verbose: bool = False):  # noqa: ANN201 (OpModule-like)
        """Builds (JIT) and loads the op; see :func:`scratch_load`."""
        return scratch_load(self, verbose=verbose)


class _ScratchModule:
    """``torch.ops.<namespace>`` with the ``OpModule`` attributes the front ends read."""

    def __init__(self, op: str, namespace: str, path: str) -> None:
        self.op, self.namespace, self.path, self.isa, self.source = op, namespace, path, None, "built"

    def __getattr__(self, name: str):  # noqa: ANN204
        if name.startswith("_"):
            raise AttributeError(name)
        import torch

        return getattr(getattr(torch.ops, self.namespace), name)


_loaded: dict[str, _ScratchModule] = {}


def scratch_load(builder: CUDAOpBuilder, verbose: bool = False) -> _ScratchModule:
    """Interim JIT loader through ``torch.utils.cpp_extension.load`` (until the core's load path is used).

    Side effects: runs nvcc and ninja (tens of seconds cold), loads a shared library into the process.
    """
    import hashlib

    from torch.utils import cpp_extension

    flags = builder.nvcc_args()
    digest = hashlib.sha256()
    for src in builder.sources() + sorted(str(p) for p in (CSRC / "includes" / "cuda").glob("*")):
        digest.update(Path(src).read_bytes())
    digest.update(" ".join(flags).encode())
    ns = f"anyaccel_{builder.NAME}_{digest.hexdigest()[:10]}"
    if ns in _loaded:
        return _loaded[ns]
    build_dir = Path(os.environ.get("ANYACCEL_CACHE_DIR", tempfile.gettempdir())) / "scratch" / ns
    build_dir.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(
        name=ns,
        sources=builder.sources(),
        extra_include_paths=builder.include_paths(),
        extra_cflags=builder.cxx_args() + [f"-DANYACCEL_OP_NAMESPACE={ns}"],
        extra_cuda_cflags=flags + [f"-DANYACCEL_OP_NAMESPACE={ns}"],
        build_directory=str(build_dir),
        is_python_module=False,
        verbose=verbose,
    )
    _loaded[ns] = _ScratchModule(builder.NAME, ns, str(build_dir / f"{ns}.so"))
    return _loaded[ns]
