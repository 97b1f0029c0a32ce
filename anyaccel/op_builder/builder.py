"""``OpBuilder``: DeepSpeed's op-builder vocabulary on a crash-safe, content-addressed load path.

One load path (``shared/design.md`` "Op-builder layer"):

1. in-process table by cache key (a second ``load()`` costs a dict lookup; a failed build raises the same
   :class:`BuildError` again);
2. a prebuilt (AOT) artifact whose manifest matches the running torch/Python/sources;
3. the content-addressed disk cache, manifest checked;
4. a JIT build under an OS lock, in a private directory, published with one ``os.rename``.

Steps 1-3 spawn no process and import nothing heavy: the key uses the compiler's path, size and mtime,
never its ``--version``. A subclass is mostly data (``NAME``, ``BUILD_VAR``, :meth:`sources`,
:meth:`include_paths`, :meth:`cxx_args`); a backend base overrides the hooks :meth:`preflight` (tools and
environment of the build), :meth:`compile` (the compile call) and :meth:`extra_key_inputs`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, ClassVar, ContextManager, Optional

from anyaccel.op_builder import manifest as mf
from anyaccel.op_builder.cache import Cache
from anyaccel.op_builder.environ import scoped_environ
from anyaccel.op_builder.errors import DIAGNOSES, BuildError, OpBuilderError, ToolchainError, diagnose, first_error_lines
from anyaccel.op_builder.lock import BuildLock
from anyaccel.op_builder.module import OpModule
from anyaccel.op_builder.toolchain import build_jobs, file_identity, find_cxx, python_tag, require_cxx, require_ninja, tool_version
from anyaccel.version import __version__

logger = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parent.parent
PREBUILT_ENV = "ANYACCEL_PREBUILT_DIR"
LIBRARY_NAME = "op.so"

# Process-wide state, keyed by cache key (the namespace is derived from it, so one key = one library).
_LOADED: dict[str, OpModule] = {}
_FAILED: dict[str, BuildError] = {}
_KEY_LOCKS: dict[str, threading.Lock] = {}
_STATE_LOCK = threading.Lock()
_WARNED_PREBUILT: set[str] = set()


def _key_lock(key: str) -> threading.Lock:
    with _STATE_LOCK:
        return _KEY_LOCKS.setdefault(key, threading.Lock())


def prebuilt_root() -> Path:
    """Where AOT-built ops are looked up: ``ANYACCEL_PREBUILT_DIR``, else ``anyaccel/_prebuilt``."""
    return Path(os.environ.get(PREBUILT_ENV) or PACKAGE_DIR / "_prebuilt")


def _ninja_command(log_text: str) -> str:
    """The command ninja reports after ``FAILED:``, or ""."""
    lines = log_text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("FAILED:") and i + 1 < len(lines):
            return lines[i + 1].strip()
    return ""


class OpBuilder:
    """Base of every op builder (DeepSpeed's ``OpBuilder`` vocabulary).

    Class attributes a subclass sets:
        NAME: the op's name, e.g. "cpu_adam"; also the cache directory name.
        BUILD_VAR: the variable that selects the op for AOT builds, e.g. "ANYACCEL_BUILD_CPU_ADAM".
        BACKEND: the backend family, part of the key ("cpu", "cuda", ...).
        BUILD_HOST_FIELDS: key inputs that describe the build machine rather than the binary's runtime
            contract; they are ignored when matching a prebuilt artifact (a user needs no compiler to use
            one).
        WITH_CUDA: passed to ``torch.utils.cpp_extension.load``; False keeps CUDA libraries off the link line.
        HEADER_SUFFIXES: which files under :meth:`include_paths` are part of the key (a GPU builder adds
            ".cuh"; a CPU op is not rebuilt when a CUDA header changes).
    """

    NAME: ClassVar[str] = ""
    BUILD_VAR: ClassVar[str] = ""
    BACKEND: ClassVar[str] = "generic"
    BUILD_HOST_FIELDS: ClassVar[tuple[str, ...]] = ("compiler",)
    WITH_CUDA: ClassVar[bool] = False
    HEADER_SUFFIXES: ClassVar[tuple[str, ...]] = (".h", ".hpp", ".hh", ".inl")

    def __init__(self) -> None:
        if not self.NAME or not self.NAME.isidentifier():
            raise ValueError(f"{type(self).__name__}.NAME={self.NAME!r} must be a non-empty identifier")

    # ----- DeepSpeed vocabulary: data a subclass provides -------------------------------------------------
    def absolute_name(self) -> str:
        """The dotted name DeepSpeed uses for AOT extensions, ``anyaccel.ops.<NAME>_op``."""
        return f"anyaccel.ops.{self.NAME}_op"

    def source_root(self) -> Path:
        """The directory :meth:`sources` and :meth:`include_paths` are relative to (the package dir)."""
        return PACKAGE_DIR

    def sources(self) -> list[str]:
        """Source files relative to :meth:`source_root`. Subclasses must override."""
        raise NotImplementedError(f"{type(self).__name__} must define sources()")

    def include_paths(self) -> list[str]:
        """Include directories relative to :meth:`source_root`; every file in them is part of the key."""
        return []

    def cxx_args(self) -> list[str]:
        """Extra C++ compiler flags (the namespace macro is added by the builder)."""
        return []

    def nvcc_args(self) -> list[str]:
        """Extra nvcc flags (GPU builders)."""
        return []

    def extra_ldflags(self) -> list[str]:
        """Extra linker flags."""
        return []

    def isa(self) -> Optional[str]:
        """The CPU ISA level compiled in, or None for builders without one."""
        return None

    def extra_key_inputs(self) -> dict[str, Any]:
        """Backend-specific key inputs (e.g. the nvcc identity and GPU arch list). Must not spawn processes."""
        return {}

    def register_fakes(self, namespace: str) -> None:
        """Register fake (meta) implementations of the op's functions in ``namespace`` for torch.compile."""

    # ----- compatibility ------------------------------------------------------------------------------------
    def compatibility(self) -> tuple[bool, str]:
        """Whether this op can be loaded here, and why not. Spawns no process.

        Returns:
            (True, "") or (False, reason), e.g. "no C++ compiler found ..." when neither a prebuilt artifact
            nor a compiler is available.
        """
        try:
            if self._find_prebuilt(self.key_inputs(), warn=False) is not None:
                return True, ""
            if find_cxx() is None:
                return False, "no C++ compiler found (set CXX or install g++) and no prebuilt artifact"
        except OpBuilderError as exc:  # e.g. a bad ANYACCEL_CPU_ISA, a compiler named by CXX that is missing
            return False, str(exc)
        return True, ""

    def is_compatible(self, verbose: bool = False) -> bool:
        """DeepSpeed's check: True when :meth:`compatibility` finds no problem; logs the reason if ``verbose``."""
        ok, reason = self.compatibility()
        if not ok and verbose:
            logger.warning("op %s is not compatible: %s", self.NAME, reason)
        return ok

    def is_built(self) -> bool:
        """Whether a loadable artifact exists (loaded, prebuilt or in the cache) for the current inputs."""
        try:
            inputs = self.key_inputs()
            key = mf.compute_key(inputs)
            if key in _LOADED or self._find_prebuilt(inputs, warn=False) is not None:
                return True
            return self._valid_entry(Cache.open().entry(self.NAME, key), key, inputs) is not None
        except OpBuilderError:
            return False

    # ----- key ------------------------------------------------------------------------------------------------
    def _files_in_key(self) -> list[Path]:
        root = self.source_root()
        files = [root / s for s in self.sources()]
        for inc in self.include_paths():
            files.extend(p for p in (root / inc).rglob("*") if p.suffix in self.HEADER_SUFFIXES and p.is_file())
        return files

    def key_inputs(self) -> dict[str, Any]:
        """Every input that changes the binary (see :mod:`anyaccel.op_builder.manifest`). Spawns no process.

        Raises:
            OSError: a source file is missing.
            ISAError: ``ANYACCEL_CPU_ISA`` is invalid or unsupported (CPU builders).
        """
        import torch

        try:
            cxx = find_cxx()
        except ToolchainError:
            cxx = None
        return {
            "op": self.NAME,
            "backend": self.BACKEND,
            "package_version": __version__,
            "files": mf.hash_files(self._files_in_key(), self.source_root()),
            "include_paths": list(self.include_paths()),
            "cxx_args": self.cxx_args(),
            "nvcc_args": self.nvcc_args(),
            "ldflags": self.extra_ldflags(),
            "torch": torch.__version__,
            "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
            "python": python_tag(),
            "platform": f"{sys.platform}-{platform.machine()}",
            "compiler": file_identity(cxx) if cxx else None,
            "isa": self.isa(),
            **self.extra_key_inputs(),
        }

    def namespace(self, key: str) -> str:
        """The torch op namespace of a build: ``anyaccel_<NAME>_<key[:10]>``."""
        return f"anyaccel_{self.NAME}_{key[:10]}"

    # ----- load path ----------------------------------------------------------------------------------------
    def load(self, verbose: bool = False) -> OpModule:
        """Load the op, building it if needed (the four steps in the module docstring).

        Args:
            verbose: log build progress and the compiler output at INFO.

        Returns:
            The :class:`OpModule`.

        Raises:
            BuildError: the build failed (the same object on every later attempt in this process).
            CacheSecurityError: the cache root is not private to the current user.
            LockTimeoutError: another process held the build lock longer than the timeout.
            ISAError: a bad ``ANYACCEL_CPU_ISA``.

        Side effects: may compile (minutes of CPU), writes to the cache, loads a shared library into the
        process and registers its ops with the torch dispatcher.
        """
        return self._load(use_prebuilt=True, verbose=verbose)

    def jit_load(self, verbose: bool = False) -> OpModule:
        """Like :meth:`load` but ignores prebuilt artifacts (cache, else build)."""
        return self._load(use_prebuilt=False, verbose=verbose)

    def _load(self, use_prebuilt: bool, verbose: bool) -> OpModule:
        inputs = self.key_inputs()
        key = mf.compute_key(inputs)
        with _key_lock(key):
            if key in _LOADED:
                return _LOADED[key]
            if key in _FAILED:
                raise _FAILED[key]
            try:
                module = self._find_prebuilt(inputs, warn=True) if use_prebuilt else None
                if module is None:
                    module = self._load_from_cache(Cache.open(), key, inputs, verbose)
            except BuildError as exc:
                _FAILED[key] = exc
                raise
            _LOADED[key] = module
            return module

    def _open_library(self, path: Path, namespace: str, isa: Optional[str], key: str, source: str) -> OpModule:
        import torch

        try:
            torch.ops.load_library(str(path))
        except (OSError, RuntimeError) as exc:
            raise BuildError(self.NAME, DIAGNOSES["load_error"], detail=f"loading {path}: {exc}") from exc
        self.register_fakes(namespace)
        module = OpModule(self.NAME, namespace, path, isa, key, source)
        logger.debug("loaded %r from %s", module, source)
        return module

    def _find_prebuilt(self, inputs: dict[str, Any], warn: bool) -> Optional[OpModule]:
        op_dir = prebuilt_root() / self.NAME
        if not op_dir.is_dir():
            return None
        reasons = []
        for entry in sorted(p for p in op_dir.iterdir() if p.is_dir()):
            man = mf.read_manifest(entry)
            if man is None or not (entry / LIBRARY_NAME).is_file():
                continue
            bad = mf.mismatches(man["inputs"], inputs, ignore=self.BUILD_HOST_FIELDS)
            if not bad:
                if not warn:
                    return OpModule(self.NAME, man["namespace"], entry / LIBRARY_NAME, man.get("isa"), man["key"],
                                    "prebuilt")
                return self._open_library(entry / LIBRARY_NAME, man["namespace"], man.get("isa"), man["key"],
                                          "prebuilt")
            reasons.append(f"{entry.name[:10]}: " + ", ".join(
                f"{f} {man['inputs'].get(f)!r} != {inputs.get(f)!r}" if f not in ("files",) else "sources differ"
                for f in bad))
        if warn and reasons and self.NAME not in _WARNED_PREBUILT:
            _WARNED_PREBUILT.add(self.NAME)
            logger.warning("prebuilt op %s does not match this environment (%s); building it just in time",
                           self.NAME, "; ".join(reasons))
        return None

    def _valid_entry(self, entry: Path, key: str, inputs: dict[str, Any]) -> Optional[dict[str, Any]]:
        """The manifest of a published entry if it is complete and matches ``inputs``, else None."""
        if not entry.is_dir():
            return None
        man = mf.read_manifest(entry)
        if man is None or man.get("key") != key or not (entry / LIBRARY_NAME).is_file():
            logger.warning("cache entry %s is incomplete or damaged; rebuilding it", entry)
            return None
        bad = mf.mismatches(man.get("inputs", {}), inputs)
        if bad:
            logger.warning("cache entry %s was built from other inputs (%s); rebuilding it", entry, ", ".join(bad))
            return None
        return man

    def _load_from_cache(self, cache: Cache, key: str, inputs: dict[str, Any], verbose: bool) -> OpModule:
        entry = cache.entry(self.NAME, key)
        man = self._valid_entry(entry, key, inputs)
        if man is None:
            with BuildLock(cache.lock_path(self.NAME, key), what=f"op {self.NAME} ({key[:10]})"):
                man = self._valid_entry(entry, key, inputs)  # another process may have built it meanwhile
                if man is None:
                    return self._build_and_publish(cache.tmp, cache.logs, entry, key, inputs, verbose)
        return self._open_library(entry / LIBRARY_NAME, man["namespace"], man.get("isa"), key, "cache")

    # ----- building -----------------------------------------------------------------------------------------
    def preflight(self) -> dict[str, Optional[str]]:
        """Check the tools a build needs and return the environment the compile runs with.

        Returns:
            Variables to set (or remove, None) only for the duration of the compile: ``CXX`` (the resolved
            compiler), ``MAX_JOBS`` (:func:`~anyaccel.op_builder.toolchain.build_jobs`) and ``PATH`` with
            ninja's directory first.

        Raises:
            ToolchainError: ``compiler_missing`` or ``ninja_missing``.
        """
        cxx = require_cxx()
        ninja = require_ninja()
        path = os.environ.get("PATH", os.defpath)
        return {"CXX": str(cxx), "MAX_JOBS": str(build_jobs()), "PATH": f"{ninja.parent}{os.pathsep}{path}"}

    def load_kwargs(self, build_dir: Path, name: str, extra_cflags: list[str]) -> dict[str, Any]:
        """The keyword arguments of ``torch.utils.cpp_extension.load`` for one build.

        Backends extend this (CUDA adds ``extra_cuda_cflags``, SYCL ``extra_sycl_cflags`` and
        ``with_sycl``, NPU its include directories and libraries) rather than repeating the call.

        Args:
            build_dir: a private, empty directory.
            name: a unique library name for this build.
            extra_cflags: flags added by the core (the namespace macro); backends pass them to every compiler.
        """
        root = self.source_root()
        return dict(
            name=name,
            sources=[str(root / s) for s in self.sources()],
            extra_cflags=self.cxx_args() + extra_cflags,
            extra_ldflags=self.extra_ldflags(),
            extra_include_paths=[str(root / p) for p in self.include_paths()],
            build_directory=str(build_dir),
            verbose=False,
            with_cuda=self.WITH_CUDA,
            is_python_module=False,
        )

    def compile_context(self, build_dir: Path) -> ContextManager[None]:
        """A context held around the compile call (a no-op here; SYCL points torch at its compiler)."""
        return contextlib.nullcontext()

    def compile(self, build_dir: Path, name: str, extra_cflags: list[str], verbose: bool) -> Path:
        """Compile and link the sources in ``build_dir`` with ``torch.utils.cpp_extension.load``.

        Args:
            build_dir: a private, empty directory.
            name: a unique library name for this build.
            extra_cflags: flags added by the builder (the namespace macro).
            verbose: unused (the output is captured for the diagnosis).

        Returns:
            The built shared library (torch has already loaded it into this process).

        Raises:
            RuntimeError: the build failed; the message holds ninja's and the compiler's output.

        Side effects: imports ``torch.utils.cpp_extension``; runs ninja and the compilers.
        """
        from torch.utils.cpp_extension import load as cpp_load

        with self.compile_context(build_dir):
            return Path(cpp_load(**self.load_kwargs(build_dir, name, extra_cflags)))

    def _build_and_publish(self, tmp_parent: Path, logs_dir: Path, entry: Path, key: str, inputs: dict[str, Any],
                           verbose: bool) -> OpModule:
        """Build in a private directory under ``tmp_parent`` and rename the result to ``entry``."""
        namespace = self.namespace(key)
        tmp_parent.mkdir(parents=True, exist_ok=True)
        logs_dir.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f"{self.NAME}-{key[:10]}-", dir=tmp_parent))
        stamp = time.strftime("%Y%m%d-%H%M%S")
        fail_log = logs_dir / f"{self.NAME}-{key[:10]}-{stamp}-{os.getpid()}.log"
        header = f"op {self.NAME}\nkey {key}\nnamespace {namespace}\ninputs {inputs}\n"
        try:
            try:
                env = self.preflight()
            except ToolchainError as exc:
                fail_log.write_text(header + f"\n{exc}\n")
                raise BuildError(self.NAME, DIAGNOSES[exc.code], detail=str(exc), log_path=fail_log) from None
            logger.info("building op %s (%s) with %s jobs; this takes a while the first time",
                        self.NAME, key[:10], env.get("MAX_JOBS", "?"))
            t0 = time.monotonic()
            (work / "build").mkdir()
            try:
                with scoped_environ(env):
                    lib = self.compile(work / "build", f"{self.NAME}_{key[:10]}", [f"-DANYACCEL_OP_NAMESPACE={namespace}"],
                                       verbose)
            except (RuntimeError, OSError) as exc:
                text = str(exc)
                cause = exc.__cause__
                rc = getattr(cause, "returncode", None)
                fail_log.write_text(header + "\n" + text + "\n")
                raise BuildError(self.NAME, diagnose(text, rc), command=_ninja_command(text), returncode=rc,
                                 error_lines=first_error_lines(text), log_path=fail_log) from None
            seconds = time.monotonic() - t0
            out = work / "out"
            out.mkdir()
            os.replace(lib, out / LIBRARY_NAME)  # same inode: the copy torch loaded is the published one
            ninja_file = work / "build" / "build.ninja"
            compiler = env.get("CXX")
            (out / "build.log").write_text(
                header + f"compiler {compiler}: {tool_version(Path(compiler)) if compiler else 'n/a'}\n"
                f"seconds {seconds:.2f}\n\n" + (ninja_file.read_text() if ninja_file.exists() else ""))
            mf.write_manifest(out, {"key": key, "namespace": namespace, "isa": self.isa(), "inputs": inputs,
                                    "library": LIBRARY_NAME, "created": time.time(), "build_seconds": seconds,
                                    "compiler_version": tool_version(Path(compiler)) if compiler else None})
            entry.parent.mkdir(parents=True, exist_ok=True)
            if entry.exists():  # a damaged or stale entry: move it aside in one rename, then delete it
                trash = work / "old"
                os.rename(entry, trash)
            os.rename(out, entry)
            logger.info("built op %s in %.1f s -> %s", self.NAME, seconds, entry)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return self._open_library(entry / LIBRARY_NAME, namespace, self.isa(), key, "built")

    def build_prebuilt(self, dest_root: Path, verbose: bool = False) -> Path:
        """Build the op ahead of time into ``dest_root/<NAME>/<key>`` (setup.py and ``anyaccel build``).

        Returns:
            The entry directory (library, manifest, build log).

        Raises:
            BuildError: as :meth:`load`.
        """
        inputs = self.key_inputs()
        key = mf.compute_key(inputs)
        entry = Path(dest_root) / self.NAME / key
        if self._valid_entry(entry, key, inputs) is None:
            with _key_lock(key):
                if key in _LOADED:  # already built in this process: copy the published artifact
                    src = _LOADED[key].path.parent
                    if src != entry:
                        entry.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copytree(src, entry, dirs_exist_ok=True)
                    return entry
                module = self._build_and_publish(Path(dest_root) / ".tmp", Path(dest_root) / ".logs", entry, key,
                                                 inputs, verbose)
                _LOADED[key] = module
        return entry

    def builder(self) -> Any:
        """A setuptools extension for this op (DeepSpeed's ``builder()``), for custom AOT pipelines.

        Side effects: imports ``torch.utils.cpp_extension``.
        """
        from torch.utils.cpp_extension import CppExtension

        root = self.source_root()
        key = mf.compute_key(self.key_inputs())
        return CppExtension(
            name=self.absolute_name(),
            sources=[str(root / s) for s in self.sources()],
            include_dirs=[str(root / p) for p in self.include_paths()],
            extra_compile_args={"cxx": self.cxx_args() + [f"-DANYACCEL_OP_NAMESPACE={self.namespace(key)}"]},
            extra_link_args=self.extra_ldflags(),
        )
