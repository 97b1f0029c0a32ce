"""Typed errors of the op-builder layer and the diagnosis of failed builds.

Every failure a user can hit while building or loading an op is one of the classes below, all subclasses
of :class:`OpBuilderError`. A failed build raises :class:`BuildError`, which carries the op, the command,
the return code, the first compiler error lines, a :class:`Diagnosis` (a code plus its fix) and the path of
the full log, which is always kept (user pain P1 in ``shared/reference/user-pains.md``).

The diagnosis is data: :data:`DIAGNOSES` maps each code to its explanation and fix, and
:data:`LOG_PATTERNS` maps regular expressions over the build log to codes, tried in order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Diagnosis:
    """What went wrong with a build and how to fix it.

    Attributes:
        code: a stable identifier, one of the keys of :data:`DIAGNOSES`.
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
            "use a newer compiler, or choose a lower level with ANYACCEL_CPU_ISA (avx2 or portable)",
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
            "the library was built but could not be loaded",
            "read the error above; `anyaccel cache clean --stale` and a rebuild fix a library built "
            "against another torch",
        ),
    )
}

# (pattern over the build log, code), tried in order; the first match wins. Specific before generic.
LOG_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE | re.MULTILINE), code)
    for p, code in (
        (r"killed signal terminated program|internal compiler error: killed|"
         r"cannot allocate memory|virtual memory exhausted|out of memory", "killed"),
        (r"unrecognized (command[- ]line )?option '?-m|unknown argument: '?-m|"
         r"unsupported (instruction set|option|argument).*-m|bad value .* for '?-m(arch|tune)", "unsupported_isa"),
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
_ERROR_LINE = re.compile(r"\berror\b|fatal|undefined reference|cannot find|killed", re.IGNORECASE)


def diagnose(log_text: str, returncode: int | None = None) -> Diagnosis:
    """Classify a failed build from its log and return code.

    Args:
        log_text: the combined output of the build (ninja and compiler), any length.
        returncode: the build command's exit status, if known; -9 or 137 mean "killed".

    Returns:
        The first :class:`Diagnosis` whose pattern in :data:`LOG_PATTERNS` matches, ``killed`` for a
        killed process, else ``compile_error``.
    """
    for pattern, code in LOG_PATTERNS:
        if pattern.search(log_text):
            return DIAGNOSES[code]
    if returncode in KILLED_RETURNCODES:
        return DIAGNOSES["killed"]
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
    """Base of every error raised by :mod:`anyaccel.op_builder`."""


class UnknownOpError(OpBuilderError, ValueError):
    """An op name that no accelerator knows; the message lists every known name."""


class ISAError(OpBuilderError, ValueError):
    """A CPU ISA level that is not a valid name, or that this CPU does not support."""


class CacheSecurityError(OpBuilderError, PermissionError):
    """The cache root or one of its entries is owned by another user or writable by others."""


class LockTimeoutError(OpBuilderError, TimeoutError):
    """Waiting for another process's build of the same op took longer than the allowed time."""


class ToolchainError(OpBuilderError, RuntimeError):
    """A tool the build needs is missing or unusable, found before any compiler runs.

    Attributes:
        code: the :data:`DIAGNOSES` code of the problem (e.g. ``compiler_missing``, ``cuda_mismatch``).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


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
        self.diagnosis = diagnosis
        self.command = command
        self.returncode = returncode
        self.error_lines = tuple(error_lines)
        self.log_path = log_path
        self.detail = detail
        super().__init__(self._format())

    @property
    def code(self) -> str:
        """The diagnosis code, e.g. ``header_missing``."""
        return self.diagnosis.code

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

    def __reduce__(self):  # keep the error picklable across processes (multiprocessing, pytest-xdist)
        return (_rebuild_build_error, (self.op, self.diagnosis, self.command, self.returncode,
                                       self.error_lines, self.log_path, self.detail))


def _rebuild_build_error(op, diagnosis, command, returncode, error_lines, log_path, detail) -> BuildError:
    return BuildError(op, diagnosis, command=command, returncode=returncode, error_lines=error_lines,
                      log_path=log_path, detail=detail)
