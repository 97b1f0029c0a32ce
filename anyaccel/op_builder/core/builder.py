"""``OpBuilder``: DeepSpeed's op-builder vocabulary on a crash-safe, content-addressed load path, in one class.

[`load`][anyaccel.op_builder.core.builder.OpBuilder.load] comes first and the methods follow in the order it
calls them:

1. **key**: the build as data (the op spec's [`NativeBuild`][anyaccel.spec.NativeBuild]: sources, functions,
   flags, plus the hooks a backend overrides) hashed into a cache key; no process is spawned (the compiler
   counts by path, size and mtime). Sources are compiled against torch's stable ABI
   (`anyaccel.op_builder.toolchains.torch_abi`): the key carries the ABI target, not the torch version, so a
   torch upgrade reuses every artifact.
2. **cache**: the process's one table of loaded ops by key
   ([`LOADED_OPS`][anyaccel.op_builder.core.loaded_ops.LOADED_OPS]: a second ``load()`` costs a dict lookup; a
   failed build raises the same [`BuildError`][anyaccel.op_builder.errors.BuildError] again), then a prebuilt
   (AOT) artifact whose manifest matches (its stable-ABI target not newer than the running torch), then the
   content-addressed disk cache, manifest checked.
3. **lock**: a missing or damaged entry is checked again under an OS lock (another process may have built it).
4. **build**: in a private directory, published with one ``os.rename``, so a reader never sees half an entry;
   a failure leaves a log and publishes nothing.
5. **verify**: nothing is loaded before `inspect_entry` passes (ownership and modes of every path, the
   manifest, the library's SHA-256); after the load the library must have registered the namespace and
   functions this builder expects. A cache entry that fails either check is quarantined (moved aside in one
   rename, logged once per process) and rebuilt.
6. **register**: the spec's fakes and fallback kernels are registered beside the library.

Steps 1-2 spawn no process and import nothing heavy. The loaded ops live in
`anyaccel.op_builder.core.loaded_ops`, the load path's other process-wide state (log-once sets, the prebuilt
root) in `anyaccel.op_builder.core.loading`, the build's helpers in `anyaccel.op_builder.core.compiling`, the
package constants in `anyaccel.op_builder.core.hooks`.

Backends (``backends/``: ``TorchCPUOpBuilder``, ``CUDAOpBuilder``, ``SYCLOpBuilder``, ``NPUOpBuilder``)
subclass [`OpBuilder`][anyaccel.op_builder.core.builder.OpBuilder] and override the hooks (``isa``,
``extra_key_inputs``, ``nvcc_args``, ``preflight``, ``compile_steps``, ``link_command``, ...).
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

from anyaccel.op_builder.core import cache as cache_mod
from anyaccel.op_builder.core import compiling, integrity, interrupt, loading, registration
from anyaccel.op_builder.core import manifest as mf
from anyaccel.op_builder.core.cache import Cache, cache_os_error, check_secure
from anyaccel.op_builder.core.compiling import key_lock
from anyaccel.op_builder.core.environ import scoped_environ
from anyaccel.op_builder.core.hooks import ABI_TARGET_FIELD, PACKAGE_DIR, torch_version
from anyaccel.op_builder.core.loaded_ops import LOADED_OPS, NativeLibrary
from anyaccel.op_builder.core.loading import prebuilt_root
from anyaccel.op_builder.core.lock import BuildLock
from anyaccel.op_builder.core.lock import default_timeout_s as lock_timeout_s
from anyaccel.op_builder.core.module import OpModule
from anyaccel.op_builder.core.progress import BuildProgress
from anyaccel.op_builder.errors import (
    DIAGNOSES,
    ArtifactError,
    BuildError,
    CacheUnusableError,
    OpBuilderError,
    ToolchainError,
    diagnose,
    first_error_lines,
)
from anyaccel.op_builder.toolchains import ninja as nj
from anyaccel.op_builder.toolchains import schema, torch_abi
from anyaccel.op_builder.toolchains.host import (
    build_jobs,
    file_identity,
    find_cxx,
    probe_version,
    require_cxx,
    require_ninja,
)
from anyaccel.op_builder.toolchains.records import TOOLCHAINS
from anyaccel.spec import NativeBuild, OpSpec
from anyaccel.version import __version__

__all__ = ["OpBuilder"]

logger = logging.getLogger(__name__)

LIBRARY_NAME = integrity.LIBRARY_NAME


class OpBuilder:
    """Base of every op builder (DeepSpeed's ``OpBuilder`` vocabulary): the build as data, its key, and the
    load path, in the order [`load`][anyaccel.op_builder.core.builder.OpBuilder.load] runs them.

    Builders of anyaccel's own ops are made from op specs
    ([`anyaccel.op_builder.classes.builder_class`][anyaccel.op_builder.classes.builder_class]),
    which set `SPEC` and `BUILD`; a hand-written builder sets ``NAME``/``BUILD_VAR`` and overrides
    [`sources`][anyaccel.op_builder.core.builder.OpBuilder.sources] and
    [`functions`][anyaccel.op_builder.core.builder.OpBuilder.functions] instead.

    Class attributes:
        NAME: the op build's name, e.g. "cpu_adam"; the cache directory and namespace prefix.
        BUILD_VAR: the variable that selects the op for AOT builds, e.g. "ANYACCEL_BUILD_CPU_ADAM".
        BACKEND: the backend family, part of the key ("cpu", "cuda", ...).
        DEVICE_TYPE: the torch device type the kernels serve (the fakes check it).
        BUILD_HOST_FIELDS: key inputs that describe the build machine rather than the binary's runtime
            contract; they are ignored when matching a prebuilt artifact (a user needs no compiler to use
            one).
        HEADER_SUFFIXES: which files under [`include_paths`][anyaccel.op_builder.core.builder.OpBuilder.include_paths]
            are part of the key.
        SPEC, BUILD: the op spec and its build this builder was made from (None for hand-written ones).
    """

    NAME: ClassVar[str] = ""
    BUILD_VAR: ClassVar[str] = ""
    BACKEND: ClassVar[str] = "generic"
    DEVICE_TYPE: ClassVar[str] = "cpu"
    BUILD_HOST_FIELDS: ClassVar[tuple[str, ...]] = ("compiler", "built_with_torch")
    HEADER_SUFFIXES: ClassVar[tuple[str, ...]] = (".h", ".hpp", ".hh", ".inl")
    SPEC: ClassVar[OpSpec | None] = None
    BUILD: ClassVar[NativeBuild | None] = None

    def __init__(self) -> None:
        """Check the builder's ``NAME``.

        Raises:
            ValueError: ``NAME`` is empty or not an identifier.
        """
        if not self.NAME or not self.NAME.isidentifier():
            raise ValueError(f"{type(self).__name__}.NAME={self.NAME!r} must be a non-empty identifier")

    # ----- load: the entry point; the sections below follow it: key, cache, lock, build, verify, register ------
    def load(self, verbose: bool = False) -> OpModule:
        """Load the op, building it if needed (the steps of the module docstring, this class's sections).

        Args:
            verbose: log build progress and the compiler output at INFO.

        Returns:
            The [`OpModule`][anyaccel.op_builder.core.module.OpModule].

        Raises:
            BuildError: the build failed (the same object on every later attempt in this process, until
                [`LOADED_OPS.clear`][anyaccel.op_builder.core.loaded_ops.LoadedOps.clear]), or the
                library was refused by the dynamic loader (``load_error``; the entry is quarantined).
            ArtifactError: the loaded library did not register the expected namespace and functions
                (``wrong_library``; a cache entry is quarantined, so the next load rebuilds it).
            CacheSecurityError: a path of the cache is not private to the current user.
            CacheUnusableError: the cache is a file, read-only (and the op had to be built) or on a full disk.
            LockTimeoutError: another process held the build lock longer than the timeout.
            SettingError: a bad ``ANYACCEL_BUILD_TIMEOUT``, ``ANYACCEL_BUILD_LOCK_TIMEOUT`` or ``MAX_JOBS``
                (checked before a build starts).
            ISAError: a bad ``ANYACCEL_CPU_ISA``.

        Side effects: may compile (seconds of CPU; progress on stderr), writes to the cache, moves damaged
        entries into its quarantine, loads a shared library into the process and registers its ops with the
        torch dispatcher.
        """
        return self._load(use_prebuilt=True, verbose=verbose)

    def jit_load(self, verbose: bool = False) -> OpModule:
        """Like [`load`][anyaccel.op_builder.core.builder.OpBuilder.load] but ignores prebuilt artifacts (cache,
        else build)."""
        return self._load(use_prebuilt=False, verbose=verbose)

    def _load(self, use_prebuilt: bool, verbose: bool) -> OpModule:
        inputs = self.key_inputs()
        key = mf.compute_key(inputs)

        def find() -> OpModule:
            module = self._find_prebuilt(inputs, warn=True) if use_prebuilt else None
            return module if module is not None else self._load_from_cache(Cache.open(), key, inputs, verbose)

        with key_lock(key):
            module: OpModule = LOADED_OPS.load(key, find)  # the one table: a second load is a dict read
            return module

    # ----- key: the build as data (DeepSpeed's vocabulary), the hooks a backend overrides, and the cache key ---
    @property
    def name(self) -> str:
        """DeepSpeed's builder attribute ``name``: the op build's ``NAME``."""
        return self.NAME

    def absolute_name(self) -> str:
        """The dotted name DeepSpeed uses for AOT extensions, ``anyaccel.ops.<NAME>_op``."""
        return f"anyaccel.ops.{self.NAME}_op"

    def source_root(self) -> Path:
        """The directory [`sources`][anyaccel.op_builder.core.builder.OpBuilder.sources] are relative to: anyaccel's
        package directory, or, for a spec
        contributed by another package (``anyaccel.ops`` entry point), that package's top directory."""
        top = self.SPEC.source.partition(".")[0] if self.SPEC is not None and self.SPEC.source else "anyaccel"
        if top == "anyaccel":
            return PACKAGE_DIR
        import importlib.util

        found = importlib.util.find_spec(top)
        if found is None or not found.submodule_search_locations:
            raise OpBuilderError(f"op {self.NAME}: the package {top!r} of its spec cannot be found")
        return Path(next(iter(found.submodule_search_locations)))

    def sources(self) -> list[str]:
        """Source files relative to [`source_root`][anyaccel.op_builder.core.builder.OpBuilder.source_root] (the spec
        build's ``sources``)."""
        if self.BUILD is None:
            raise NotImplementedError(f"{type(self).__name__} must define sources()")
        return list(self.BUILD.sources)

    def include_paths(self) -> list[str]:
        """Include directories (relative to [`source_root`][anyaccel.op_builder.core.builder.OpBuilder.source_root], or
        absolute); every header in them is part
        of the key. anyaccel's shared headers (``csrc/includes``: stable-ABI tensors, checks, SIMD, multi-tensor
        apply) are always one."""
        shared = PACKAGE_DIR / "csrc" / "includes"
        return ["csrc/includes"] if self.source_root() == PACKAGE_DIR else [str(shared)]

    def cxx_args(self) -> list[str]:
        """Extra C++ compiler flags (the spec build's ``cxx_args``; backends add theirs)."""
        return list(self.BUILD.cxx_args) if self.BUILD else []

    def source_cxx_args(self, source: str) -> list[str]:
        """Host-compiler flags for the one source ``source`` (a
        [`sources`][anyaccel.op_builder.core.builder.OpBuilder.sources] entry), after every other flag:
        the spec build's ``source_cxx_args`` for it, else none."""
        if self.BUILD is None:
            return []
        return [flag for src, flags in self.BUILD.source_cxx_args if src == source for flag in flags]

    def nvcc_args(self) -> list[str]:
        """Extra device-compiler flags (GPU builders)."""
        return list(self.BUILD.nvcc_args) if self.BUILD else []

    def extra_ldflags(self) -> list[str]:
        """Extra linker flags."""
        return []

    def isa(self) -> str | None:
        """The CPU ISA level compiled in, or None for builders without one."""
        return None

    def extra_key_inputs(self) -> dict[str, Any]:
        """Backend-specific key inputs (e.g. the nvcc identity and GPU arch list). Must not spawn processes."""
        return {}

    def functions(self) -> list[str]:
        """The torch op names the library registers in its namespace (the spec build's functions; empty for a
        hand-written builder that does not override this, whose library is then not checked after loading)."""
        if self.SPEC is None or self.BUILD is None:
            return []
        return [fn.name for fn in self.SPEC.functions_of(self.BUILD)]

    def expected_schemas(self, namespace: str) -> dict[str, str]:
        """The full schema each function must have been registered with in ``namespace`` (spec builds only)."""
        if self.SPEC is None or self.BUILD is None:
            return {}
        return {fn.name: f"{namespace}::{fn.full_schema}" for fn in self.SPEC.functions_of(self.BUILD)}

    def variant_label(self) -> str:
        """What tells this build of the op from its others, for progress and logs (the ISA level; "" if none)."""
        return self.isa() or ""

    def _variant_or_empty(self) -> str:
        """[`variant_label`][anyaccel.op_builder.core.builder.OpBuilder.variant_label], or "" when it cannot be told (a
        bad ``ANYACCEL_CPU_ISA``)."""
        try:
            return self.variant_label()
        except OpBuilderError:
            return ""

    def schema_header(self) -> str:
        """The generated schema header the sources include as ``anyaccel_op.h`` ("" without a spec)."""
        if self.SPEC is None or self.BUILD is None:
            return ""
        return schema.generate(self.SPEC, self.BUILD)

    def generated_headers(self) -> dict[str, str]:
        """Every header generated from the spec, by file name (``anyaccel_op.h``, ``anyaccel_dtypes.h``);
        empty without a spec. Written into the build's private include directory; part of the key."""
        if self.SPEC is None or self.BUILD is None:
            return {}
        return {schema.HEADER_NAME: self.schema_header(),
                schema.DTYPES_HEADER_NAME: schema.generate_dtypes(self.SPEC, self.BUILD)}

    def write_generated_headers(self, gen_dir: Path) -> None:
        """Write [`generated_headers`][anyaccel.op_builder.core.builder.OpBuilder.generated_headers] into
        ``gen_dir``."""
        for name, text in self.generated_headers().items():
            (gen_dir / name).write_text(text)

    def _files_in_key(self) -> list[Path]:
        """The sources, every header under [`include_paths`][anyaccel.op_builder.core.builder.OpBuilder.include_paths],
        and the headers beside the sources (a
        ``"cpu_adam.h"`` included by ``cpu_adam.cpp`` changes the binary as much as the source does)."""
        root = self.source_root()
        files = [root / s for s in self.sources()]
        for inc in self.include_paths():
            files.extend(p for p in (root / inc).rglob("*") if p.suffix in self.HEADER_SUFFIXES and p.is_file())
        for src_dir in sorted({f.parent for f in files[:len(self.sources())]}):
            files.extend(p for p in src_dir.iterdir() if p.suffix in self.HEADER_SUFFIXES and p.is_file())
        return files

    def key_inputs(self) -> dict[str, Any]:
        """Every input that changes the binary (see `anyaccel.op_builder.core.manifest`). Spawns no process.

        The torch version is not an input: the sources use only the stable ABI, so the stable-ABI target
        (``abi_target``) stands for torch; ``built_with_torch`` is recorded for the report but ignored when
        matching (a build-host field).

        Raises:
            OSError: a source file is missing.
            ISAError: ``ANYACCEL_CPU_ISA`` is invalid or unsupported (CPU builders).
            TorchABIError: ``ANYACCEL_TORCH_TARGET`` is invalid.
        """
        try:
            cxx = find_cxx()
        except ToolchainError:
            cxx = None
        headers = self.generated_headers()
        return {
            "op": self.NAME,
            "backend": self.BACKEND,
            "package_version": __version__,
            "files": mf.hash_files(self._files_in_key(), self.source_root()),
            "schema_header": mf.hash_text("".join(headers[k] for k in sorted(headers))) if headers else None,
            "include_paths": list(self.include_paths()),
            "cxx_args": self.cxx_args(),
            "source_cxx_args": {src: self.source_cxx_args(src) for src in self.sources() if self.source_cxx_args(src)},
            "nvcc_args": self.nvcc_args(),
            "ldflags": self.extra_ldflags(),
            ABI_TARGET_FIELD: torch_abi.format_version(torch_abi.target()),
            "built_with_torch": torch_version(),
            "platform": f"{sys.platform}-{platform.machine()}",
            "compiler": file_identity(cxx) if cxx else None,
            "isa": self.isa(),
            **self.extra_key_inputs(),
        }

    def namespace(self, key: str) -> str:
        """The torch op namespace of a build: ``anyaccel_<NAME>_<key[:10]>``."""
        return f"anyaccel_{self.NAME}_{key[:10]}"

    # ----- cache: prebuilt artifacts, the content-addressed cache and its quarantine -------------------------
    def _matches(self, recorded: dict[str, Any], inputs: dict[str, Any], ignore: tuple[str, ...]) -> list[str]:
        """The fields that keep a recorded build from serving ``inputs`` (empty: it serves them)."""
        bad = mf.mismatches(recorded, inputs, ignore=(*ignore, ABI_TARGET_FIELD))
        if not torch_abi.loadable(str(recorded.get(ABI_TARGET_FIELD))):
            bad.append(ABI_TARGET_FIELD)
        return bad

    def _find_prebuilt(self, inputs: dict[str, Any], warn: bool) -> OpModule | None:
        """A prebuilt artifact serving ``inputs``: loaded when ``warn`` (the load path), else only found.

        Entries that fail their integrity checks (`inspect_entry`),
        or whose directories are not under the control of the user or root, are skipped with one warning;
        they cannot be quarantined (the installation is not ours to change).

        Raises:
            BuildError, ArtifactError: the matching artifact could not be loaded (``warn`` only).
        """
        op_dir = prebuilt_root() / self.NAME
        try:
            for directory, what in ((prebuilt_root(), "prebuilt op directory"), (op_dir, "prebuilt op directory")):
                if not stat.S_ISDIR(check_secure(directory, allow_symlink=True, what=what).st_mode):
                    return None
        except FileNotFoundError:
            return None
        except OSError as exc:  # CacheSecurityError included
            self._warn_prebuilt(warn, f"not used: {exc}")
            return None
        reasons = []
        for entry in cache_mod.real_dirs(op_dir):
            check = integrity.inspect_entry(entry)
            if not check.ok or check.manifest is None:
                reasons.append(f"{entry.name[:10]}: damaged ({check.problem})")
                continue
            man = check.manifest
            bad = self._matches(man["inputs"], inputs, self.BUILD_HOST_FIELDS)
            if not bad:
                namespace = self.namespace(man["key"])
                if man.get("namespace") != namespace:
                    reasons.append(f"{entry.name[:10]}: damaged (manifest names namespace {man.get('namespace')!r})")
                    continue
                if not warn:
                    return OpModule(self.NAME, namespace, check.library, man.get("isa"), man["key"], "prebuilt")
                return self._open_library(check.library, namespace, man.get("isa"), man["key"], "prebuilt", man)
            reasons.append(f"{entry.name[:10]}: " + ", ".join(
                "sources differ" if f == "files" else
                f"stable-ABI target {man['inputs'].get(f)} is newer than torch {torch_version()}"
                if f == ABI_TARGET_FIELD else f"{f} {man['inputs'].get(f)!r} != {inputs.get(f)!r}" for f in bad))
        if reasons:
            self._warn_prebuilt(warn, "does not match this environment (" + "; ".join(reasons) + ")")
        return None

    def _warn_prebuilt(self, warn: bool, why: str) -> None:
        if warn and self.NAME not in loading._WARNED_PREBUILT:
            loading._WARNED_PREBUILT.add(self.NAME)
            logger.warning("prebuilt op %s %s; building it just in time", self.NAME, why)

    def _check_entry(self, entry: Path, key: str, inputs: dict[str, Any]) -> integrity.EntryCheck:
        """`inspect_entry` with the namespace this builder derives from
        ``key``, which must be ``compute_key(inputs)``.

        The recorded inputs need no comparison with ``inputs``: the check verifies that they hash to ``key``, so
        they are the same document but for the unkeyed build-host fields (``built_with_torch``; see
        `NOT_IN_KEY`), which never decide trust.
        """
        return integrity.inspect_entry(entry, key, self.namespace(key))

    def _quarantine(self, cache: Cache, entry: Path, key: str, reason: str, problem: str) -> None:
        """Move a damaged, foreign or mismatched entry aside (the caller holds its build lock); log it once."""
        dest = cache.quarantine(entry, reason)
        if (self.NAME, key, reason) not in loading._LOGGED_QUARANTINE:
            loading._LOGGED_QUARANTINE.add((self.NAME, key, reason))
            logger.warning("op %s: %s; moved it to %s, it will not be loaded (a new build replaces it)",
                           self.NAME, problem, dest)

    # ----- lock: the cache entry checked again under the build lock, built when missing, then opened ---------
    def _load_from_cache(self, cache: Cache, key: str, inputs: dict[str, Any], verbose: bool) -> OpModule:
        cache.check_op_dir(self.NAME)
        entry = cache.entry(self.NAME, key)
        lock_path = cache.lock_path(self.NAME, key)
        check = self._check_entry(entry, key, inputs)
        source = "cache"
        if not check.ok:
            nj.build_timeout_s()  # a bad ANYACCEL_BUILD_TIMEOUT or ANYACCEL_BUILD_LOCK_TIMEOUT fails before any wait
            lock_timeout_s()
            with interrupt.terminate_as_interrupt(), BuildLock(lock_path, what=f"op {self.NAME} ({key[:10]})"):
                check = self._check_entry(entry, key, inputs)  # another process may have built it meanwhile
                if not check.ok:
                    if check.present:
                        self._quarantine(cache, entry, key, check.reason, check.problem)
                    cache.check_op_dir(self.NAME, create=True)
                    self._build_and_publish(cache.tmp, cache.logs, entry, key, inputs, verbose)
                    source = "built"
                    check = self._check_entry(entry, key, inputs)
                    if not check.ok:
                        raise ArtifactError("damaged_artifact", self.NAME, entry / LIBRARY_NAME,
                                            f"op {self.NAME}: the entry just built fails its check: {check.problem}")
        assert check.manifest is not None
        digest = check.manifest.get("library_sha256")
        try:
            return self._open_library(check.library, self.namespace(key), check.manifest.get("isa"), key, source,
                                      check.manifest)
        except (BuildError, ArtifactError) as exc:
            reason = "wrong-library" if isinstance(exc, ArtifactError) else "load-error"
            try:
                with BuildLock(lock_path, what=f"op {self.NAME} ({key[:10]})"):
                    again = integrity.inspect_entry(entry, key)
                    if again.manifest is not None and again.manifest.get("library_sha256") == digest:
                        self._quarantine(cache, entry, key, reason, f"the library of {entry} could not be used "
                                                                    f"({str(exc).splitlines()[0]})")
            except OpBuilderError as qexc:  # the load's error is the one to report
                logger.warning("op %s: could not quarantine %s: %s", self.NAME, entry, qexc)
            raise

    # ----- build: the toolchain hooks backends override, the ninja build, the atomic publication -------------
    def preflight(self) -> dict[str, str | None]:
        """Check the tools a build needs and return the environment the compile runs with.

        Returns:
            Variables to set (or remove, None) only for the duration of the compile: ``CXX`` (the resolved
            compiler), ``MAX_JOBS`` (`build_jobs`) and ``PATH``
            with ninja's directory first.

        Raises:
            ToolchainError: ``compiler_missing`` or ``ninja_missing``.
        """
        cxx = require_cxx()
        ninja = require_ninja()
        path = os.environ.get("PATH", os.defpath)
        return {"CXX": str(cxx), "MAX_JOBS": str(build_jobs()), "PATH": f"{ninja.parent}{os.pathsep}{path}"}

    def common_flags(self, namespace: str, gen_dir: Path) -> list[str]:
        """Preprocessor flags every translation unit gets: the stable-ABI target, the namespace macro and
        the include directories (the generated header's, the op's, torch's)."""
        root = self.source_root()
        return [torch_abi.target_macro(torch_abi.target()), f"-DANYACCEL_OP_NAMESPACE={namespace}",
                f"-I{gen_dir}", *(f"-I{root / p}" for p in self.include_paths()),
                "-isystem", str(torch_abi.include_dir())]

    def host_compile_command(self, env: dict[str, str | None], namespace: str, gen_dir: Path) -> list[str]:
        """The host C++ compiler command for ``.cpp`` sources (without ``-c``/``-o``)."""
        return [str(env["CXX"]), *self.host_only_flags(), *self.cxx_args(), *self.common_flags(namespace, gen_dir)]

    def host_only_flags(self) -> list[str]:
        """Host-compiler flags every translation unit gets (nvcc passes them with ``-Xcompiler``).

        ``-fvisibility=hidden`` keeps the header-only torch code compiled into the op (``c10::BFloat16``
        conversions, the stable wrappers) private to the library, so it can never interpose on torch's own;
        ``-fmacro-prefix-map`` makes ``__FILE__`` in check messages name sources relative to the package
        ("anyaccel/csrc/..."), whatever the install path.
        """
        return ["-fPIC", "-std=c++17", "-fvisibility=hidden", "-fvisibility-inlines-hidden",
                f"-fmacro-prefix-map={self.source_root().parent}/="]

    def compile_steps(self, env: dict[str, str | None], namespace: str, gen_dir: Path,
                      build_dir: Path) -> list[nj.CompileStep]:
        """One `CompileStep` per source (the host compiler record's suffixes, ``.cpp``, here; the CUDA
        backend adds ``.cu``)."""
        root = self.source_root()
        host = tuple(self.host_compile_command(env, namespace, gen_dir))
        suffixes = TOOLCHAINS["host"].source_suffixes
        steps = []
        for i, src in enumerate(self.sources()):
            path = root / src
            if path.suffix not in suffixes:
                raise OpBuilderError(f"op {self.NAME}: source {src} has suffix {path.suffix!r}; the "
                                     f"{self.BACKEND} backend compiles {', '.join(suffixes)} files")
            steps.append(nj.CompileStep(path, build_dir / f"{i}_{path.stem}.o",
                                        host + tuple(self.source_cxx_args(src))))
        return steps

    def link_command(self, env: dict[str, str | None]) -> list[str]:
        """The link command (objects and ``-o`` are added by the driver): the host compiler, ``-shared``, and
        only ``libtorch_cpu`` (the stable C shim) from torch."""
        return [str(env["CXX"]), "-shared", *compiling._fast_linker(str(env["CXX"])), *self.extra_ldflags(),
                f"-L{torch_abi.library_dir()}", "-ltorch_cpu"]

    def compile(self, build_dir: Path, namespace: str, env: dict[str, str | None], verbose: bool) -> Path:
        """Write the schema header and the ninja file into ``build_dir`` and build the library there.

        Returns:
            The built shared library (not loaded).

        Raises:
            BuildError: the compiler or linker failed (diagnosed from its output and exit status: a compiler
                error, a crash, a full disk, ...), or the build timed out (``timeout``, naming the command that
                was still running; every process of the build was killed).

        Side effects: feeds ninja's status lines to the build's progress display.
        """
        gen_dir = build_dir / "gen"
        gen_dir.mkdir()
        self.write_generated_headers(gen_dir)
        output = build_dir / LIBRARY_NAME
        steps = self.compile_steps(env, namespace, gen_dir, build_dir)
        link = self.link_command(env)
        nj.write_build_file(build_dir, steps, link, output)
        ninja = require_ninja()
        run_env = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
        progress = compiling._PROGRESS.get()
        try:
            result = nj.run_ninja(ninja, build_dir, int(env.get("MAX_JOBS") or 1), run_env, nj.build_timeout_s(),
                                  on_line=progress.on_line if progress else None,
                                  on_tick=progress.on_tick if progress else None,
                                  commands=nj.step_commands(steps, link, output))
        except nj.BuildTimeoutError as exc:
            raise BuildError(self.NAME, DIAGNOSES["timeout"], command=exc.command, detail=str(exc)) from None
        if verbose:
            logger.info("%s", result.output)
        (build_dir / "ninja.log.txt").write_text(result.output)
        if result.returncode != 0 or not output.is_file():
            raise BuildError(self.NAME, diagnose(result.output, result.returncode),
                             command=compiling._ninja_command(result.output), returncode=result.returncode,
                             error_lines=first_error_lines(result.output), detail="")
        return output

    def _build_and_publish(self, tmp_parent: Path, logs_dir: Path, entry: Path, key: str, inputs: dict[str, Any],
                           verbose: bool, public: bool = False) -> None:
        """Build in a private directory under ``tmp_parent`` and rename the result to ``entry``.

        Args:
            public: give the entry the modes of an installation (0755 directories, 0644 files) instead of the
                private cache's (0700, 0600); AOT builds.

        Raises:
            BuildError: the build failed; also when the file system failed it (``disk_full``,
                ``cache_read_only``, ...): the log is kept (when it could be written) and nothing is published.

        Side effects: progress on stderr; a failure log in ``logs_dir``.
        """
        dir_mode = cache_mod.PUBLIC_DIR_MODE if public else cache_mod.DIR_MODE
        file_mode = cache_mod.PUBLIC_FILE_MODE if public else cache_mod.FILE_MODE
        lib_mode = cache_mod.PUBLIC_LIBRARY_MODE if public else cache_mod.LIBRARY_MODE
        namespace = self.namespace(key)
        try:
            cache_mod.make_dirs(tmp_parent)
            cache_mod.make_dirs(logs_dir)
            work = Path(tempfile.mkdtemp(prefix=f"{self.NAME}-{key[:10]}-", dir=tmp_parent))
        except OpBuilderError as exc:  # before OSError: CacheUnusableError is one
            raise self._os_failure(exc) from None
        except OSError as exc:
            raise self._os_failure(cache_os_error(exc, tmp_parent, "create a build directory in")) from None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        fail_log = logs_dir / f"{self.NAME}-{key[:10]}-{stamp}-{os.getpid()}.log"
        header = f"op {self.NAME}\nkey {key}\nnamespace {namespace}\ninputs {inputs}\n"
        progress = BuildProgress(self.NAME, self._variant_or_empty())
        try:
            try:
                env = self.preflight()
            except ToolchainError as exc:
                logged = compiling._write_log(fail_log, header + f"\n{exc}\n")
                raise BuildError(self.NAME, DIAGNOSES[exc.code], detail=str(exc), log_path=logged) from None
            # DEBUG: the progress display's line is the one line a build shows (a terminal also gets a live one)
            logger.debug("building op %s (%s) with %s jobs", self.NAME, key[:10], env.get("MAX_JOBS", "?"))
            t0 = time.monotonic()
            (work / "build").mkdir(mode=0o700)
            progress.start()
            token = compiling._PROGRESS.set(progress)
            try:
                with scoped_environ(env):
                    lib = self.compile(work / "build", namespace, env, verbose)
            except BuildError as exc:
                text = str(exc)
                ninja_log = work / "build" / "ninja.log.txt"
                if ninja_log.exists():
                    text += "\n\n" + ninja_log.read_text(errors="replace")
                logged = compiling._write_log(fail_log, header + "\n" + text + "\n")
                raise BuildError(self.NAME, exc.diagnosis, command=exc.command, returncode=exc.returncode,
                                 error_lines=exc.error_lines, log_path=logged, detail=exc.detail) from None
            except (RuntimeError, OSError) as exc:  # backends built on torch.utils.cpp_extension (SYCL)
                text = str(exc)
                rc = getattr(exc.__cause__, "returncode", None)
                logged = compiling._write_log(fail_log, header + "\n" + text + "\n")
                raise BuildError(self.NAME, diagnose(text, rc), command=compiling._ninja_command(text), returncode=rc,
                                 error_lines=first_error_lines(text), log_path=logged) from None
            finally:
                compiling._PROGRESS.reset(token)
            seconds = time.monotonic() - t0
            try:
                self._publish(work, lib, entry, key, inputs, namespace, env, header, seconds, dir_mode, file_mode,
                              lib_mode)
            except OpBuilderError as exc:  # before OSError: CacheUnusableError is one
                raise self._os_failure(exc, compiling._write_log(fail_log, header + f"\n{exc}\n")) from None
            except OSError as exc:
                error = cache_os_error(exc, entry, "publish the build at")
                logged = compiling._write_log(fail_log, header + f"\n{error}\n")
                raise self._os_failure(error, logged) from None
            logger.debug("%s -> %s", progress.finish(True), entry)
        except BuildError as exc:
            progress.finish(False, exc.code)
            raise
        except KeyboardInterrupt:  # SIGINT, or SIGTERM (core.interrupt): the caller prints the one line
            progress.clear()
            raise
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _publish(self, work: Path, lib: Path, entry: Path, key: str, inputs: dict[str, Any], namespace: str,
                 env: dict[str, str | None], header: str, seconds: float, dir_mode: int, file_mode: int,
                 lib_mode: int) -> None:
        """Assemble ``work/out`` (library, build log, manifest with the library's digest, each with an explicit
        mode) and rename it to ``entry`` in one step; a previous entry there is moved aside first.

        Raises:
            OSError: the file system failed (full disk, read-only).
        """
        out = work / "out"
        os.mkdir(out, dir_mode)
        os.chmod(out, dir_mode)
        os.replace(lib, out / LIBRARY_NAME)
        os.chmod(out / LIBRARY_NAME, lib_mode)
        ninja_file = work / "build" / "build.ninja"
        compiler = env.get("CXX")
        probe = probe_version(compiler) if compiler else None
        version = probe.first_line if probe is not None and probe.ok and probe.first_line else None
        probe_text = "n/a" if probe is None else version if version else f"unknown: {probe.describe()}"
        cache_mod.write_file(out / "build.log", header + f"compiler {compiler}: {probe_text}\n"
                             f"seconds {seconds:.2f}\n\n" + (ninja_file.read_text() if ninja_file.exists() else ""),
                             file_mode)
        mf.write_manifest(out, {"key": key, "namespace": namespace, "isa": self.isa(), "inputs": inputs,
                                **integrity.library_record(out / LIBRARY_NAME), "created": time.time(),
                                "build_seconds": seconds, "compiler_version": version}, mode=file_mode)
        if os.path.lexists(entry):  # a stale entry of an AOT build: move it aside in one rename, then delete it
            os.rename(entry, work / "old")
        cache_mod.make_dir(entry.parent, dir_mode)  # `cache clean --all` may have removed an emptied op folder
        os.rename(out, entry)

    def _os_failure(self, error: OpBuilderError, log_path: Path | None = None) -> BuildError:
        """A [`BuildError`][anyaccel.op_builder.errors.BuildError] for a build the file system failed (full disk,
        read-only cache, ...)."""
        code = getattr(error, "code", "cache_unusable")
        return BuildError(self.NAME, DIAGNOSES.get(code, DIAGNOSES["cache_unusable"]), detail=str(error),
                          log_path=log_path)

    # ----- verify: load a checked library and check what it registered ---------------------------------------
    def _open_library(self, path: Path, namespace: str, isa: str | None, key: str, source: str,
                      manifest: dict[str, Any]) -> OpModule:
        """Load a library that passed `inspect_entry` (`_register_library`, once per process and namespace:
        after a reset of the loaded-op table the new module attaches to the library already loaded, as loading
        it a second time would crash) and return its module.

        Raises:
            BuildError, ArtifactError: as `_register_library`.
        """
        library = LOADED_OPS.register_once(namespace, lambda: self._register_library(path, namespace, source,
                                                                                    manifest))
        # the integrations are asked on the module's first use of a name its torch ops do not answer
        native = () if self.SPEC is None else tuple(fn.name for fn in self.SPEC.functions)
        module = OpModule(self.NAME, namespace, library.path, isa, key, source,
                          {"functions": lambda: self._module_extras().get("functions"), "native": native})
        logger.debug("loaded %r from %s", module, source)
        return module

    def _register_library(self, path: Path, namespace: str, source: str,
                          manifest: dict[str, Any]) -> NativeLibrary:
        """Load a library that passed `inspect_entry` and check
        what it registered.

        What the loader gets is a private, sealed copy of the bytes read once and hashed
        (`verified_copy`), never the cache path itself: a library
        rewritten in place after its check cannot be what runs.

        Args:
            manifest: the entry's checked manifest (its ``library_sha256`` and ``library_size``).

        Returns:
            The library's record for `LOADED_OPS.register_once`.

        Raises:
            BuildError: ``load_error``: the library changed since it was hashed, could not be read, or the
                loader refused it.
            ArtifactError: ``wrong_library``: the namespace or a function is missing or has another schema.
        """
        import ctypes

        import torch

        try:
            with integrity.verified_copy(path, str(manifest["library_sha256"]), int(manifest["library_size"]),
                                         f"anyaccel-{namespace}") as load_path:
                try:
                    # what torch.ops.load_library does, less its realpath(): that would turn /proc/self/fd/N
                    # into the memfd's unopenable name
                    ctypes.CDLL(load_path)
                except OSError as exc:
                    raise BuildError(self.NAME, DIAGNOSES["load_error"],
                                     detail=f"loading {path}: {exc}") from exc
                torch.ops.loaded_libraries.add(str(path))
        except integrity.LibraryChangedError as exc:
            raise BuildError(self.NAME, DIAGNOSES["load_error"], detail=str(exc)) from None
        except OSError as exc:
            raise BuildError(self.NAME, DIAGNOSES["load_error"],
                             detail=f"{path} cannot be read for loading: {exc.strerror or exc}") from None
        problem = self.verify_functions(namespace)
        if problem:
            raise ArtifactError("wrong_library", self.NAME, path,
                                f"op {self.NAME}: the library {path} ({source}) is not the one its builder expects: "
                                f"{problem} (a library of another op, ISA or build). "
                                f"fix: {DIAGNOSES['wrong_library'].fix}")
        try:
            self.register_fakes(namespace)
        except (RuntimeError, ValueError, AttributeError) as exc:
            raise ArtifactError("wrong_library", self.NAME, path,
                                f"op {self.NAME}: registering the fake implementations of {namespace} failed: {exc}. "
                                f"fix: {DIAGNOSES['wrong_library'].fix}") from exc
        return NativeLibrary(self.NAME, path)

    def verify_functions(self, namespace: str) -> str:
        """Check that a loaded library registered ``namespace`` with every function of
        [`functions`][anyaccel.op_builder.core.builder.OpBuilder.functions], each
        with the spec's schema (`verify_functions`).

        Returns:
            "" when it did; else what is missing or different, in words.
        """
        return registration.verify_functions(namespace, self.functions(), self.expected_schemas(namespace))

    def _module_extras(self) -> dict[str, Any]:
        """What the loaded module offers besides its torch ops: ``{"functions": (adapter, names)}``, the
        integrations' functions for the builder names this build answers to (its ``builder`` and aliases;
        `anyaccel.op_builder.core.module_functions`), or ``{}``. Makes no adapter object."""
        if self.SPEC is None or self.BUILD is None:
            return {}
        from anyaccel.op_builder.core import module_functions

        answer = module_functions.for_build(self.SPEC.family, self.BUILD.builder_names)
        return {"functions": answer} if answer else {}

    # ----- register: the fakes and fallback kernels registered beside the library ----------------------------
    def register_fakes(self, namespace: str) -> None:
        """Register the spec's validating fake of every function in ``namespace`` (for ``torch.compile``,
        ``opcheck`` and meta tensors) and the fallback kernel explaining calls no native kernel takes
        (`registration`); a hand-written builder overrides this.

        Side effects: registers with the torch dispatcher.
        """
        if self.SPEC is None or self.BUILD is None:
            return
        functions = self.SPEC.functions_of(self.BUILD)
        registration.register_fakes(namespace, functions, self.DEVICE_TYPE)
        registration.register_fallbacks(namespace, functions, self.DEVICE_TYPE)

    # ----- queries and ahead-of-time builds (DeepSpeed's vocabulary) -----------------------------------------
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

    def buildability(self) -> tuple[bool, str]:
        """Whether this op can be *built* here (for this machine or another), and why not. Spawns no process.

        Unlike [`compatibility`][anyaccel.op_builder.core.builder.OpBuilder.compatibility] it asks for no device:
        AOT builds (wheels) run on machines without one.
        """
        try:
            self.key_inputs()
            if find_cxx() is None:
                return False, "no C++ compiler found (set CXX or install g++)"
        except OpBuilderError as exc:
            return False, str(exc)
        return True, ""

    def is_compatible(self, verbose: bool = False) -> bool:
        """DeepSpeed's check: True when [`compatibility`][anyaccel.op_builder.core.builder.OpBuilder.compatibility]
        finds no problem; logs the reason if ``verbose``."""
        ok, reason = self.compatibility()
        if not ok and verbose:
            logger.warning("op %s is not compatible: %s", self.NAME, reason)
        return ok

    def is_built(self) -> bool:
        """Whether a loadable artifact exists (loaded, prebuilt or in the cache) for the current inputs."""
        try:
            inputs = self.key_inputs()
            key = mf.compute_key(inputs)
            if key in LOADED_OPS or self._find_prebuilt(inputs, warn=False) is not None:
                return True
            return self._check_entry(Cache.open().entry(self.NAME, key), key, inputs).ok
        except (OpBuilderError, OSError):
            return False

    def build_prebuilt(self, dest_root: Path, verbose: bool = False) -> Path:
        """Build the op ahead of time into ``dest_root/<NAME>/<key>`` (setup.py and ``anyaccel build``).

        Builds without loading, so an op can be built for another machine (a CUDA op on a CPU-only host).

        Returns:
            The entry directory (library, manifest, build log).

        Raises:
            BuildError: as `load`.
        """
        dest_root = Path(dest_root).resolve()  # ninja runs in the build directory: relative paths would break
        inputs = self.key_inputs()
        key = mf.compute_key(inputs)
        entry = dest_root / self.NAME / key
        if not integrity.inspect_entry(entry, key, self.namespace(key)).ok:
            with key_lock(key):
                try:
                    cache_mod.make_dirs(entry.parent, cache_mod.PUBLIC_DIR_MODE)
                except CacheUnusableError as exc:
                    raise self._os_failure(exc) from None
                self._build_and_publish(dest_root / ".tmp", dest_root / ".logs", entry, key, inputs, verbose,
                                        public=True)
        return entry

    def builder(self) -> Any:
        """A setuptools extension for this op (DeepSpeed's ``builder()``), for custom AOT pipelines.

        Note: anyaccel's own AOT path (``ANYACCEL_BUILD_OPS=1``,
            [`build_prebuilt`][anyaccel.op_builder.core.builder.OpBuilder.build_prebuilt]) does not use it; the
        extension compiles the same sources with the same flags through setuptools, except the per-source
        flags ([`source_cxx_args`][anyaccel.op_builder.core.builder.OpBuilder.source_cxx_args]), which setuptools cannot
        give one source: every source gets ``-O3``.

        Side effects: imports ``torch.utils.cpp_extension``; writes the schema header into a temporary dir.
        """
        from torch.utils.cpp_extension import CppExtension

        root = self.source_root()
        key = mf.compute_key(self.key_inputs())
        gen_dir = Path(tempfile.mkdtemp(prefix=f"anyaccel-{self.NAME}-gen-"))
        self.write_generated_headers(gen_dir)
        return CppExtension(
            name=self.absolute_name(),
            sources=[str(root / s) for s in self.sources()],
            include_dirs=[str(gen_dir), *(str(root / p) for p in self.include_paths())],
            extra_compile_args={"cxx": self.cxx_args() + self.common_flags(self.namespace(key), gen_dir)},
            extra_link_args=self.extra_ldflags(),
        )
