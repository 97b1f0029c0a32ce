"""Typed errors of the op-builder layer and the diagnosis of failed builds.

Every failure a user can hit while building or loading an op is one of the classes below, all subclasses
of [`OpBuilderError`][anyaccel.op_builder.errors.OpBuilderError]. A failed build raises
[`BuildError`][anyaccel.op_builder.errors.BuildError], which carries the op, the command,
the return code, the first compiler error lines, a `Diagnosis` (a code plus its fix) and the path of
the full log, which is always kept (a build error shown without its log cannot be diagnosed).

The diagnosis is data: `DIAGNOSES` maps each code to its explanation and fix, and
`LOG_PATTERNS` maps regular expressions over the build log to codes, tried in order. Every error class
has a code too ([`OpBuilderError.code`][anyaccel.op_builder.errors.OpBuilderError.code]), so ``DIAGNOSES[err.code].fix``
is defined for any error of the
layer, not only for failed builds: every error comes with a fix.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from anyaccel import settings


@dataclass(frozen=True)
class Diagnosis:
    """What went wrong with a build and how to fix it.

    Attributes:
        code: a stable identifier, one of the keys of `DIAGNOSES`.
        summary: one line saying what went wrong.
        fix: what the user should do about it.
    """

    code: str
    summary: str
    fix: str


# code -> (summary, fix). The codes are documented in docs/op_builders.md.
DIAGNOSES: dict[str, Diagnosis] = {
    d.code: d
    for d in (
        Diagnosis(
            "compiler_missing",
            "no C++ compiler was found",
            "install g++ or clang++ (e.g. `apt-get install g++`), or point CXX at a compiler",
        ),
        Diagnosis(
            "ninja_missing",
            "the ninja build tool was found neither in the `ninja` Python package nor on PATH",
            "`pip install ninja`",
        ),
        Diagnosis(
            "python_headers_missing",
            "Python.h, the CPython development headers, is missing",
            "install the Python development headers (e.g. `apt-get install python3-dev`, or a Python "
            "built with its headers)",
        ),
        Diagnosis(
            "sycl_compiler_missing",
            "no working SYCL compiler (Intel oneAPI DPC++ icpx) was found",
            "install Intel oneAPI DPC++/C++ (icpx) and `source setvars.sh`, or set ANYACCEL_SYCL_CXX to the "
            "icpx to use; the error above lists every place that was searched",
        ),
        Diagnosis(
            "header_missing",
            "a header file the sources include was not found",
            "install the package that provides the header named above, or add its directory to CPATH",
        ),
        Diagnosis(
            "library_missing",
            "the linker could not find a library",
            "install the library named above or add its directory to LIBRARY_PATH",
        ),
        Diagnosis(
            "cuda_mismatch",
            "the CUDA toolkit's major version differs from the one torch was built with",
            "install a CUDA toolkit whose major version matches torch.version.cuda and point CUDA_HOME at "
            "it, or install a torch build for your toolkit; ANYACCEL_SKIP_CUDA_CHECK=1 skips this check "
            "at your own risk",
        ),
        Diagnosis(
            "unsupported_isa",
            "the compiler rejected the instruction-set flags of the chosen CPU ISA level",
            "use a newer compiler, or choose a lower level with ANYACCEL_CPU_ISA (avx2, neon or portable)",
        ),
        Diagnosis(
            "killed",
            "the compiler was killed, most likely because the machine ran out of memory",
            "build with fewer parallel jobs (MAX_JOBS=1) or on a machine with more free memory",
        ),
        Diagnosis(
            "compile_error",
            "the compiler reported an error in the sources",
            "read the compiler error lines above and the full log; report it if the sources are ours",
        ),
        Diagnosis(
            "timeout",
            "the build ran longer than ANYACCEL_BUILD_TIMEOUT and was killed with every process it started",
            "find out why the command named above hangs (a compiler waiting on a lock or a network drive); "
            "raise ANYACCEL_BUILD_TIMEOUT if the machine is just slow",
        ),
        Diagnosis(
            "load_error",
            "the library passed its integrity checks but the dynamic loader refused it",
            "read the loader's message above (a missing shared library or symbol: check LD_LIBRARY_PATH and the "
            "torch install); the cache entry was quarantined, so the next load rebuilds it",
        ),
        Diagnosis(
            "disk_full",
            "the disk (or the user's quota) ran out of space while building or writing the op cache",
            "free space on the file system of the cache (`anyaccel cache clean --all` frees the op cache) or set "
            "ANYACCEL_CACHE_DIR to a directory on a disk with space; a build needs about 50 MB",
        ),
        Diagnosis(
            "compiler_crashed",
            "the compiler crashed (killed by a signal other than SIGKILL, or an internal compiler error)",
            "retry once (a crash can be a hardware or memory fault); if it repeats, use another compiler version "
            "(set CXX) and report the crash to the compiler's vendor with the log",
        ),
        Diagnosis(
            "compiler_not_executable",
            "the compiler (named by CXX or ANYACCEL_SYCL_CXX, or found on PATH) exists but cannot be executed",
            "point the variable at a compiler this machine can run (`chmod +x` it if it is a script of yours, or "
            "install one built for this architecture)",
        ),
        Diagnosis(
            "version_probe_failed",
            "running a tool with --version failed, so its version could not be checked",
            "run the command named above yourself: fix or reinstall the tool, or point the variable naming it "
            "(CXX, CUDA_HOME, ANYACCEL_SYCL_CXX) at a working one",
        ),
        Diagnosis(
            "cache_not_directory",
            "the op cache path, or one of its parents, is a file rather than a directory",
            "set ANYACCEL_CACHE_DIR to a directory (or remove the file named above)",
        ),
        Diagnosis(
            "cache_read_only",
            "the op cache is not writable (read-only file system or missing write permission) and an op had to "
            "be built, locked or quarantined there",
            "make the directory named above writable by you (`chmod u+w`), or set ANYACCEL_CACHE_DIR to a "
            "writable directory; a read-only cache serves only the ops already built in it",
        ),
        Diagnosis(
            "cache_unusable",
            "the file system refused an operation on the op cache",
            "read the system's reason above; set ANYACCEL_CACHE_DIR to another directory",
        ),
        Diagnosis(
            "cache_insecure",
            "a path of the op cache is owned by another user, writable by group or others, or a symbolic link",
            "follow the fix in the message (`chmod go-w`, remove the path, or set ANYACCEL_CACHE_DIR to a "
            "directory only you can write)",
        ),
        Diagnosis(
            "damaged_artifact",
            "a built op library or its manifest is damaged or does not match its content digest",
            "nothing to do for a cache entry: it was quarantined and is rebuilt; for a prebuilt artifact reinstall "
            "anyaccel; `anyaccel cache clean --stale` removes the quarantine",
        ),
        Diagnosis(
            "wrong_library",
            "a loaded op library did not register the namespace and functions its builder expects (a library "
            "of another op, ISA or build)",
            "load again: the cache entry was quarantined and is rebuilt; for a prebuilt artifact reinstall "
            "anyaccel or set ANYACCEL_PREBUILT_DIR to an empty directory",
        ),
        Diagnosis(
            "lock_timeout",
            "another process held the build lock of this op longer than ANYACCEL_BUILD_LOCK_TIMEOUT",
            "wait for that process (named in the message) or raise ANYACCEL_BUILD_LOCK_TIMEOUT",
        ),
        Diagnosis(
            "bad_setting",
            "an environment variable of the op builders has a value that is not accepted",
            "set the variable named above to a value the message lists, or unset it",
        ),
        Diagnosis(
            "stale_install",
            "anyaccel's installed metadata lacks entry points its code declares (installed before they existed)",
            "reinstall anyaccel: `pip install -e .` in a source checkout, else `pip install --force-reinstall "
            "anyaccel`; delete a stale `anyaccel.egg-info` left in the checkout (it shadows the installed metadata "
            "when Python runs from there)",
        ),
        Diagnosis(
            "unknown_op",
            "no op builder has this name",
            "use one of the names the message lists (`anyaccel report` shows them all)",
        ),
        Diagnosis(
            "isa_unavailable",
            "the requested CPU SIMD level is not a valid name, not implemented by the op, or not supported by "
            "this CPU",
            "set ANYACCEL_CPU_ISA to a level the message lists, or unset it to use the best level of this CPU",
        ),
        Diagnosis(
            "torch_abi_target",
            "the stable-ABI target (ANYACCEL_TORCH_TARGET) is malformed or does not match the installed torch",
            "fix or unset ANYACCEL_TORCH_TARGET, or install the torch version the message names",
        ),
        Diagnosis(
            "op_builder_error",
            "the op builders could not do what was asked",
            "read the message above",
        ),
    )
}

# (pattern over the build log, code), tried in order; the first match wins. Specific before generic.
LOG_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE | re.MULTILINE), code)
    for p, code in (
        (r"No space left on device|Disk quota exceeded", "disk_full"),
        (r"killed signal terminated program|internal compiler error: killed|"
         r"cannot allocate memory|virtual memory exhausted|out of memory", "killed"),
        (r"internal compiler error|signal terminated program|^Segmentation fault|^Bus error|^Illegal instruction|"
         r"^Aborted|FAILED: \[code=(13[2-6]|139)\]", "compiler_crashed"),
        (r"^(/bin/)?(ba|da)?sh: (\d+: )?[^:\n]+: (Permission denied|Exec format error)$|"
         r"cannot execute binary file|FAILED: \[code=126\]", "compiler_not_executable"),
        (r"unrecognized (command[- ]line )?option '?-m|unknown argument: '?-m|"
         r"unsupported (instruction set|option|argument).*-m|bad value .* for .?-m(arch|tune)|"
         r"invalid feature modifier .* in .?-march|unknown value .* for .?-m(arch|cpu|tune)", "unsupported_isa"),
        (r"Python\.h: No such file or directory|'Python\.h' file not found", "python_headers_missing"),
        (r"fatal error: .*: No such file or directory|fatal error: '.*' file not found", "header_missing"),
        (r"cannot find -l|ld: library not found for -l", "library_missing"),
        (r"detected CUDA version .* mismatches|CUDA version mismatch", "cuda_mismatch"),
        (r"Ninja is required", "ninja_missing"),
        (r"(c\+\+|g\+\+|clang\+\+|gcc|cc): (command )?not found|"
         r"No such file or directory: '[^']*(c\+\+|g\+\+|clang\+\+)'", "compiler_missing"),
    )
)

# Return codes that mean the process was killed (SIGKILL seen directly or through a shell).
KILLED_RETURNCODES = frozenset({-9, 137})
# Return codes of a compiler that crashed: SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGSEGV, directly (negative)
# or through a shell / ninja >= 1.12 (128 + signal).
CRASHED_RETURNCODES = frozenset({-4, -5, -6, -7, -8, -11, 132, 133, 134, 135, 136, 139})
# The shell's "found but cannot execute" status.
NOT_EXECUTABLE_RETURNCODES = frozenset({126})
_ERROR_LINE = re.compile(r"\berror\b|fatal|undefined reference|cannot find|killed", re.IGNORECASE)


def diagnose(log_text: str, returncode: int | None = None) -> Diagnosis:
    """Classify a failed build from its log and return code.

    Args:
        log_text: the combined output of the build (ninja and compiler), any length.
        returncode: the build command's exit status, if known; -9 or 137 mean "killed".

    Returns:
        The first `Diagnosis` whose pattern in `LOG_PATTERNS` matches; else, from the return
        code, ``killed`` (SIGKILL), ``compiler_crashed`` (another fatal signal) or ``compiler_not_executable``
        (126); else ``compile_error``.
    """
    for pattern, code in LOG_PATTERNS:
        if pattern.search(log_text):
            return DIAGNOSES[code]
    if returncode in KILLED_RETURNCODES:
        return DIAGNOSES["killed"]
    if returncode in CRASHED_RETURNCODES:
        return DIAGNOSES["compiler_crashed"]
    if returncode in NOT_EXECUTABLE_RETURNCODES:
        return DIAGNOSES["compiler_not_executable"]
    return DIAGNOSES["compile_error"]


def first_error_lines(log_text: str, limit: int = 8) -> tuple[str, ...]:
    """Return up to ``limit`` lines of ``log_text`` that look like compiler errors, in order.

    Command lines echoed by ninja (``[1/2] c++ ...``) and torch's "Error building extension" prefix are
    skipped; a bare ``Killed`` line (the shell's report of SIGKILL) is kept.
    """
    lines = []
    for line in log_text.splitlines():
        if line.startswith(("[", "Error building extension", "FAILED:")) or " -c " in line:
            continue
        if _ERROR_LINE.search(line):
            lines.append(line.rstrip())
    return tuple(lines[:limit])


class OpBuilderError(Exception):
    """Base of every error raised by [`anyaccel.op_builder`][anyaccel.op_builder].

    Attributes:
        CODE: the class's `DIAGNOSES` code; subclasses whose instances differ (e.g.
            `ToolchainError`) set ``_code`` per instance.
    """

    CODE: ClassVar[str] = "op_builder_error"
    _code: str | None = None

    @property
    def code(self) -> str:
        """The error's `DIAGNOSES` code."""
        return self._code or self.CODE

    @property
    def fix(self) -> str:
        """What the user should do: the fix of [`code`][anyaccel.op_builder.errors.OpBuilderError.code] in
        `DIAGNOSES`."""
        found = DIAGNOSES.get(self.code)
        return found.fix if found is not None else DIAGNOSES["op_builder_error"].fix


