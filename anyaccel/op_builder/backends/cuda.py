"""``CUDAOpBuilder``: the op-builder base for CUDA kernels, on the core load path and torch's stable ABI.

A CUDA build is data (its spec's ``.cu`` sources and flags); this base plugs it into the core
[`OpBuilder`][anyaccel.op_builder.core.builder.OpBuilder] (content-addressed cache, build lock, manifest, atomic
publish, typed [`BuildError`][anyaccel.op_builder.errors.BuildError]) through its hooks:

- `extra_key_inputs`: the GPU arch list, the toolkit flavour, the CUDA major version the binary's
  runtime is (``cudart``'s soname), and the device compiler's identity (path, size, mtime; no process; a
  build-host field) join the cache key: a build for another arch list or toolkit is another entry, never a
  silent reuse. torch's own version is not an input: the sources use only the
  stable ABI;
- `preflight`: finds the device compiler, runs its ``--version`` once and, for CUDA, applies the toolkit/torch
  major-version policy of `anyaccel.op_builder.toolchains.cuda.check_cuda_versions` when torch is a CUDA build
  (``ANYACCEL_SKIP_CUDA_CHECK=1`` skips it); with a CPU-only torch the build still runs, for another
  machine (a GPU wheel built on a CPU host), and the toolkit's own major version is recorded;
- `compile_steps` / `link_command`: ``.cu`` files go to nvcc with explicit ``-gencode`` flags,
  ``.cpp`` files to the host compiler; the link takes only ``libtorch_cpu`` (the stable shim) and
  ``libcudart`` (torch's CUDA library is found at run time among the libraries torch has loaded).

Each toolkit (`anyaccel.op_builder.toolchains.cuda_flags.TOOLKITS`) holds its device compiler's toolchain record
(`anyaccel.op_builder.toolchains.records`): the compiler is found (`records.locate`) and probed
(`records.probe`) as ``anyaccel report`` finds and probes it, its arch flags and the variables it runs with are the
record's, and the toolkit root is the record's first prefix variable set (`records.install_root`).

ROCm is the same path with the other toolkit (hipcc's record): the sources are translated by torch's hipify into
the build directory (`anyaccel.op_builder.toolchains.cuda_hipify`) and compiled by hipcc with torch's ROCm
extension flags and ``--offload-arch`` per ``PYTORCH_ROCM_ARCH`` entry; the link takes ``libamdhip64``. The
toolkit is the running torch's, or the one given to the constructor (a ROCm build from a host whose torch is not
a ROCm build).

Nothing here touches a device at import. `arch_list` asks the driver for the visible devices'
compute capabilities only when ``TORCH_CUDA_ARCH_LIST`` (``PYTORCH_ROCM_ARCH``) is unset (load/build time, not
import).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, ClassVar

from typing_extensions import override

from anyaccel.op_builder.core.builder import OpBuilder
from anyaccel.op_builder.core.loading import prebuilt_root
from anyaccel.op_builder.errors import OpBuilderError, ToolchainError
from anyaccel.op_builder.toolchains import cuda as cuda_toolchain
from anyaccel.op_builder.toolchains import cuda_flags, cuda_hipify, records
from anyaccel.op_builder.toolchains import ninja as nj
from anyaccel.op_builder.toolchains.host import file_identity, find_cxx

logger = logging.getLogger(__name__)


class GPUArchError(OpBuilderError, ValueError):
    """The GPU arch list is malformed, or unset with no visible GPU to take it from."""


class CUDAOpBuilder(OpBuilder):
    """Base of the CUDA op builders (``FusedAdamBuilder``, ``FusedLionBuilder``).

    Spec builds with ``backend="cuda"`` name ``.cu`` (and optionally ``.cpp``) sources relative to the
    package directory; the shared headers live in ``csrc/includes`` (``cuda/*.cuh``, ``stable/*.h``) and
    are part of the key.

    Attributes:
        BACKEND: ``"cuda"``.
        DEVICE_TYPE: ``"cuda"`` (the fakes require CUDA tensors).
        HEADER_SUFFIXES: C/C++ headers plus ``.cuh``.
        BUILD_HOST_FIELDS: the host compiler, the device compiler's identity and the torch the build ran
            under describe the build machine, not the binary's runtime contract, so a prebuilt artifact
            matches without them. The CUDA major version and the arch list are runtime contracts and stay.
        SOURCE_TOOLCHAIN: the record the sources are written for (nvcc's: ``.cu``; a ROCm build hipifies them
            first), beside the host record (``.cpp``).
    """

    BACKEND: ClassVar[str] = "cuda"
    DEVICE_TYPE: ClassVar[str] = "cuda"
    HEADER_SUFFIXES: ClassVar[tuple[str, ...]] = OpBuilder.HEADER_SUFFIXES + (".cuh",)
    SOURCE_TOOLCHAIN: ClassVar[records.Toolchain] = records.TOOLCHAINS["nvcc"]
    BUILD_HOST_FIELDS: ClassVar[tuple[str, ...]] = ("compiler", "device_compiler", "built_with_torch")

    def __init__(self, toolkit: cuda_flags.GPUToolkit | None = None) -> None:
        """Args:
            toolkit: the toolkit to build for (``cuda_flags.TOOLKITS["rocm"]`` builds for ROCm whatever torch
                runs here); None (the default) takes the running torch's, see
                [`toolkit`][anyaccel.op_builder.backends.cuda.CUDAOpBuilder.toolkit].
        """
        super().__init__()
        self._arch: list[str] | None = None
        self._toolkit = toolkit

    # ----- data --------------------------------------------------------------------------------------------
    def toolkit(self) -> cuda_flags.GPUToolkit | None:
        """The toolkit given to the constructor, else the running torch's: ``TOOLKITS["cuda"]``, ``TOOLKITS["rocm"]``
        or None (CPU torch).

        Side effects: imports torch (no device initialisation).
        """
        if self._toolkit is not None:
            return self._toolkit
        import torch

        return cuda_flags.toolkit_for(getattr(torch.version, "hip", None), torch.version.cuda)

    def _toolkit_or_cuda(self) -> cuda_flags.GPUToolkit:
        return self.toolkit() or cuda_flags.TOOLKITS["cuda"]

    def arch_list(self) -> list[str]:
        """The GPU archs to compile for, resolved once per builder instance.

        CUDA: ``TORCH_CUDA_ARCH_LIST`` parsed, else every visible device's compute capability (the highest
        with ``+PTX``), see `cuda_arch_list`. ROCm:
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

    @override
    def cxx_args(self) -> list[str]:
        """Host-compiler flags: ``-O3`` and the spec's."""
        return ["-O3", *super().cxx_args()]

    @override
    def nvcc_args(self) -> list[str]:
        """Device-compiler flags: the toolkit's base flags, its arch flags (``-gencode`` per arch), the spec's.

        Raises:
            GPUArchError: see [`arch_list`][anyaccel.op_builder.backends.cuda.CUDAOpBuilder.arch_list].
        """
        tk = self._toolkit_or_cuda()
        try:
            return [*tk.base_flags, *cuda_flags.arch_flags(tk, self.arch_list()), *super().nvcc_args()]
        except ValueError as exc:
            raise GPUArchError(str(exc)) from None

    def cuda_major(self) -> int | None:
        """The CUDA major version the binary's runtime is: torch's CUDA when torch is a CUDA build (the
        preflight makes nvcc agree), else the toolkit's (read from its header; no process); None for a ROCm
        build."""
        import torch

        if self._toolkit_or_cuda().name != "cuda":
            return None
        if torch.version.cuda:
            return int(torch.version.cuda.split(".")[0])
        home = cuda_toolchain.find_cuda_home()
        version = cuda_toolchain.header_cuda_version(home) if home else None
        return version[0] if version else None

    @override
    def extra_key_inputs(self) -> dict[str, Any]:
        """The arch list, toolkit flavour, CUDA major version and the device compiler's identity.

        Spawns no process (the compiler's identity is its path, size and mtime).
        """
        tk = self._toolkit_or_cuda()
        compiler = self._device_compiler()
        return {
            "gpu_toolkit": tk.name,
            "gpu_arch_list": self.arch_list(),
            "cuda_major": self.cuda_major(),
            "device_compiler": file_identity(compiler) if compiler else None,
        }

    def _device_compiler(self) -> Path | None:
        """nvcc (CUDA) or hipcc (ROCm) if found (its record's `records.locate`), else None. File-system lookups
        only.

        Raises:
            ToolchainError: the record's variable (``HIPCC``) names nothing executable.
        """
        return records.locate(self._toolkit_or_cuda().toolchain)

    # ----- compatibility -----------------------------------------------------------------------------------
    @override
    def compatibility(self) -> tuple[bool, str]:
        """Whether this op can be loaded here, and why not. Spawns no process.

        Checks, in order: a CUDA/ROCm build of torch; a visible device (the CUDA device module's ``is_available()``
        asks the driver for a count and initialises no context); a matching prebuilt artifact (looked for only
        when ``<prebuilt root>/<NAME>`` exists); else a device compiler and a host C++ compiler.

        Returns:
            (True, "") or (False, reason).
        """
        import torch

        tk = self.toolkit()
        if tk is None:
            return False, "this torch is a CPU-only build (torch.version.cuda and torch.version.hip are None)"
        if not torch.get_device_module("cuda").is_available():
            return False, "no CUDA/ROCm device is visible"
        try:
            if (prebuilt_root() / self.NAME).is_dir() and self._find_prebuilt(self.key_inputs(), warn=False):
                return True, ""
            if self._device_compiler() is None:
                return False, (f"{tk.compiler} was not found (set {tk.home_var} to the toolkit) and no prebuilt "
                               "artifact")
            if find_cxx() is None:
                return False, "no C++ compiler found (set CXX or install g++) and no prebuilt artifact"
        except OpBuilderError as exc:  # a bad arch list, a CXX naming nothing
            return False, str(exc)
        return True, ""

    @override
    def buildability(self) -> tuple[bool, str]:
        """Buildable when nvcc and a host compiler are found and the arch list resolves (``TORCH_CUDA_ARCH_LIST``
        is needed on a machine without a GPU); torch may be a CPU build (the op is built, not loaded)."""
        ok, reason = super().buildability()
        if ok and self._device_compiler() is None:
            tk = self._toolkit_or_cuda()
            return False, f"{tk.compiler} was not found (set {tk.home_var} to the toolkit)"
        return ok, reason

    # ----- building ----------------------------------------------------------------------------------------
    @override
    def preflight(self) -> dict[str, str | None]:
        """The host tools (see [`OpBuilder.preflight`][anyaccel.op_builder.core.builder.OpBuilder.preflight]) plus the
        device toolkit and its policy.

        Returns:
            The core's variables plus the device compiler (``NVCC`` / ``HIPCC``), its toolkit root
            (``CUDA_HOME`` / ``ROCM_HOME``), ``PATH`` with the compiler's directory first and its record's
            ``compiler_env`` (ROCm: ``HIP_PLATFORM=amd``); the core sets them only while compiling.

        Raises:
            ToolchainError: ``compiler_missing``/``ninja_missing`` (host tools), ``compiler_missing`` when
                the device compiler is not found, ``version_probe_failed`` when its ``--version`` fails or
                names no version (the message has its command, status and output), ``cuda_mismatch`` when
                nvcc's and a CUDA torch's major versions differ (unless ``ANYACCEL_SKIP_CUDA_CHECK=1``).

        Side effects: runs ``<device compiler> --version`` once (`records.probe`).
        """
        import torch

        env = super().preflight()
        tk = self._toolkit_or_cuda()
        compiler = self._device_compiler()
        if compiler is None:
            raise ToolchainError("compiler_missing", f"{tk.compiler} was not found: set {tk.home_var} to the toolkit "
                                 f"directory, or put {tk.compiler} on PATH")
        found = records.probe(tk.toolchain, compiler)
        if not found.ok or not found.version:
            raise ToolchainError("version_probe_failed", f"could not read the version of {compiler}: "
                                 f"{found.why_not or f'`{found.banner}` names no version'}")
        major, minor = found.numbers(2)
        if tk.name == "cuda" and torch.version.cuda:
            cuda_toolchain.check_cuda_versions(f"{major}.{minor}", torch.version.cuda)
        elif tk.name == "cuda" or not getattr(torch.version, "hip", None):
            logger.info("torch %s is not a %s build: building op %s with %s %d.%d without loading it",
                        torch.__version__, tk.name, self.NAME, tk.compiler, major, minor)
        env[tk.compiler_var] = str(compiler)
        env[tk.home_var] = str(records.install_root(tk.toolchain, compiler))
        env["PATH"] = f"{compiler.parent}{os.pathsep}{env.get('PATH') or os.environ.get('PATH', os.defpath)}"
        env.update(tk.toolchain.compiler_env)
        return env

    @override
    def compile_steps(self, env: dict[str, str | None], namespace: str, gen_dir: Path,
                      build_dir: Path) -> list[nj.CompileStep]:
        """Sources of `SOURCE_TOOLCHAIN`'s suffixes (``.cu``) through the device compiler (nvcc's host side by
        ``CXX``), those of the host record's (``.cpp``) through the host compiler. For a toolkit that hipifies
        (ROCm), the sources and their include directories are first translated by torch's hipify into
        ``build_dir/hip`` and the translated files are compiled, with the include directories of the translated
        copy.

        Raises:
            OpBuilderError: a source has a suffix neither record compiles.
        """
        tk = self._toolkit_or_cuda()
        root = self.source_root()
        device_suffixes = self.SOURCE_TOOLCHAIN.source_suffixes
        host_suffixes = records.TOOLCHAINS["host"].source_suffixes
        for src in self.sources():
            if Path(src).suffix not in (*device_suffixes, *host_suffixes):
                raise OpBuilderError(f"op {self.NAME}: source {src} has suffix {Path(src).suffix!r}; the CUDA backend "
                                     f"compiles {', '.join((*device_suffixes, *host_suffixes))} files")
        common = self.common_flags(namespace, gen_dir)
        compiled = {src: root / src for src in self.sources()}
        host_only = [flag for flag in self.host_only_flags() if flag != "-std=c++17"]
        if tk.hipify:
            tree = cuda_hipify.hipify_tree(root, self.sources(), self.include_paths(), build_dir / "hip")
            compiled = tree.sources
            copied = {f"-I{root / p}": f"-I{d}" for p, d in zip(self.include_paths(), tree.include_dirs, strict=True)}
            common = [copied.get(flag, flag) for flag in common]
            host_only.append(f"-fmacro-prefix-map={tree.root}/={root.name}/")
        prefix = (tk.host_flag_prefix,) if tk.host_flag_prefix else ()
        host_flags = [f for flag in host_only for f in (*prefix, flag)]
        host_compiler = (tk.host_compiler_flag, str(env["CXX"])) if tk.host_compiler_flag else ()
        device = (str(env[tk.compiler_var]), *host_compiler, "-std=c++17", *host_flags, *self.nvcc_args(), *common)
        host = tuple(self.host_compile_command(env, namespace, gen_dir))
        steps = []
        for i, src in enumerate(self.sources()):
            path = compiled[src]
            command = device if Path(src).suffix in device_suffixes else host + tuple(self.source_cxx_args(src))
            steps.append(nj.CompileStep(path, build_dir / f"{i}_{Path(src).stem}.o", command))
        return steps

    @override
    def link_command(self, env: dict[str, str | None]) -> list[str]:
        """The core's link plus the GPU runtime (``libcudart``, the toolkit's, with torch's soname; ROCm:
        ``libamdhip64``)."""
        tk = self._toolkit_or_cuda()
        home = Path(str(env[tk.home_var]))
        lib = home / "lib64" if (home / "lib64").is_dir() else home / "lib"
        return [*super().link_command(env), f"-L{lib}", f"-l{tk.runtime_library}"]


def _cuda_arch_list() -> list[str]:
    explicit = os.environ.get(cuda_toolchain.ARCH_LIST_ENV, "").strip()
    caps = [] if explicit else cuda_toolchain.visible_capabilities()
    return cuda_toolchain.cuda_arch_list(caps)


def _rocm_arch_list() -> list[str]:
    raw = os.environ.get(cuda_flags.TOOLKITS["rocm"].arch_env, "").strip()
    if raw:
        return sorted(set(raw.replace(";", " ").split()))
    import torch

    cuda = torch.get_device_module("cuda")
    if not cuda.is_available():
        raise ValueError("no visible GPU to take the arch list from; set PYTORCH_ROCM_ARCH (e.g. 'gfx90a')")
    return sorted({cuda.get_device_properties(i).gcnArchName.split(":")[0] for i in range(cuda.device_count())})


#: Toolkit flavour -> how its arch list is found (from a variable, else the visible devices). Backend differences as
#: data; the device compiler is its toolkit's record's.
_ARCH_RESOLVERS = {"cuda": _cuda_arch_list, "rocm": _rocm_arch_list}
