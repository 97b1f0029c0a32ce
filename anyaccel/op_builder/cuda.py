"""``CUDAOpBuilder``: the op-builder base for CUDA (and, through hipify, ROCm) kernels, on the core load path.

A CUDA builder is data: its sources, include paths and flags. This base plugs GPU builds into the core
:class:`~anyaccel.op_builder.builder.OpBuilder` (content-addressed cache, build lock, manifest, atomic
publish, typed :class:`~anyaccel.op_builder.errors.BuildError`) through its hooks:

- :meth:`extra_key_inputs`: the GPU arch list, the toolkit flavour, torch's CUDA/HIP version and the
  device compiler's identity (path, size, mtime; no process) join the cache key (user pain P12: a build
  for another arch list or toolkit is another entry, never a silent reuse);
- :meth:`preflight`: finds nvcc, runs ``nvcc --version`` once and applies the toolkit/torch major-version
  policy of :func:`anyaccel.op_builder.cuda_toolchain.check_cuda_versions` (``ANYACCEL_SKIP_CUDA_CHECK=1``
  skips it), and returns the variables the compile needs (``CUDA_HOME``, ``TORCH_CUDA_ARCH_LIST``, ...),
  which the core sets only for the duration of the compile (no permanent ``os.environ`` change);
- :meth:`compile`: ``torch.utils.cpp_extension.load`` with our explicit ``-gencode`` flags (torch adds
  none of its own when a flag names an arch) and the namespace macro for both host and device compiler.

Nothing here touches a device at import. :meth:`arch_list` asks the driver for the visible devices'
compute capabilities only when ``TORCH_CUDA_ARCH_LIST`` is unset (load/build time, not import).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, ClassVar, Optional

from anyaccel.op_builder import cuda_flags, cuda_toolchain
from anyaccel.op_builder.builder import OpBuilder, prebuilt_root
from anyaccel.op_builder.errors import OpBuilderError, ToolchainError
from anyaccel.op_builder.toolchain import file_identity, find_cxx

logger = logging.getLogger(__name__)


class GPUArchError(OpBuilderError, ValueError):
    """The GPU arch list is malformed, or unset with no visible GPU to take it from."""


class CUDAOpBuilder(OpBuilder):
    """Base of the CUDA op builders (``FusedAdamBuilder``, ``FusedLionBuilder``).

    Subclasses set ``NAME``, ``BUILD_VAR`` and :meth:`sources` (``.cu`` files relative to the package
    directory, e.g. ``"csrc/adam/fused_adam_cuda.cu"``); the shared CUDA headers live in
    ``csrc/includes/cuda`` and their ``.cuh`` files are part of the key.

    Attributes:
        BACKEND: ``"cuda"`` (ROCm builds of torch use the same builders; the toolkit flavour is a key input).
        WITH_CUDA: True: torch's CUDA libraries are linked.
        HEADER_SUFFIXES: C/C++ headers plus ``.cuh``.
        BUILD_HOST_FIELDS: the host compiler and the device compiler's identity describe the build machine,
            not the binary's runtime contract, so a prebuilt artifact matches without them. torch's CUDA
            version and the arch list are runtime contracts and stay.
    """

    BACKEND: ClassVar[str] = "cuda"
    WITH_CUDA: ClassVar[bool] = True
    HEADER_SUFFIXES: ClassVar[tuple[str, ...]] = OpBuilder.HEADER_SUFFIXES + (".cuh",)
    BUILD_HOST_FIELDS: ClassVar[tuple[str, ...]] = ("compiler", "device_compiler")

    def __init__(self) -> None:
        super().__init__()
        self._arch: Optional[list[str]] = None

    # ----- data --------------------------------------------------------------------------------------------
    def include_paths(self) -> list[str]:
        """``csrc/includes`` (the ``cuda/`` headers live there), relative to the package directory."""
        return ["csrc/includes"]

    def toolkit(self) -> Optional[cuda_flags.GPUToolkit]:
        """The toolkit flavour of the running torch: ``TOOLKITS["cuda"]``, ``TOOLKITS["rocm"]`` or None (CPU torch).

        Side effects: imports torch (no device initialisation).
        """
        import torch

        return cuda_flags.toolkit_for(getattr(torch.version, "hip", None), torch.version.cuda)

    def _toolkit_or_cuda(self) -> cuda_flags.GPUToolkit:
        return self.toolkit() or cuda_flags.TOOLKITS["cuda"]

    def arch_list(self) -> list[str]:
        """The GPU archs to compile for, resolved once per builder instance.

        CUDA: ``TORCH_CUDA_ARCH_LIST`` parsed, else every visible device's compute capability (the highest
        with ``+PTX``), see :func:`~anyaccel.op_builder.cuda_toolchain.cuda_arch_list`. ROCm:
        ``PYTORCH_ROCM_ARCH`` split on ``;``/spaces, else the visible devices' ``gcnArchName``.

        Raises:
            GPUArchError (a ``ValueError``): the variable is malformed, or unset with no visible GPU; the
                message names the variable to set.

        Side effects: asks the driver for device properties when the variable is unset.
        """
        if self._arch is None:
            tk = self._toolkit_or_cuda()
            try:
                self._arch = _ARCH_RESOLVERS[tk.name]()
            except ValueError as exc:
                raise GPUArchError(str(exc)) from None
        return list(self._arch)

    def cxx_args(self) -> list[str]:
        """Host-compiler flags: ``-O3`` (the C++ standard is the one torch's headers require, set by torch)."""
        return ["-O3"]

    def nvcc_args(self) -> list[str]:
        """Device-compiler flags: the toolkit's base flags plus its arch flags (``-gencode`` per arch).

        Raises:
            GPUArchError: see :meth:`arch_list`.
        """
        tk = self._toolkit_or_cuda()
        try:
            return list(tk.base_flags) + cuda_flags.arch_flags(tk, self.arch_list())
        except ValueError as exc:
            raise GPUArchError(str(exc)) from None

    def extra_key_inputs(self) -> dict[str, Any]:
        """The arch list, toolkit flavour, torch's CUDA/HIP versions and the device compiler's identity.

        Spawns no process (the compiler's identity is its path, size and mtime).
        """
        import torch

        tk = self._toolkit_or_cuda()
        compiler = self._device_compiler()
        return {
            "gpu_toolkit": tk.name,
            "gpu_arch_list": self.arch_list(),
            "torch_cuda": torch.version.cuda,
            "torch_hip": getattr(torch.version, "hip", None),
            "device_compiler": file_identity(compiler) if compiler else None,
        }

    def _device_compiler(self) -> Optional[Path]:
        """nvcc (CUDA) or hipcc (ROCm) if found, else None. File-system lookups only."""
        tk = self._toolkit_or_cuda()
        return _COMPILER_FINDERS[tk.name]()

    # ----- compatibility -----------------------------------------------------------------------------------
    def compatibility(self) -> tuple[bool, str]:
        """Whether this op can be loaded here, and why not. Spawns no process.

        Checks, in order: a CUDA/ROCm build of torch; a visible device (``torch.cuda.is_available()`` asks
        the driver for a count and initialises no context); a matching prebuilt artifact (looked for only
        when ``<prebuilt root>/<NAME>`` exists); else a device compiler and a host C++ compiler.

        Returns:
            (True, "") or (False, reason).
        """
        import torch

        tk = self.toolkit()
        if tk is None:
            return False, "this torch is a CPU-only build (torch.version.cuda and torch.version.hip are None)"
        if not torch.cuda.is_available():
            return False, "no CUDA/ROCm device is visible"
        try:
            if (prebuilt_root() / self.NAME).is_dir() and self._find_prebuilt(self.key_inputs(), warn=False):
                return True, ""
            if self._device_compiler() is None:
                return False, f"{tk.compiler} was not found (set CUDA_HOME to the toolkit) and no prebuilt artifact"
            if find_cxx() is None:
                return False, "no C++ compiler found (set CXX or install g++) and no prebuilt artifact"
        except OpBuilderError as exc:  # a bad arch list, a CXX naming nothing
            return False, str(exc)
        return True, ""

    # ----- building ----------------------------------------------------------------------------------------
    def preflight(self) -> dict[str, Optional[str]]:
        """The host tools (see :meth:`OpBuilder.preflight`) plus the device toolkit and its policy.

        Returns:
            The core's variables plus ``CUDA_HOME`` (nvcc's toolkit), ``PATH`` with nvcc's directory first
            and ``TORCH_CUDA_ARCH_LIST`` (CUDA) or ``PYTORCH_ROCM_ARCH`` (ROCm) set to the arch list of
            the key; the core sets them only while compiling.

        Raises:
            ToolchainError: ``compiler_missing``/``ninja_missing`` (host tools), ``compiler_missing`` when
                nvcc/hipcc is not found, ``cuda_mismatch`` when nvcc's and torch's CUDA major versions
                differ (unless ``ANYACCEL_SKIP_CUDA_CHECK=1``) or torch is a CPU build.

        Side effects: runs ``nvcc --version`` once (CUDA).
        """
        import torch

        env = super().preflight()
        tk = self.toolkit()
        if tk is None:
            raise ToolchainError("cuda_mismatch", f"op {self.NAME} needs a CUDA or ROCm build of torch, but "
                                 f"torch {torch.__version__} is a CPU-only build; install a CUDA build of torch")
        compiler = self._device_compiler()
        if compiler is None:
            raise ToolchainError("compiler_missing", f"{tk.compiler} was not found: set CUDA_HOME (or ROCM_HOME) "
                                 f"to the toolkit directory, or put {tk.compiler} on PATH")
        if tk.name == "cuda":
            try:
                major, minor = cuda_toolchain.parse_nvcc_version(_nvcc_version_text(compiler))
            except ValueError as exc:
                raise ToolchainError("compiler_missing", f"could not read the version of {compiler}: {exc}") from None
            cuda_toolchain.check_cuda_versions(f"{major}.{minor}", torch.version.cuda)
            env["CUDA_HOME"] = str(compiler.parent.parent)
        env["PATH"] = f"{compiler.parent}{os.pathsep}{env.get('PATH') or os.environ.get('PATH', os.defpath)}"
        env[tk.arch_env] = ";".join(self.arch_list())
        return env

    def load_kwargs(self, build_dir: Path, name: str, extra_cflags: list[str]) -> dict[str, Any]:
        """The core's ``cpp_extension.load`` arguments plus the nvcc flags (with the namespace macro)."""
        return dict(super().load_kwargs(build_dir, name, extra_cflags),
                    extra_cuda_cflags=self.nvcc_args() + extra_cflags)

    def builder(self) -> Any:
        """A setuptools ``CUDAExtension`` for this op (DeepSpeed's ``builder()``), for custom AOT pipelines.

        Raises:
            GPUArchError: see :meth:`arch_list`.

        Side effects: imports ``torch.utils.cpp_extension``.
        """
        from anyaccel.op_builder import manifest as mf
        from torch.utils.cpp_extension import CUDAExtension

        root = self.source_root()
        macro = f"-DANYACCEL_OP_NAMESPACE={self.namespace(mf.compute_key(self.key_inputs()))}"
        return CUDAExtension(
            name=self.absolute_name(),
            sources=[str(root / s) for s in self.sources()],
            include_dirs=[str(root / p) for p in self.include_paths()],
            extra_compile_args={"cxx": self.cxx_args() + [macro], "nvcc": self.nvcc_args() + [macro]},
            extra_link_args=self.extra_ldflags(),
        )


def _nvcc_version_text(compiler: Path) -> str:
    """The output of ``nvcc --version`` ("... release 13.0, V13.0.88"), or the reason it could not run."""
    import subprocess

    try:
        out = subprocess.run([str(compiler), "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return out.stdout + out.stderr


def _cuda_arch_list() -> list[str]:
    explicit = os.environ.get(cuda_toolchain.ARCH_LIST_ENV, "").strip()
    caps = [] if explicit else cuda_toolchain.visible_capabilities()
    return cuda_toolchain.cuda_arch_list(caps)


def _rocm_arch_list() -> list[str]:
    raw = os.environ.get(cuda_flags.TOOLKITS["rocm"].arch_env, "").strip()
    if raw:
        return sorted(set(raw.replace(";", " ").split()))
    import torch

    if not torch.cuda.is_available():
        raise ValueError("no visible GPU to take the arch list from; set PYTORCH_ROCM_ARCH (e.g. 'gfx90a')")
    return sorted({torch.cuda.get_device_properties(i).gcnArchName.split(":")[0]
                   for i in range(torch.cuda.device_count())})


def _find_hipcc() -> Optional[Path]:
    import shutil

    for root in (os.environ.get("ROCM_HOME"), os.environ.get("ROCM_PATH"), "/opt/rocm"):
        if root and os.access(Path(root) / "bin" / "hipcc", os.X_OK):
            return Path(root) / "bin" / "hipcc"
    found = shutil.which("hipcc")
    return Path(found) if found else None


#: Toolkit flavour -> how its arch list and device compiler are found. Backend differences as data.
_ARCH_RESOLVERS = {"cuda": _cuda_arch_list, "rocm": _rocm_arch_list}
_COMPILER_FINDERS = {"cuda": cuda_toolchain.find_nvcc, "rocm": _find_hipcc}
