"""``NPUOpBuilder``: the op-builder base for Ascend NPUs, and discovery of the CANN toolkit and torch_npu.

An NPU op is C++ compiled by the host compiler (on torch's stable ABI, like every other build) with the
CANN toolkit's headers (``include/acl/acl.h``), linked to ``libascendcl.so``, and registered for the
``PrivateUse1`` dispatch key that torch_npu claims. `NPUDelegatingBuilder` serves spec builds that
compile nothing because torch_npu already ships the kernels (``NativeBuild.module``).

Toolkit discovery, file system only (no process), first hit wins:

1. ``ASCEND_HOME_PATH`` (set by CANN's ``set_env.sh``), then ``ASCEND_TOOLKIT_HOME``: a variable that is set
   must name a complete toolkit, else a `ToolchainError` names the missing file (a broken
   ``set_env.sh`` is never silently replaced by another install);
2. ``/usr/local/Ascend/ascend-toolkit/latest`` (CANN's default install prefix).

torch_npu is found with ``importlib.util.find_spec`` (never imported here). The toolkit's identity (root,
version from ``ascend_toolkit_install.info``, size and mtime of ``libascendcl.so``) and torch_npu's version
join the cache key.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from typing_extensions import override

from anyaccel.op_builder.core.builder import OpBuilder
from anyaccel.op_builder.core.loading import prebuilt_root
from anyaccel.op_builder.errors import OpBuilderError, ToolchainError
from anyaccel.op_builder.toolchains.host import file_identity, find_cxx
from anyaccel.spec import resolve

logger = logging.getLogger(__name__)

#: Variables naming the toolkit root, in the order they are read.
TOOLKIT_ENVS: tuple[str, ...] = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
DEFAULT_TOOLKIT = Path("/usr/local/Ascend/ascend-toolkit/latest")
#: Files a usable toolkit has, relative to its root -> the diagnosis code when one is missing.
REQUIRED_FILES: dict[str, str] = {"include/acl/acl.h": "header_missing", "lib64/libascendcl.so": "library_missing"}
VENDOR_PACKAGE = "torch_npu"
_INSTALL_INFO = "ascend_toolkit_install.info"
_VERSION_LINE = re.compile(r"^\s*version\s*=\s*(\S+)", re.MULTILINE)


@dataclass(frozen=True)
class AscendToolkit:
    """A CANN toolkit install.

    Attributes:
        home: its root (``.../ascend-toolkit/latest`` or the directory a variable names).
        source: where it was found: the variable's name, or "default".
        version: e.g. "8.0.RC2" from ``ascend_toolkit_install.info``, or None when that file is absent.
    """

    home: Path
    source: str
    version: str | None

    @property
    def include_dir(self) -> Path:
        """``<home>/include`` (``acl/acl.h``)."""
        return self.home / "include"

    @property
    def lib_dir(self) -> Path:
        """``<home>/lib64`` (``libascendcl.so``)."""
        return self.home / "lib64"

    def identity(self) -> dict[str, Any]:
        """Key input: root, version and the runtime library's file identity (no process)."""
        return {"home": str(self.home), "version": self.version,
                "libascendcl": file_identity(self.lib_dir / "libascendcl.so")}


def _missing(home: Path) -> tuple[str, str] | None:
    for rel, code in REQUIRED_FILES.items():
        if not (home / rel).is_file():
            return rel, code
    return None


def toolkit_version(home: Path) -> str | None:
    """The ``version=`` of ``ascend_toolkit_install.info`` at ``home`` or in ``home/<arch>-linux/``, or None."""
    for info in [home / _INSTALL_INFO, *sorted(home.glob(f"*-linux/{_INSTALL_INFO}"))]:
        if info.is_file():
            m = _VERSION_LINE.search(info.read_text(errors="replace"))
            if m:
                return m.group(1)
    return None


def find_ascend_toolkit(env: Mapping[str, str] | None = None,
                        default: Path = DEFAULT_TOOLKIT) -> AscendToolkit | None:
    """The CANN toolkit, by the order of the module docstring (file-system lookups only).

    Args:
        env: environment to read ``ASCEND_HOME_PATH`` / ``ASCEND_TOOLKIT_HOME`` from; ``os.environ`` when None.
        default: the default install root tried last.

    Returns:
        The toolkit, or None when no variable is set and the default root is absent or incomplete.

    Raises:
        ToolchainError: ``header_missing`` / ``library_missing`` when a variable names a directory without
            ``include/acl/acl.h`` / ``lib64/libascendcl.so``; the message names the variable and the file.
    """
    env = os.environ if env is None else env
    for var in TOOLKIT_ENVS:
        value = env.get(var, "").strip()
        if not value:
            continue
        home = Path(value)
        missing = _missing(home)
        if missing is not None:
            rel, code = missing
            raise ToolchainError(code, f"{var}={value!r} is not a CANN toolkit: {home / rel} does not exist; "
                                 f"source <toolkit>/set_env.sh of a complete Ascend toolkit install or unset {var}")
        return AscendToolkit(home, var, toolkit_version(home))
    if _missing(default) is None:
        return AscendToolkit(default, "default", toolkit_version(default))
    return None


