"""Loading an op: the in-process table, prebuilt artifacts, the content-addressed cache and its quarantine.

`LoadingBuilder` implements [`load`][anyaccel.op_builder.core.loading.LoadingBuilder.load] as one path:

1. in-process table by cache key (a second ``load()`` costs a dict lookup; a failed build raises the same
   [`BuildError`][anyaccel.op_builder.errors.BuildError] again);
2. a prebuilt (AOT) artifact whose manifest matches (sources, flags, ISA, platform; its stable-ABI target
   not newer than the running torch);
3. the content-addressed disk cache, manifest checked;
4. a build under an OS lock, in a private directory, published with one ``os.rename``
   (`CompilingBuilder`).

Nothing is loaded before `inspect_entry` passes (ownership and
modes of every path, the manifest, the library's SHA-256), and after the load the library must have
registered the namespace and functions this builder expects
([`verify_functions`][anyaccel.op_builder.core.hooks.BuilderHooks.verify_functions]). A cache entry that fails either
check
is quarantined (moved aside in one rename, logged once per process) and rebuilt. Steps 1-3 spawn no process
and import nothing heavy.
"""

from __future__ import annotations

import logging
import stat
from pathlib import Path
from typing import Any

from anyaccel import settings
from anyaccel.op_builder.core import cache as cache_mod
from anyaccel.op_builder.core import integrity, interrupt
from anyaccel.op_builder.core import manifest as mf
from anyaccel.op_builder.core.cache import Cache, check_secure
from anyaccel.op_builder.core.compiling import CompilingBuilder, key_lock
from anyaccel.op_builder.core.hooks import ABI_TARGET_FIELD, PACKAGE_DIR, torch_version
from anyaccel.op_builder.core.lock import BuildLock
from anyaccel.op_builder.core.lock import default_timeout_s as lock_timeout_s
from anyaccel.op_builder.core.module import OpModule
from anyaccel.op_builder.errors import DIAGNOSES, ArtifactError, BuildError, OpBuilderError
from anyaccel.op_builder.toolchains import ninja as nj
from anyaccel.op_builder.toolchains import torch_abi
from anyaccel.op_builder.toolchains.host import find_cxx

logger = logging.getLogger(__name__)

PREBUILT_ENV = settings.PREBUILT_DIR.name
LIBRARY_NAME = integrity.LIBRARY_NAME

# Process-wide state, keyed by cache key (the namespace is derived from it, so one key = one library).
_LOADED: dict[str, OpModule] = {}
_FAILED: dict[str, BuildError] = {}
_WARNED_PREBUILT: set[str] = set()
_LOGGED_QUARANTINE: set[tuple[str, str, str]] = set()


def prebuilt_root() -> Path:
    """Where AOT-built ops are looked up: ``ANYACCEL_PREBUILT_DIR``, else ``anyaccel/_prebuilt``."""
    return settings.PREBUILT_DIR.get() or PACKAGE_DIR / "_prebuilt"


class LoadingBuilder(CompilingBuilder):
    """The load half of an op builder: compatibility, the load path, prebuilt lookup, cache and quarantine."""

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

        Unlike [`compatibility`][anyaccel.op_builder.core.loading.LoadingBuilder.compatibility] it asks for no device:
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
        """DeepSpeed's check: True when [`compatibility`][anyaccel.op_builder.core.loading.LoadingBuilder.compatibility]
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
            if key in _LOADED or self._find_prebuilt(inputs, warn=False) is not None:
                return True
            return self._check_entry(Cache.open().entry(self.NAME, key), key, inputs).ok
        except (OpBuilderError, OSError):
            return False

    # ----- load path ----------------------------------------------------------------------------------------
    def load(self, verbose: bool = False) -> OpModule:
        """Load the op, building it if needed (the four steps in the module docstring).

        Args:
            verbose: log build progress and the compiler output at INFO.

        Returns:
            The [`OpModule`][anyaccel.op_builder.core.module.OpModule].

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
        """Like [`load`][anyaccel.op_builder.core.loading.LoadingBuilder.load] but ignores prebuilt artifacts (cache,
        else build)."""
        return self._load(use_prebuilt=False, verbose=verbose)

    def _load(self, use_prebuilt: bool, verbose: bool) -> OpModule:
        inputs = self.key_inputs()
        key = mf.compute_key(inputs)
        with key_lock(key):
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
                      manifest: dict[str, Any]) -> OpModule:
        """Load a library that passed `inspect_entry` and check
        what it registered.

        What the loader gets is a private, sealed copy of the bytes read once and hashed
        (`verified_copy`), never the cache path itself: a library
        rewritten in place after its check cannot be what runs.

        Args:
            manifest: the entry's checked manifest (its ``library_sha256`` and ``library_size``).

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
        # the integrations are asked on the module's first use of a name its torch ops do not answer
        native = () if self.SPEC is None else tuple(fn.name for fn in self.SPEC.functions)
        module = OpModule(self.NAME, namespace, path, isa, key, source,
                          {"functions": lambda: self._module_extras().get("functions"), "native": native})
        logger.debug("loaded %r from %s", module, source)
        return module

    def _module_extras(self) -> dict[str, Any]:
        """What the loaded module offers besides its torch ops: ``{"functions": (adapter, names)}``, the
        integrations' functions for the builder names this build answers to (its ``builder`` and aliases;
        `anyaccel.op_builder.core.module_functions`), or ``{}``. Makes no adapter object."""
        if self.SPEC is None or self.BUILD is None:
            return {}
        from anyaccel.op_builder.core import module_functions

        answer = module_functions.for_build(self.SPEC.family, self.BUILD.builder_names)
        return {"functions": answer} if answer else {}

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
        if warn and self.NAME not in _WARNED_PREBUILT:
            _WARNED_PREBUILT.add(self.NAME)
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

