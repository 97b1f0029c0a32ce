"""``OpBuilder``: DeepSpeed's op-builder vocabulary on a crash-safe, content-addressed load path.

One load path (``shared/design.md`` "Op-builder layer"):

1. in-process table by cache key (a second ``load()`` costs a dict lookup; a failed build raises the same
   :class:`BuildError` again);
2. a prebuilt (AOT) artifact whose manifest matches (sources, flags, ISA, platform; its stable-ABI target
   not newer than the running torch);
3. the content-addressed disk cache, manifest checked;
4. a build under an OS lock, in a private directory, published with one ``os.rename``.

Nothing is loaded before :func:`~anyaccel.op_builder.core.integrity.inspect_entry` passes (ownership and
modes of every path, the manifest, the library's SHA-256), and after the load the library must have
registered the namespace and functions this builder expects (:meth:`OpBuilder.verify_functions`). A cache
entry that fails either check is quarantined (moved aside in one rename, logged once per process) and
rebuilt (issue 12).

Steps 1-3 spawn no process and import nothing heavy: the key uses the compiler's path, size and mtime,
never its ``--version``. A builder is data: the op spec's build (:class:`anyaccel.ops.spec.NativeBuild`:
sources, functions, flags) plus its backend base (``backends/``: ``TorchCPUOpBuilder``, ``CUDAOpBuilder``,
``SYCLOpBuilder``, ``NPUOpBuilder``), which overrides the hooks :meth:`preflight` (tools of the build),
:meth:`compile_steps`/:meth:`link_command` (the commands) and :meth:`extra_key_inputs`.

Sources are compiled against torch's stable ABI (:mod:`anyaccel.op_builder.toolchains.torch_abi`): the key
carries the ABI target, not the torch version, so a torch upgrade reuses every artifact.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from anyaccel.op_builder.core import cache as cache_mod
from anyaccel.op_builder.core import integrity
from anyaccel.op_builder.core import manifest as mf
from anyaccel.op_builder.core.cache import Cache, cache_os_error, check_secure
from anyaccel.op_builder.core.environ import scoped_environ
from anyaccel.op_builder.core.errors import (
    DIAGNOSES,
    ArtifactError,
    BuildError,
    CacheUnusableError,
    OpBuilderError,
    ToolchainError,
    diagnose,
    first_error_lines,
)
from anyaccel.op_builder.core.lock import BuildLock
from anyaccel.op_builder.core.lock import default_timeout_s as lock_timeout_s
from anyaccel.op_builder.core.module import OpModule
from anyaccel.op_builder.core.progress import BuildProgress
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
from anyaccel.ops.spec import NativeBuild, OpSpec
from anyaccel.version import __version__

logger = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parent.parent.parent
PREBUILT_ENV = "ANYACCEL_PREBUILT_DIR"
LIBRARY_NAME = integrity.LIBRARY_NAME
#: Manifest input fields compared by "not newer than" instead of equality.
ABI_TARGET_FIELD = "abi_target"

# Process-wide state, keyed by cache key (the namespace is derived from it, so one key = one library).
_LOADED: dict[str, OpModule] = {}
_FAILED: dict[str, BuildError] = {}
_KEY_LOCKS: dict[str, threading.Lock] = {}
_STATE_LOCK = threading.Lock()
_WARNED_PREBUILT: set[str] = set()
_LOGGED_QUARANTINE: set[tuple[str, str, str]] = set()
# The progress display of the build running in this context (read by compile(), whose signature backends
# override, so it is not a parameter).
_PROGRESS: contextvars.ContextVar[BuildProgress | None] = contextvars.ContextVar("anyaccel_build_progress",
                                                                                  default=None)


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

    Builders of anyaccel's own ops are made from op specs (:func:`anyaccel.op_builder.registry.builder_class`),
    which set :attr:`SPEC` and :attr:`BUILD`; a hand-written builder sets ``NAME``/``BUILD_VAR`` and overrides
    :meth:`sources` and :meth:`functions` instead.

    Class attributes:
        NAME: the op build's name, e.g. "cpu_adam"; the cache directory and namespace prefix.
        BUILD_VAR: the variable that selects the op for AOT builds, e.g. "ANYACCEL_BUILD_CPU_ADAM".
        BACKEND: the backend family, part of the key ("cpu", "cuda", ...).
        DEVICE_TYPE: the torch device type the kernels serve (the fakes check it).
        BUILD_HOST_FIELDS: key inputs that describe the build machine rather than the binary's runtime
            contract; they are ignored when matching a prebuilt artifact (a user needs no compiler to use
            one).
        HEADER_SUFFIXES: which files under :meth:`include_paths` are part of the key.
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
        if not self.NAME or not self.NAME.isidentifier():
            raise ValueError(f"{type(self).__name__}.NAME={self.NAME!r} must be a non-empty identifier")

    # ----- DeepSpeed vocabulary: data -------------------------------------------------------------------
    @property
    def name(self) -> str:
        """DeepSpeed's builder attribute ``name``: the op build's ``NAME``."""
        return self.NAME

    def absolute_name(self) -> str:
        """The dotted name DeepSpeed uses for AOT extensions, ``anyaccel.ops.<NAME>_op``."""
        return f"anyaccel.ops.{self.NAME}_op"

    def source_root(self) -> Path:
        """The directory :meth:`sources` are relative to: anyaccel's package directory, or, for a spec
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
        """Source files relative to :meth:`source_root` (the spec build's ``sources``)."""
        if self.BUILD is None:
            raise NotImplementedError(f"{type(self).__name__} must define sources()")
        return list(self.BUILD.sources)

    def include_paths(self) -> list[str]:
        """Include directories (relative to :meth:`source_root`, or absolute); every header in them is part
        of the key. anyaccel's shared headers (``csrc/includes``: stable-ABI tensors, checks, SIMD, multi-tensor
        apply) are always one."""
        shared = PACKAGE_DIR / "csrc" / "includes"
        return ["csrc/includes"] if self.source_root() == PACKAGE_DIR else [str(shared)]

    def cxx_args(self) -> list[str]:
        """Extra C++ compiler flags (the spec build's ``cxx_args``; backends add theirs)."""
        return list(self.BUILD.cxx_args) if self.BUILD else []

    def source_cxx_args(self, source: str) -> list[str]:
        """Host-compiler flags for the one source ``source`` (a :meth:`sources` entry), after every other flag:
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

    def verify_functions(self, namespace: str) -> str:
        """Check that a loaded library registered ``namespace`` with every function of :meth:`functions`, each
        with the spec's schema.

        Returns:
            "" when it did; else what is missing or different, in words.

        Side effects: resolves the ops through ``torch.ops`` (cached by torch).
        """
        import torch

        from anyaccel._compat import dispatcher

        ns = getattr(torch.ops, namespace)
        missing = [name for name in self.functions() if not hasattr(ns, name)]
        if missing:
            return f"namespace {namespace} has no function {', '.join(missing)}"
        for name, expected in self.expected_schemas(namespace).items():
            registered = dispatcher.registered_schema(getattr(ns, name))
            if registered is not None and \
                    dispatcher.canonical_schema(registered) != dispatcher.canonical_schema(expected):
                return f"{namespace}::{name} was registered as {registered}, not {expected}"
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
        """Write :meth:`generated_headers` into ``gen_dir``."""
        for name, text in self.generated_headers().items():
            (gen_dir / name).write_text(text)

    def register_fakes(self, namespace: str) -> None:
        """Register the spec's validating fake of every function in ``namespace`` (for ``torch.compile``,
        ``opcheck`` and meta tensors); a hand-written builder overrides this.

        Side effects: registers with the torch dispatcher.
        """
        if self.SPEC is None or self.BUILD is None:
            return
        import torch

        for fn in self.SPEC.functions_of(self.BUILD):
            fake = fn.load_fake()
            if fake is not None:
                torch.library.register_fake(f"{namespace}::{fn.name}")(functools.partial(fake, self.DEVICE_TYPE))
        self._register_fallbacks(namespace)

    def _register_fallbacks(self, namespace: str) -> None:
        """Register a CompositeExplicitAutograd kernel that explains a call no native kernel takes.

        The dispatcher picks a kernel from the call's tensors: a call whose tensor lists are all empty has none
        ("no tensor arguments"), and tensors of another device type find no kernel of this build. Both then
        reach this kernel, which raises a ``RuntimeError`` in the ops' own words. Calls the native kernels
        serve never reach it (a backend kernel wins over a composite one).

        Side effects: registers with the torch dispatcher (kept alive on the builder class).
        """
        if self.SPEC is None or self.BUILD is None:
            return
        import torch

        library = torch.library.Library(namespace, "IMPL")
        for fn in self.SPEC.functions_of(self.BUILD):
            if any(a.type.startswith("Tensor") for a in fn.arguments):
                library.impl(fn.name, functools.partial(_no_kernel, fn.name, self.DEVICE_TYPE),
                             "CompositeExplicitAutograd")
        _FALLBACK_LIBRARIES.append(library)

    # ----- compatibility --------------------------------------------------------------------------------
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

        Unlike :meth:`compatibility` it asks for no device: AOT builds (wheels) run on machines without one.
        """
        try:
            self.key_inputs()
            if find_cxx() is None:
                return False, "no C++ compiler found (set CXX or install g++)"
        except OpBuilderError as exc:
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
            return self._check_entry(Cache.open().entry(self.NAME, key), key, inputs).ok
        except (OpBuilderError, OSError):
            return False

    # ----- key --------------------------------------------------------------------------------------------
    def _files_in_key(self) -> list[Path]:
        """The sources, every header under :meth:`include_paths`, and the headers beside the sources (a
        ``"cpu_adam.h"`` included by ``cpu_adam.cpp`` changes the binary as much as the source does)."""
        root = self.source_root()
        files = [root / s for s in self.sources()]
        for inc in self.include_paths():
            files.extend(p for p in (root / inc).rglob("*") if p.suffix in self.HEADER_SUFFIXES and p.is_file())
        for src_dir in sorted({f.parent for f in files[:len(self.sources())]}):
            files.extend(p for p in src_dir.iterdir() if p.suffix in self.HEADER_SUFFIXES and p.is_file())
        return files

    def key_inputs(self) -> dict[str, Any]:
        """Every input that changes the binary (see :mod:`anyaccel.op_builder.core.manifest`). Spawns no process.

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
            "built_with_torch": _torch_version(),
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
            BuildError: the build failed (the same object on every later attempt in this process), or the
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

    def _open_library(self, path: Path, namespace: str, isa: str | None, key: str, source: str,
                      identity: tuple[int, int, int, int] | None = None) -> OpModule:
        """``dlopen`` a library that passed :func:`~anyaccel.op_builder.core.integrity.inspect_entry` and check
        what it registered.

        Args:
            identity: the identity of the file that was hashed; the path must still name it.

        Raises:
            BuildError: ``load_error``: the path changed since it was hashed, or the loader refused it.
            ArtifactError: ``wrong_library``: the namespace or a function is missing or has another schema.
        """
        import torch

        if identity is not None and not integrity.same_file(path, identity):
            raise BuildError(self.NAME, DIAGNOSES["load_error"],
                             detail=f"{path} was replaced between its integrity check and its loading")
        try:
            torch.ops.load_library(str(path))
        except (OSError, RuntimeError) as exc:
            raise BuildError(self.NAME, DIAGNOSES["load_error"],
                             detail=f"loading {path}: {_dlopen_error(path) or exc}") from exc
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
        module = OpModule(self.NAME, namespace, path, isa, key, source, self._module_extras())
        logger.debug("loaded %r from %s", module, source)
        return module

    def _module_extras(self) -> dict[str, Any]:
        """What the loaded module offers besides its torch ops: ``{"deepspeed_abi": (adapter, functions)}``,
        the spec's DeepSpeed ABI functions for the builder names this build answers to (its ``builder`` and
        aliases; :meth:`anyaccel.ops.spec.DeepSpeedABI.functions_for`), or ``{}``. Imports nothing."""
        abi = self.SPEC.deepspeed if self.SPEC is not None else None
        if abi is None or self.BUILD is None:
            return {}
        functions = abi.functions_for(self.BUILD.builder_names)
        return {"deepspeed_abi": (abi.adapter, functions)} if functions else {}

    def _matches(self, recorded: dict[str, Any], inputs: dict[str, Any], ignore: tuple[str, ...]) -> list[str]:
        """The fields that keep a recorded build from serving ``inputs`` (empty: it serves them)."""
        bad = mf.mismatches(recorded, inputs, ignore=(*ignore, ABI_TARGET_FIELD))
        if not torch_abi.loadable(str(recorded.get(ABI_TARGET_FIELD))):
            bad.append(ABI_TARGET_FIELD)
        return bad

    def _find_prebuilt(self, inputs: dict[str, Any], warn: bool) -> OpModule | None:
        """A prebuilt artifact serving ``inputs``: loaded when ``warn`` (the load path), else only found.

        Entries that fail their integrity checks (:func:`~anyaccel.op_builder.core.integrity.inspect_entry`),
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
                return self._open_library(check.library, namespace, man.get("isa"), man["key"], "prebuilt",
                                          check.identity)
            reasons.append(f"{entry.name[:10]}: " + ", ".join(
                "sources differ" if f == "files" else
                f"stable-ABI target {man['inputs'].get(f)} is newer than torch {_torch_version()}"
                if f == ABI_TARGET_FIELD else f"{f} {man['inputs'].get(f)!r} != {inputs.get(f)!r}" for f in bad))
        if reasons:
            self._warn_prebuilt(warn, "does not match this environment (" + "; ".join(reasons) + ")")
        return None

    def _warn_prebuilt(self, warn: bool, why: str) -> None:
        if warn and self.NAME not in _WARNED_PREBUILT:
            _WARNED_PREBUILT.add(self.NAME)
            logger.warning("prebuilt op %s %s; building it just in time", self.NAME, why)

    def _check_entry(self, entry: Path, key: str, inputs: dict[str, Any]) -> integrity.EntryCheck:
        """:func:`~anyaccel.op_builder.core.integrity.inspect_entry` with the namespace this builder derives from
        ``key``, which must be ``compute_key(inputs)``.

        The recorded inputs need no comparison with ``inputs``: the check verifies that they hash to ``key``, so
        they are the same document but for the unkeyed build-host fields (``built_with_torch``; see
        :data:`~anyaccel.op_builder.core.manifest.NOT_IN_KEY`), which never decide trust.
        """
        return integrity.inspect_entry(entry, key, self.namespace(key))

    def _valid_entry(self, entry: Path, key: str, inputs: dict[str, Any]) -> dict[str, Any] | None:
        """The manifest of a published entry if it passes :meth:`_check_entry`, else None."""
        check = self._check_entry(entry, key, inputs)
        return check.manifest if check.ok else None

    def _quarantine(self, cache: Cache, entry: Path, key: str, reason: str, problem: str) -> None:
        """Move a damaged, foreign or mismatched entry aside (the caller holds its build lock); log it once."""
        dest = cache.quarantine(entry, reason)
        if (self.NAME, key, reason) not in _LOGGED_QUARANTINE:
            _LOGGED_QUARANTINE.add((self.NAME, key, reason))
            logger.warning("op %s: %s; moved it to %s, it will not be loaded (a new build replaces it)",
                           self.NAME, problem, dest)

    def _load_from_cache(self, cache: Cache, key: str, inputs: dict[str, Any], verbose: bool) -> OpModule:
        cache.check_op_dir(self.NAME)
        entry = cache.entry(self.NAME, key)
        lock_path = cache.lock_path(self.NAME, key)
        check = self._check_entry(entry, key, inputs)
        source = "cache"
        if not check.ok:
            nj.build_timeout_s()  # a bad ANYACCEL_BUILD_TIMEOUT or ANYACCEL_BUILD_LOCK_TIMEOUT fails before any wait
            lock_timeout_s()
            with BuildLock(lock_path, what=f"op {self.NAME} ({key[:10]})"):
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
                                      check.identity)
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

    # ----- building -----------------------------------------------------------------------------------------
    def preflight(self) -> dict[str, str | None]:
        """Check the tools a build needs and return the environment the compile runs with.

        Returns:
            Variables to set (or remove, None) only for the duration of the compile: ``CXX`` (the resolved
            compiler), ``MAX_JOBS`` (:func:`~anyaccel.op_builder.toolchains.host.build_jobs`) and ``PATH``
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
        """One :class:`~anyaccel.op_builder.toolchains.ninja.CompileStep` per source (``.cpp`` here; the CUDA
        backend adds ``.cu``)."""
        root = self.source_root()
        host = tuple(self.host_compile_command(env, namespace, gen_dir))
        steps = []
        for i, src in enumerate(self.sources()):
            path = root / src
            if path.suffix != ".cpp":
                raise OpBuilderError(f"op {self.NAME}: source {src} has suffix {path.suffix!r}; the "
                                     f"{self.BACKEND} backend compiles .cpp files")
            steps.append(nj.CompileStep(path, build_dir / f"{i}_{path.stem}.o",
                                        host + tuple(self.source_cxx_args(src))))
        return steps

    def link_command(self, env: dict[str, str | None]) -> list[str]:
        """The link command (objects and ``-o`` are added by the driver): the host compiler, ``-shared``, and
        only ``libtorch_cpu`` (the stable C shim) from torch."""
        return [str(env["CXX"]), "-shared", *_fast_linker(str(env["CXX"])), *self.extra_ldflags(),
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
        progress = _PROGRESS.get()
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
                             command=_ninja_command(result.output), returncode=result.returncode,
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
                logged = _write_log(fail_log, header + f"\n{exc}\n")
                raise BuildError(self.NAME, DIAGNOSES[exc.code], detail=str(exc), log_path=logged) from None
            logger.info("building op %s (%s) with %s jobs", self.NAME, key[:10], env.get("MAX_JOBS", "?"))
            t0 = time.monotonic()
            (work / "build").mkdir(mode=0o700)
            progress.start()
            token = _PROGRESS.set(progress)
            try:
                with scoped_environ(env):
                    lib = self.compile(work / "build", namespace, env, verbose)
            except BuildError as exc:
                text = str(exc)
                ninja_log = work / "build" / "ninja.log.txt"
                if ninja_log.exists():
                    text += "\n\n" + ninja_log.read_text(errors="replace")
                logged = _write_log(fail_log, header + "\n" + text + "\n")
                raise BuildError(self.NAME, exc.diagnosis, command=exc.command, returncode=exc.returncode,
                                 error_lines=exc.error_lines, log_path=logged, detail=exc.detail) from None
            except (RuntimeError, OSError) as exc:  # backends built on torch.utils.cpp_extension (SYCL)
                text = str(exc)
                rc = getattr(exc.__cause__, "returncode", None)
                logged = _write_log(fail_log, header + "\n" + text + "\n")
                raise BuildError(self.NAME, diagnose(text, rc), command=_ninja_command(text), returncode=rc,
                                 error_lines=first_error_lines(text), log_path=logged) from None
            finally:
                _PROGRESS.reset(token)
            seconds = time.monotonic() - t0
            try:
                self._publish(work, lib, entry, key, inputs, namespace, env, header, seconds, dir_mode, file_mode,
                              lib_mode)
            except OpBuilderError as exc:  # before OSError: CacheUnusableError is one
                raise self._os_failure(exc, _write_log(fail_log, header + f"\n{exc}\n")) from None
            except OSError as exc:
                error = cache_os_error(exc, entry, "publish the build at")
                logged = _write_log(fail_log, header + f"\n{error}\n")
                raise self._os_failure(error, logged) from None
            progress.finish(True)
            logger.info("built op %s in %.1f s -> %s", self.NAME, seconds, entry)
        except BuildError as exc:
            progress.finish(False, exc.code)
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
        """A :class:`BuildError` for a build the file system failed (full disk, read-only cache, ...)."""
        code = getattr(error, "code", "cache_unusable")
        return BuildError(self.NAME, DIAGNOSES.get(code, DIAGNOSES["cache_unusable"]), detail=str(error),
                          log_path=log_path)

    def _variant_or_empty(self) -> str:
        try:
            return self.variant_label()
        except OpBuilderError:
            return ""

    def build_prebuilt(self, dest_root: Path, verbose: bool = False) -> Path:
        """Build the op ahead of time into ``dest_root/<NAME>/<key>`` (setup.py and ``anyaccel build``).

        Builds without loading, so an op can be built for another machine (a CUDA op on a CPU-only host).

        Returns:
            The entry directory (library, manifest, build log).

        Raises:
            BuildError: as :meth:`load`.
        """
        dest_root = Path(dest_root).resolve()  # ninja runs in the build directory: relative paths would break
        inputs = self.key_inputs()
        key = mf.compute_key(inputs)
        entry = dest_root / self.NAME / key
        if self._valid_entry(entry, key, inputs) is None:
            with _key_lock(key):
                try:
                    cache_mod.make_dirs(entry.parent, cache_mod.PUBLIC_DIR_MODE)
                except CacheUnusableError as exc:
                    raise self._os_failure(exc) from None
                self._build_and_publish(dest_root / ".tmp", dest_root / ".logs", entry, key, inputs, verbose,
                                        public=True)
        return entry

    def builder(self) -> Any:
        """A setuptools extension for this op (DeepSpeed's ``builder()``), for custom AOT pipelines.

        Note: anyaccel's own AOT path (``ANYACCEL_BUILD_OPS=1``, :meth:`build_prebuilt`) does not use it; the
        extension compiles the same sources with the same flags through setuptools, except the per-source
        flags (:meth:`source_cxx_args`), which setuptools cannot give one source: every source gets ``-O3``.

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


def _write_log(path: Path, text: str) -> Path | None:
    """Write a failure log (mode 0600); returns its path, or None when it could not be written (a full disk:
    the error being reported matters more than its log)."""
    try:
        cache_mod.write_file(path, text)
    except OSError as exc:
        logger.warning("could not write the build log %s: %s", path, exc)
        return None
    return path


def _dlopen_error(path: Path) -> str:
    """The dynamic loader's own message for ``path`` (``torch.ops.load_library`` hides it), or ""."""
    import ctypes

    try:
        ctypes.CDLL(str(path))
    except OSError as exc:
        return str(exc)
    return ""


def _fast_linker(cxx: str) -> tuple[str, ...]:
    """``("-fuse-ld=gold",)`` when GNU gold is installed beside a GCC or Clang driver, else ``()``.

    Linking against ``libtorch_cpu.so`` (430 MB) takes 0.5 s with the default BFD linker and 0.17 s with gold
    on the development machine. The linker is a build-host detail, not a key input: the library it makes is
    the same contract.
    """
    name = Path(cxx).name
    if shutil.which("ld.gold") is None or not any(k in name for k in ("g++", "c++", "clang")):
        return ()
    return ("-fuse-ld=gold",) if _gold_links(cxx, shutil.which("ld.gold")) else ()


@functools.cache
def _gold_links(cxx: str, gold: str | None) -> bool:
    """Whether ``cxx -shared -fuse-ld=gold`` links a C++ shared library here (once per compiler, gold found on
    ``PATH`` (``gold``, part of the cache key) and process).

    Gold can fail where the default linker succeeds (a GCC whose ``libstdc++.so`` symlink dangles: BFD skips
    it, gold stops), so it is used only after a trial link of an empty library; the trial costs about 0.1 s
    and runs only when a build is about to link.
    """
    with tempfile.TemporaryDirectory(prefix="anyaccel_gold_") as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text("int anyaccel_gold_probe() { return 0; }\n")
        try:
            proc = subprocess.run([cxx, "-shared", "-fPIC", "-fuse-ld=gold", str(src), "-o", str(Path(tmp) / "p.so")],
                                  capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return False
    if proc.returncode != 0:
        logger.info("gold cannot link with %s here; using the default linker", cxx)
    return proc.returncode == 0


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


#: The torch.library handles of the fallback kernels (a dropped handle would unregister them).
_FALLBACK_LIBRARIES: list[Any] = []


def _no_kernel(op: str, device_type: str, *args: Any) -> None:
    """The fallback kernel of :meth:`OpBuilder._register_fallbacks`: always raises.

    Raises:
        RuntimeError: ``"<op>: every tensor list is empty ..."`` or ``"<op>: this build runs on <type> tensors;
            got tensors on <devices> ..."``.
    """
    import torch

    tensors = [t for a in args for t in (a if isinstance(a, (list, tuple)) else (a,)) if isinstance(t, torch.Tensor)]
    if not tensors:
        raise RuntimeError(f"{op}: every tensor list is empty; pass at least one parameter (anyaccel's optimizers "
                           "skip a step that has nothing to update)")
    devices = ", ".join(sorted({str(t.device) for t in tensors}))
    raise RuntimeError(f"{op}: this build runs on {device_type} tensors, got tensors on {devices}; load the "
                       f"implementation for their device (anyaccel.ops.dispatch.load(family, device_type)) or "
                       "move the tensors")