@dataclass(frozen=True)
class TorchNPU:
    """The installed torch_npu package, found without importing it.

    Attributes:
        root: the package directory. version: its distribution version, or None.
    """

    root: Path
    version: str | None

    @property
    def include_dir(self) -> Path:
        """``<torch_npu>/include`` (``torch_npu/csrc/...`` headers)."""
        return self.root / "include"

    @property
    def lib_dir(self) -> Path:
        """``<torch_npu>/lib`` (``libtorch_npu.so``)."""
        return self.root / "lib"


def find_torch_npu() -> TorchNPU | None:
    """torch_npu's package directory and version via ``importlib.util.find_spec`` (no import), or None."""
    spec = importlib.util.find_spec(VENDOR_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    try:
        version: str | None = importlib.metadata.version(VENDOR_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = None
    return TorchNPU(Path(spec.origin).parent, version)


class NPUOpBuilder(OpBuilder):
    """Base of the builders of C++ ops for Ascend NPUs (sources compiled by the host C++ compiler).

    Attributes:
        BACKEND: ``"npu"``.
        DEVICE_TYPE: ``"npu"`` (torch_npu's name for its PrivateUse1 device).
        BUILD_HOST_FIELDS: the host compiler and the torch the build ran under; the toolkit and torch_npu
            versions are runtime contracts.
    """

    BACKEND: ClassVar[str] = "npu"
    DEVICE_TYPE: ClassVar[str] = "npu"
    BUILD_HOST_FIELDS: ClassVar[tuple[str, ...]] = ("compiler", "built_with_torch")

    def toolkit(self) -> AscendToolkit | None:
        """The CANN toolkit (see `find_ascend_toolkit`)."""
        return find_ascend_toolkit()

    def extra_key_inputs(self) -> dict[str, Any]:
        """The toolkit's identity and torch_npu's version. Spawns no process.

        Raises:
            ToolchainError: a toolkit variable names an incomplete install.
        """
        tk = self.toolkit()
        npu = find_torch_npu()
        return {"ascend_toolkit": tk.identity() if tk else None, "torch_npu": npu.version if npu else None}

    def _device_paths(self) -> tuple[AscendToolkit, TorchNPU]:
        npu = find_torch_npu()
        if npu is None:
            raise ToolchainError("header_missing", f"op {self.NAME} is an NPU op but {VENDOR_PACKAGE} is not "
                                 f"installed; install the torch_npu build matching torch {_torch_version()}")
        tk = self.toolkit()
        if tk is None:
            raise ToolchainError("header_missing", f"no CANN toolkit found: {' and '.join(TOOLKIT_ENVS)} are unset and "
                                 f"{DEFAULT_TOOLKIT} has no include/acl/acl.h; install the Ascend toolkit and "
                                 f"`source <toolkit>/set_env.sh`")
        return tk, npu

    def compatibility(self) -> tuple[bool, str]:
        """Whether this op can be loaded here: torch_npu installed; a matching prebuilt, or a toolkit and a C++
        compiler. Spawns no process, imports no vendor package.
        """
        if find_torch_npu() is None:
            return False, f"{VENDOR_PACKAGE} is not installed"
        try:
            if (prebuilt_root() / self.NAME).is_dir() and self._find_prebuilt(self.key_inputs(), warn=False):
                return True, ""
            if self.toolkit() is None:
                return False, f"no CANN toolkit ({', '.join(TOOLKIT_ENVS)} unset, {DEFAULT_TOOLKIT} absent)"
            if find_cxx() is None:
                return False, "no C++ compiler found (set CXX or install g++) and no prebuilt artifact"
        except OpBuilderError as exc:
            return False, str(exc)
        return True, ""

    def preflight(self) -> dict[str, str | None]:
        """The host tools plus the device stack; ``ASCEND_HOME_PATH`` is set to the toolkit for the compile.

        Raises:
            ToolchainError: host tools missing; torch_npu or the toolkit missing (``header_missing``).
        """
        env = super().preflight()
        tk, _ = self._device_paths()
        env["ASCEND_HOME_PATH"] = str(tk.home)
        return env

    @override
    def host_compile_command(self, env: dict[str, str | None], namespace: str, gen_dir: Path) -> list[str]:
        """The core's host command plus the toolkit's include directory (identified in the key by the
        toolkit's version, not hashed file by file)."""
        tk, _ = self._device_paths()
        return [*super().host_compile_command(env, namespace, gen_dir), f"-I{tk.include_dir}"]

    @override
    def link_command(self, env: dict[str, str | None]) -> list[str]:
        """The core's link plus ``libascendcl``."""
        tk, _ = self._device_paths()
        return [*super().link_command(env), f"-L{tk.lib_dir}", "-lascendcl"]


class NPUDelegatingBuilder(OpBuilder):
    """An NPU op served by Python over torch_npu's own kernels (a spec build with ``module=``): nothing to
    compile; `load` returns the module's torch ops (``"anyaccel.ops.adam.npu:load"``), as DeepSpeed's NPU
    ``FusedAdamBuilder`` returns a Python class.

    A sibling of `NPUOpBuilder`, not its subclass: it uses none of the toolkit's hooks, and a spec build's
    class then has two of anyaccel's bases (this one and `OpBuilder`).
    """

    BACKEND: ClassVar[str] = NPUOpBuilder.BACKEND
    DEVICE_TYPE: ClassVar[str] = NPUOpBuilder.DEVICE_TYPE

    @override
    def sources(self) -> list[str]:
        """None: the op is Python over torch_npu's kernels."""
        return []

    @override
    def compatibility(self) -> tuple[bool, str]:
        """Available when torch_npu is installed (found without importing it); no toolkit or compiler needed."""
        if find_torch_npu() is None:
            return False, f"{VENDOR_PACKAGE} is not installed"
        return True, ""

    @override
    def is_built(self) -> bool:
        """Always True: there is nothing to build."""
        return True

    @override
    def load(self, verbose: bool = False) -> Any:
        """The op's torch ops (e.g. ``adam_step``) over torch_npu's kernels; compiles nothing.

        Raises:
            ImportError: torch_npu is not installed (the message names it).

        Returns:
            The op's torch ops, plus the functions integrations add for the build (DeepSpeed's
            ``multi_tensor_adam``...; `anyaccel.op_builder.core.module_functions`).

        Side effects: imports torch_npu (which registers the ``npu`` device type), then registers the
        Python-level ops.
        """
        ok, reason = self.compatibility()
        if not ok:
            raise ImportError(f"op {self.NAME} on NPU needs {VENDOR_PACKAGE}: {reason}; install the torch_npu build "
                              f"matching torch")
        assert self.BUILD is not None and self.BUILD.module is not None
        if verbose:
            logger.info("op %s on NPU: %s (torch_npu kernels, nothing to build)", self.NAME, self.BUILD.module)
        # torch knows the "npu" device type only after torch_npu renamed PrivateUse1; the ops are registered
        # for it below, so the vendor package is imported first (an installed package: compatibility() said so).
        importlib.import_module(VENDOR_PACKAGE)
        from anyaccel.op_builder.core.module import with_adapted_functions

        native = frozenset() if self.SPEC is None else frozenset(fn.name for fn in self.SPEC.functions)
        # the integrations are asked on the first name the torch ops do not answer, never at load
        return with_adapted_functions(resolve(self.BUILD.module)(),
                                      lambda: self._module_extras().get("functions"), native)

    @override
    def jit_load(self, verbose: bool = False) -> Any:
        """Same as `load`."""
        return self.load(verbose)

    @override
    def build_prebuilt(self, dest_root: Path, verbose: bool = False) -> Path:
        """Nothing to compile ahead of time: returns the Python module's file (what will serve the op).

        Raises:
            ImportError: the module cannot be found.
        """
        assert self.BUILD is not None and self.BUILD.module is not None
        module_name = self.BUILD.module.partition(":")[0]
        found = importlib.util.find_spec(module_name)
        if found is None or found.origin is None:
            raise ImportError(f"module {module_name} of op {self.NAME} is missing from the package")
        logger.info("op %s on NPU delegates to torch_npu (%s); nothing to build", self.NAME, module_name)
        return Path(found.origin)


def _torch_version() -> str:
    import torch

    return torch.__version__