class UnknownOpError(OpBuilderError, ValueError):
    """An op name that no accelerator knows; the message lists every known name."""

    CODE = "unknown_op"


class StaleInstallError(OpBuilderError, RuntimeError):
    """anyaccel's installed distribution metadata lacks an entry-point group its code relies on: the
    environment was installed (``pip install -e .``) before the group was added to ``pyproject.toml``, so
    what the group contributes (DeepSpeed's ``create_adam``...) would silently be missing."""

    CODE = "stale_install"


class ISAError(OpBuilderError, ValueError):
    """A CPU ISA level that is not a valid name, or that this CPU does not support."""

    CODE = "isa_unavailable"


class SettingError(OpBuilderError, settings.SettingError):
    """An environment variable of the op builders has a value that is not accepted (the message names the
    variable, its value, what is accepted and an example); `anyaccel.settings` raises it for them."""

    CODE = "bad_setting"


class CacheSecurityError(OpBuilderError, PermissionError):
    """A path of the op cache is owned by another user, writable by group or others, or a symbolic link where
    none may be; the message names the path and the fix.

    Attributes:
        path: the offending path (None when not known).
    """

    CODE = "cache_insecure"

    def __init__(self, message: str, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.path))


class CacheUnusableError(OpBuilderError, OSError):
    """The op cache cannot be used: a file where a directory must be, a read-only file system or directory,
    or a full disk. The message names the path, the operation and the fix.

    Attributes:
        code: ``cache_not_directory``, ``cache_read_only``, ``disk_full``, ``cache_not_utf8`` (a path the
            builds cannot write into their files) or ``cache_unusable``.
        path: the path the operation failed on.
    """

    def __init__(self, code: str, message: str, path: Path | None = None) -> None:
        super().__init__(message)
        self._code = code
        self.path = path

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, str(self), self.path))


