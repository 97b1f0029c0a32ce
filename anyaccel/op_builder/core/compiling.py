"""Building an op: the toolchain hooks backends override, the ninja build, and the atomic publication.

`CompilingBuilder` turns a builder's data (`BuilderHooks`) into
a shared library: [`preflight`][anyaccel.op_builder.core.compiling.CompilingBuilder.preflight] checks the tools,
[`compile_steps`][anyaccel.op_builder.core.compiling.CompilingBuilder.compile_steps]
and [`link_command`][anyaccel.op_builder.core.compiling.CompilingBuilder.link_command] say what to run (backends
override these three), and
[`compile`][anyaccel.op_builder.core.compiling.CompilingBuilder.compile] runs ninja. A build happens in a private
directory and is published with one
``os.rename`` (``_build_and_publish``), so a reader never sees half an entry; a failure
leaves a log and publishes nothing.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from anyaccel.op_builder.core import cache as cache_mod
from anyaccel.op_builder.core import integrity
from anyaccel.op_builder.core import manifest as mf
from anyaccel.op_builder.core.cache import cache_os_error
from anyaccel.op_builder.core.environ import scoped_environ
from anyaccel.op_builder.core.hooks import BuilderHooks
from anyaccel.op_builder.core.progress import BuildProgress
from anyaccel.op_builder.errors import (
    DIAGNOSES,
    BuildError,
    CacheUnusableError,
    OpBuilderError,
    ToolchainError,
    diagnose,
    first_error_lines,
)
from anyaccel.op_builder.toolchains import ninja as nj
from anyaccel.op_builder.toolchains import torch_abi
from anyaccel.op_builder.toolchains.host import build_jobs, probe_version, require_cxx, require_ninja

logger = logging.getLogger(__name__)

LIBRARY_NAME = integrity.LIBRARY_NAME

# The progress display of the build running in this context (read by compile(), whose signature backends
# override, so it is not a parameter).
_PROGRESS: contextvars.ContextVar[BuildProgress | None] = contextvars.ContextVar("anyaccel_build_progress",
                                                                                  default=None)
# One in-process lock per cache key: a load and an AOT build of the same key in two threads run one at a time.
_KEY_LOCKS: dict[str, threading.Lock] = {}
_STATE_LOCK = threading.Lock()


def key_lock(key: str) -> threading.Lock:
    """The in-process lock of cache key ``key`` (created on first use)."""
    with _STATE_LOCK:
        return _KEY_LOCKS.setdefault(key, threading.Lock())


def _ninja_command(log_text: str) -> str:
    """The command ninja reports after ``FAILED:``, or ""."""
    lines = log_text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("FAILED:") and i + 1 < len(lines):
            return lines[i + 1].strip()
    return ""


class CompilingBuilder(BuilderHooks):
    """The build half of an op builder: toolchain hooks, the ninja build, publication and AOT builds."""

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
        """One `CompileStep` per source (``.cpp`` here; the CUDA
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
            # DEBUG: the progress display's line is the one line a build shows (a terminal also gets a live one)
            logger.debug("building op %s (%s) with %s jobs", self.NAME, key[:10], env.get("MAX_JOBS", "?"))
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
            [`build_prebuilt`][anyaccel.op_builder.core.compiling.CompilingBuilder.build_prebuilt]) does not use it; the
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


def _write_log(path: Path, text: str) -> Path | None:
    """Write a failure log (mode 0600); returns its path, or None when it could not be written (a full disk:
    the error being reported matters more than its log)."""
    try:
        cache_mod.write_file(path, text)
    except OSError as exc:
        logger.warning("could not write the build log %s: %s", path, exc)
        return None
    return path


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


