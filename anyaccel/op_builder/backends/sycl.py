"""``SYCLOpBuilder``: the op-builder base for SYCL kernels on Intel GPUs (XPU), on the core load path.

A SYCL builder is data (its ``.sycl`` sources and flags); this base plugs it into the core
[`OpBuilder`][anyaccel.op_builder.core.builder.OpBuilder] (content-addressed cache, build lock, manifest, atomic
publish, typed [`BuildError`][anyaccel.op_builder.errors.BuildError]) through its hooks:

- `extra_key_inputs`: the XPU arch list (``TORCH_XPU_ARCH_LIST``, else torch's own list), torch's
  XPU runtime version and the SYCL compiler's identity (path, size, mtime; no process) join the key;
- `preflight`: requires a torch built with XPU support, finds the SYCL compiler and RUNS it
  (``icpx --version``, `require_sycl_compiler`), never trusting
  ``ONEAPI_ROOT`` alone, and returns the variables the compile needs (``PATH`` with the compiler first,
  ``TORCH_XPU_ARCH_LIST`` set to the key's list), which the core sets only while compiling;
- `compile`: ``torch.utils.cpp_extension.load(..., with_sycl=True)`` (torch >= 2.7). torch routes
  only files ending in ``.sycl`` to the SYCL compiler (``_is_sycl_file``), runs it by the name ``icpx``
  from ``PATH``, and adds ``-fsycl``, ``-fsycl-targets=spir64_gen,spir64`` (AOT for the arch list plus a
  JIT image) and the device link step itself; AOT builds use ``SyclExtension``
  (https://pytorch.org/docs/stable/cpp_extension.html).

The compiler is one of the SYCL toolkits (`anyaccel.op_builder.toolchains.sycl.TOOLKITS`), each holding its
toolchain record (`anyaccel.op_builder.toolchains.records`): found and probed as ``anyaccel report`` finds and
probes it, with the record's flags for the toolkit's targets and for ``.sycl`` sources. With AdaptiveCpp's
``acpp`` (found where no icpx is) the build goes through the core's ninja driver instead, ``acpp`` compiling the
``.sycl`` sources as C++ and linking the library; torch's SYCL rules speak only DPC++'s flags.

Where the kernels run is one compile-time define of the same sources (``csrc/includes/sycl/
multi_tensor_apply.hpp``): an XPU build (the default) registers for torch's XPU dispatch key and runs on
torch's current XPU queue; a host-device build (``SYCLOpBuilder(host_device=True)``, which defines
``ANYACCEL_SYCL_HOST_DEVICE=1``) registers for the CPU key and runs the kernels on the SYCL runtime's
CPU device over torch CPU tensors, which is how the kernels are compiled and run by a real SYCL compiler
on a machine without an XPU (and with a CPU-only torch).

AdaptiveCpp cannot make an XPU build that runs: torch's XPU queue (``aoti_torch_get_current_sycl_queue``)
is a DPC++ ``sycl::queue``, an object of another SYCL implementation; such a build is refused in
`preflight` with that reason.

Nothing here touches a device at import. Kernels register with ``TORCH_LIBRARY(ANYACCEL_OP_NAMESPACE, m)``
and ``TORCH_LIBRARY_IMPL(..., XPU, m)`` (``CPU`` in a host-device build; docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from typing_extensions import override

from anyaccel.op_builder.core.builder import OpBuilder
from anyaccel.op_builder.core.environ import scoped_environ
from anyaccel.op_builder.core.loading import prebuilt_root
from anyaccel.op_builder.errors import OpBuilderError
from anyaccel.op_builder.toolchains import ninja as nj
from anyaccel.op_builder.toolchains import records, torch_abi
from anyaccel.op_builder.toolchains import sycl as sycl_toolchain
from anyaccel.op_builder.toolchains.host import file_identity, find_cxx

logger = logging.getLogger(__name__)


class XPUArchError(OpBuilderError, ValueError):
    """``TORCH_XPU_ARCH_LIST`` is malformed; the message names the entry and the variable."""


class XPUSupportError(OpBuilderError, RuntimeError):
    """An XPU op was asked to build with a torch that has no XPU support (``torch.xpu._is_compiled()`` is
    False); the message names the torch version and the fix."""


#: The define that selects a host-device build of the SYCL sources (see the module docstring).
HOST_DEVICE_DEFINE = "-DANYACCEL_SYCL_HOST_DEVICE=1"

class SYCLImplementationError(OpBuilderError, RuntimeError):
    """An XPU build was asked of a SYCL compiler whose objects cannot share torch's XPU queue (AdaptiveCpp);
    the message names the compiler and the fix."""


def torch_has_xpu() -> bool:
    """Whether the running torch was built with XPU (SYCL) support. No device initialisation."""
    import torch

    compiled = getattr(getattr(torch, "xpu", None), "_is_compiled", None)
    return bool(compiled()) if compiled is not None else False


class SYCLOpBuilder(OpBuilder):
    """Base of the SYCL op builders (``XPUFusedAdamBuilder``, ``XPUFusedLionBuilder``).

    Subclasses set ``NAME``, ``BUILD_VAR`` and [`sources`][anyaccel.op_builder.core.builder.OpBuilder.sources]
    (``.sycl`` files relative to the package
    directory); the shared SYCL headers live in ``csrc/includes/sycl`` and are part of the key.

    Attributes:
        BACKEND: ``"xpu"``.
        DEVICE_TYPE: ``"xpu"``.
        HEADER_SUFFIXES: C/C++ headers (``.hpp`` included).
        BUILD_HOST_FIELDS: the host compiler and the SYCL compiler's identity describe the build machine;
            a prebuilt artifact matches without them. The arch list and torch's XPU version stay: they are
            the binary's runtime contract.
    """

    BACKEND: ClassVar[str] = "xpu"
    DEVICE_TYPE: ClassVar[str] = "xpu"
    BUILD_HOST_FIELDS: ClassVar[tuple[str, ...]] = ("compiler", "device_compiler", "built_with_torch")

    def __init__(self, host_device: bool = False) -> None:
        """
        Args:
            host_device: build for the SYCL runtime's CPU device over torch CPU tensors (the CPU dispatch key)
                instead of torch's XPU; the same sources, with ``ANYACCEL_SYCL_HOST_DEVICE=1``. Needs no XPU
                torch; meant for tests of the kernels where no XPU is.
        """
        super().__init__()
        self.host_device = host_device
        self._arch: list[str] | None = None
        self._compiler: sycl_toolchain.SyclCompiler | None = None

    # ----- data --------------------------------------------------------------------------------------------
    def cxx_args(self) -> list[str]:
        """Host-compiler flags: ``-O3`` (torch adds the C++ standard its headers need)."""
        return ["-O3"]

    def sycl_args(self) -> list[str]:
        """SYCL-compiler flags: ``-O3``, and `HOST_DEVICE_DEFINE` in a host-device build.

        torch adds ``-fsycl``, ``-sycl-std=2020``, the targets and the host-compiler options; see the module
        docstring.
        """
        return ["-O3", HOST_DEVICE_DEFINE] if self.host_device else ["-O3"]

    def arch_list(self) -> list[str]:
        """The XPU archs of the build (empty: JIT only), resolved once per builder instance.

        Raises:
            XPUArchError: ``TORCH_XPU_ARCH_LIST`` is malformed.
        """
        if self._arch is None:
            try:
                self._arch = sycl_toolchain.xpu_arch_list()
            except ValueError as exc:
                raise XPUArchError(str(exc)) from None
        return list(self._arch)

    def _device_compiler(self) -> Path | None:
        """The SYCL compiler candidate (file-system lookups only; ``ANYACCEL_SYCL_CXX`` errors propagate)."""
        return sycl_toolchain.find_sycl_compiler()

    def extra_key_inputs(self) -> dict[str, Any]:
        """``sycl_args``, the arch list, torch's XPU version and the SYCL compiler's identity. Spawns no process.

        Raises:
            XPUArchError: see [`arch_list`][anyaccel.op_builder.backends.sycl.SYCLOpBuilder.arch_list].
            ToolchainError: ``ANYACCEL_SYCL_CXX`` names nothing.
        """
        import torch

        compiler = self._device_compiler()
        return {
            "sycl_args": self.sycl_args(),
            "xpu_arch_list": self.arch_list(),
            "torch_xpu": getattr(torch.version, "xpu", None),
            "device_compiler": file_identity(compiler) if compiler else None,
        }

    @staticmethod
    def _searched() -> str:
        """Where the SYCL compiler was looked for: each toolkit's record's look-up, in words."""
        return "; ".join(records.searched(t.toolchain) for t in sycl_toolchain.TOOLKITS.values())

    # ----- compatibility -----------------------------------------------------------------------------------
    def compatibility(self) -> tuple[bool, str]:
        """Whether this op can be loaded here, and why not. Spawns no process.

        Checks, in order: a torch built with XPU support; a visible XPU (``torch.xpu.is_available()``); a
        matching prebuilt artifact; else a SYCL compiler candidate and a host C++ compiler.

        Returns:
            (True, "") or (False, reason naming what is missing).
        """
        import torch

        if self.host_device:
            if self._device_compiler() is None:
                return False, f"no SYCL compiler ({self._searched()})"
            return True, ""
        if not torch_has_xpu():
            return False, f"torch {torch.__version__} is not built with XPU support (torch.xpu._is_compiled() is False)"
        if not torch.get_device_module("xpu").is_available():
            return False, "no XPU device is visible"
        try:
            if (prebuilt_root() / self.NAME).is_dir() and self._find_prebuilt(self.key_inputs(), warn=False):
                return True, ""
            if self._device_compiler() is None:
                return False, f"no SYCL compiler ({self._searched()}) and no prebuilt artifact"
            if find_cxx() is None:
                return False, "no C++ compiler found (set CXX or install g++) and no prebuilt artifact"
        except OpBuilderError as exc:
            return False, str(exc)
        return True, ""

    # ----- building ----------------------------------------------------------------------------------------
    def preflight(self) -> dict[str, str | None]:
        """The host tools (see [`OpBuilder.preflight`][anyaccel.op_builder.core.builder.OpBuilder.preflight]) plus the
        SYCL compiler, checked by running it.

        Returns:
            The core's variables plus ``PATH`` with the SYCL compiler's directory first and
            ``TORCH_XPU_ARCH_LIST`` set to the key's arch list (comma-separated, torch's format).

        Raises:
            XPUSupportError: torch has no XPU support (not raised for a host-device build).
            SYCLImplementationError: an XPU build with AdaptiveCpp (see the module docstring).
            ToolchainError: ``sycl_compiler_missing`` (no SYCL compiler, one that does not run, or one that is
                neither DPC++ nor AdaptiveCpp; host compiler missing), ``ninja_missing``.

        Side effects: runs the toolkits' version probes (``<compiler> --version``, and ``--acpp-version`` for
        AdaptiveCpp).
        """
        import torch

        if not self.host_device and not torch_has_xpu():
            raise XPUSupportError(
                f"op {self.NAME} is a SYCL (XPU) op but torch {torch.__version__} is not built with XPU support; "
                f"install an XPU build of torch (pip install torch --index-url https://download.pytorch.org/whl/xpu)")
        env = super().preflight()
        self._compiler = sycl_toolchain.require_sycl_compiler()
        logger.info("SYCL compiler %s: %s", self._compiler.path, self._compiler.banner)
        if not self._compiler.toolkit.torch_xpu and not self.host_device:
            raise SYCLImplementationError(
                f"op {self.NAME}: the SYCL compiler found is AdaptiveCpp ({self._compiler.path}), whose kernels "
                f"cannot run on torch's XPU queue (a DPC++ sycl::queue); install Intel's icpx (oneAPI DPC++/C++ "
                f"compiler) and put it on PATH or name it by {sycl_toolchain.SYCL_CXX_ENV}")
        env["PATH"] = f"{self._compiler.path.parent}{os.pathsep}{env.get('PATH') or os.environ.get('PATH', os.defpath)}"
        env[sycl_toolchain.ARCH_LIST_ENV] = ",".join(self.arch_list())
        return env

    @contextlib.contextmanager
    def _torch_sees_compiler(self, build_dir: Path) -> Iterator[None]:
        """Make torch's ``icpx`` (run by name from PATH) and its ``SYCL_HOME`` be our checked compiler.

        torch computes ``SYCL_HOME`` once, when ``torch.utils.cpp_extension`` is first imported; when that
        was None (icpx not on PATH then) it is set to the compiler's install root for the build and
        restored afterwards. A compiler not named ``icpx`` (``ANYACCEL_SYCL_CXX=/x/clang++``) is reached
        through a symlink named ``icpx`` in the private build directory.
        """
        import torch.utils.cpp_extension as cpp

        compiler = self._compiler or sycl_toolchain.require_sycl_compiler()
        updates: dict[str, str | None] = {}
        if compiler.path.name != sycl_toolchain.TORCH_SYCL_COMPILER_NAME:
            shim = build_dir / "sycl-bin"
            shim.mkdir(exist_ok=True)
            (shim / sycl_toolchain.TORCH_SYCL_COMPILER_NAME).symlink_to(compiler.path)
            updates["PATH"] = f"{shim}{os.pathsep}{os.environ.get('PATH', os.defpath)}"
        saved_home = getattr(cpp, "SYCL_HOME", None)
        if saved_home is None:
            cpp.SYCL_HOME = str(compiler.home)
        try:
            with scoped_environ(updates):
                yield
        finally:
            if saved_home is None:
                cpp.SYCL_HOME = None

    def _driver_flags(self) -> list[str]:
        """The target flags of a ninja-driver build (a host-device build) with the checked compiler: its record's
        flags for its toolkit's ``host_device_target``, on the compile and on the link."""
        compiler = self._compiler or sycl_toolchain.require_sycl_compiler()
        self._compiler = compiler
        return records.flags_for(compiler.toolkit.toolchain, [compiler.toolkit.host_device_target])

    @override
    def compile_steps(self, env: dict[str, str | None], namespace: str, gen_dir: Path,
                      build_dir: Path) -> list[nj.CompileStep]:
        """One step per source, compiled by the SYCL compiler with its target flags (`_driver_flags`), its
        record's flags for the source's suffix (``.sycl``: ``-x c++``), the host flags, `sycl_args` and the common
        flags (a ninja-driver build only).

        Raises:
            OpBuilderError: a source has a suffix the compiler's record does not compile.
        """
        assert self._compiler is not None  # compile() resolved it
        record = self._compiler.toolkit.toolchain
        flags = self._driver_flags()
        root = self.source_root()
        steps = []
        for i, src in enumerate(self.sources()):
            suffix = Path(src).suffix
            if suffix not in record.source_suffixes:
                raise OpBuilderError(f"op {self.NAME}: source {src} has suffix {suffix!r}; {record.title} compiles "
                                     f"{', '.join(record.source_suffixes)} files")
            command = (str(self._compiler.path), *flags, *record.suffix_flags.get(suffix, ()), *self.host_only_flags(),
                       *self.sycl_args(), *self.common_flags(namespace, gen_dir))
            steps.append(nj.CompileStep(root / src, build_dir / f"{i}_{Path(src).stem}.o", command))
        return steps

    @override
    def link_command(self, env: dict[str, str | None]) -> list[str]:
        """The SYCL compiler links (it adds its runtime library), with ``libtorch_cpu`` only, as the core."""
        assert self._compiler is not None
        return [str(self._compiler.path), *self._driver_flags(), "-shared", *self.extra_ldflags(),
                f"-L{torch_abi.library_dir()}", "-ltorch_cpu"]

    @override
    def compile(self, build_dir: Path, namespace: str, env: dict[str, str | None], verbose: bool) -> Path:
        """Build through ``torch.utils.cpp_extension.load(..., with_sycl=True)``: torch's SYCL rules add
        the device-link step and the SYCL targets, which the plain ninja driver of the other backends lacks.
        The sources still include only the stable ABI and the generated schema header.

        Host-device builds (the only builds an AdaptiveCpp toolkit makes: `preflight` refuses its XPU builds) go
        through the core's ninja driver instead (`compile_steps`, `link_command`): torch's rules run DPC++ only and
        link torch's XPU libraries.

        Returns:
            The built library (torch has also loaded it).

        Raises:
            RuntimeError: the build failed (the core turns it into a diagnosed ``BuildError``).
        """
        compiler = self._compiler or sycl_toolchain.require_sycl_compiler()
        if self.host_device:
            self._compiler = compiler
            return super().compile(build_dir, namespace, env, verbose)
        from torch.utils.cpp_extension import load as cpp_load

        gen_dir = build_dir / "gen"
        gen_dir.mkdir()
        self.write_generated_headers(gen_dir)
        root = self.source_root()
        flags = [f for f in self.common_flags(namespace, gen_dir) if not f.startswith("-I") and f != "-isystem"
                 and f != str(torch_abi.include_dir())]
        with self._torch_sees_compiler(build_dir):
            return Path(cpp_load(
                name=f"{self.NAME}_{namespace[-10:]}",
                sources=[str(root / src) for src in self.sources()],
                extra_cflags=self.cxx_args() + flags,
                extra_sycl_cflags=self.sycl_args() + flags,
                extra_include_paths=[str(gen_dir), *(str(root / p) for p in self.include_paths())],
                build_directory=str(build_dir),
                verbose=verbose,
                with_cuda=False,
                with_sycl=True,
                is_python_module=False,
            ))

    def builder(self) -> Any:
        """A setuptools ``SyclExtension`` for this op (DeepSpeed's ``builder()``), for custom AOT pipelines.

        Build it with ``TORCH_XPU_ARCH_LIST`` set as for the key (``torch.utils.cpp_extension.BuildExtension``
        reads it) and ``icpx`` on PATH.

        Side effects: imports ``torch.utils.cpp_extension`` (whose ``SyclExtension`` needs an XPU torch).
        """
        from torch.utils.cpp_extension import SyclExtension

        from anyaccel.op_builder.core import manifest as mf

        root = self.source_root()
        macro = f"-DANYACCEL_OP_NAMESPACE={self.namespace(mf.compute_key(self.key_inputs()))}"
        return SyclExtension(
            name=self.absolute_name(),
            sources=[str(root / s) for s in self.sources()],
            include_dirs=[str(root / p) for p in self.include_paths()],
            extra_compile_args={"cxx": self.cxx_args() + [macro], "sycl": self.sycl_args() + [macro]},
            extra_link_args=self.extra_ldflags(),
        )