class ArtifactError(OpBuilderError, RuntimeError):
    """A built op library that must not be used: it registered other functions than its builder expects
    (code ``wrong_library``), or it is damaged and could not be set aside (``damaged_artifact``).

    Attributes:
        code: ``wrong_library`` or ``damaged_artifact``.
        op: the builder's ``NAME``.
        path: the library.
    """

    def __init__(self, code: str, op: str, path: Path, message: str) -> None:
        super().__init__(message)
        self._code = code
        self.op = op
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.op, self.path, str(self)))


class LockTimeoutError(OpBuilderError, TimeoutError):
    """Waiting for another process's build of the same op took longer than the allowed time."""

    CODE = "lock_timeout"


class ToolchainError(OpBuilderError, RuntimeError):
    """A tool the build needs is missing or unusable, found before any compiler runs.

    Attributes:
        code: the `DIAGNOSES` code of the problem (e.g. ``compiler_missing``, ``cuda_mismatch``,
            ``compiler_not_executable``, ``version_probe_failed``).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self._code = code

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, str(self)))


class BuildError(OpBuilderError, RuntimeError):
    """A failed build of an op, explained.

    Attributes:
        op: the op's ``NAME``.
        diagnosis: what went wrong and its fix.
        command: the command that failed, as a string ("" when no command ran).
        returncode: its exit status, or None when no command ran.
        error_lines: the first compiler error lines (at most 8).
        log_path: the full build log, which is kept after the failure.
        detail: extra text (e.g. a toolchain error message).
    """

    def __init__(
        self,
        op: str,
        diagnosis: Diagnosis,
        *,
        command: str = "",
        returncode: int | None = None,
        error_lines: Sequence[str] = (),
        log_path: Path | None = None,
        detail: str = "",
    ) -> None:
        self.op = op
        self._diagnosis = diagnosis
        self.command = command
        self.returncode = returncode
        self.error_lines = tuple(error_lines)
        self.log_path = log_path
        self.detail = detail
        super().__init__(self._format())

    @property
    def code(self) -> str:
        """The diagnosis code, e.g. ``header_missing``."""
        return self._diagnosis.code

    @property
    def diagnosis(self) -> Diagnosis:
        """What went wrong and its fix."""
        return self._diagnosis

    def _format(self) -> str:
        parts = [f"building op '{self.op}' failed: {self.diagnosis.summary} [{self.diagnosis.code}]"]
        if self.detail:
            parts.append(self.detail)
        if self.command:
            parts.append(f"command: {self.command}")
        if self.returncode is not None:
            parts.append(f"return code: {self.returncode}")
        if self.error_lines:
            parts.append("first errors:\n  " + "\n  ".join(self.error_lines))
        parts.append(f"fix: {self.diagnosis.fix}")
        if self.log_path is not None:
            parts.append(f"full log: {self.log_path}")
        return "\n".join(parts)

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across processes (multiprocessing, pytest-xdist)
        return (_rebuild_build_error, (self.op, self.diagnosis, self.command, self.returncode,
                                       self.error_lines, self.log_path, self.detail))


def _rebuild_build_error(op: str, diagnosis: Diagnosis, command: str, returncode: int | None,
                        error_lines: Sequence[str], log_path: Path | None, detail: str) -> BuildError:
    return BuildError(op, diagnosis, command=command, returncode=returncode, error_lines=error_lines,
                      log_path=log_path, detail=detail)
