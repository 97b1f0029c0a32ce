"""Toolchains as data: one record per compiler family, how it is found, how it is probed, what it compiles.

A [`Toolchain`][anyaccel.op_builder.toolchains.records.Toolchain] is a frozen record: the variable that names
the compiler, the names looked up on ``PATH``, the install prefixes searched with them, the command that makes it
say what it is and the banner that proves it, the variables it runs with, its flags per target, the source
suffixes it compiles and what it cannot do. The op-builder backends hold these records (the CUDA backend's
``GPUToolkit``, the SYCL backend's ``SYCLToolkit``, the CPU backend's host record) and take the compiler's
look-up, probe, target flags and source suffixes from them, so that what ``anyaccel report`` says of a compiler
is what a build does with it. [`TOOLCHAINS`][anyaccel.op_builder.toolchains.records.TOOLCHAINS] holds the host
C++ compiler, nvcc, hipcc, icpx and acpp;
[`BACKEND_TOOLCHAINS`][anyaccel.op_builder.toolchains.records.BACKEND_TOOLCHAINS] says which records an op-builder
backend chooses among, best first.

Two steps, kept apart so the import and load paths start no process:

- [`locate`][anyaccel.op_builder.toolchains.records.locate]: file-system look-ups only (the record's own
  finder where its look-up is more than variable, prefixes and ``PATH``: ``find_cxx``, ``find_nvcc``), safe on
  the load path and in the cache key;
- [`probe`][anyaccel.op_builder.toolchains.records.probe]: runs the compiler once with the record's version
  arguments (through [`probe_version`][anyaccel.op_builder.toolchains.host.probe_version], bounded by a
  timeout) and accepts it only if its banner matches: for ``anyaccel report`` and builds, never at import.

[`survey`][anyaccel.op_builder.toolchains.records.survey] does both for every record: what ``anyaccel report``
prints (path, version, or why not).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from anyaccel.op_builder.errors import ToolchainError
from anyaccel.op_builder.toolchains.cpu_isa import ISA_LEVELS
from anyaccel.op_builder.toolchains.host import find_tool, probe_version

__all__ = ["BACKEND_TOOLCHAINS", "TOOLCHAINS", "Found", "Toolchain", "choose", "flags_for", "install_root", "locate",
           "probe", "searched", "survey"]

#: Seconds a version probe may take (the first run of icpx or acpp on a cold disk takes a few seconds).
PROBE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Toolchain:
    """One compiler family, as data.

    Attributes:
        name: the record's name and the compiler's usual command (``"nvcc"``); ``"host"`` for the host C++
            compiler.
        title: what it is, in words (``"CUDA (NVIDIA nvcc)"``).
        variable: the variable naming the compiler (its first word, a name or a path), read like ``CXX``;
            None when the record has none.
        path_names: command names looked up on ``PATH`` (in order) when ``variable`` is unset.
        prefixes: ``(variable, relative dir)`` pairs: install prefixes named by a variable
            (``("ROCM_PATH", "bin")``), searched after ``PATH`` (before it when ``prefixes_first``); the first one
            set is also the toolkit's root (`install_root`).
        default_dirs: absolute directories searched last (``/opt/rocm/bin``).
        prefixes_first: search ``prefixes`` before ``PATH`` (a toolkit root named by ``ROCM_HOME`` wins over
            another hipcc on ``PATH``, as in torch's own look-up).
        finder: ``"module:function"`` of a finder called with the environment instead of the generic look-up,
            for a look-up the fields above cannot say (nvcc's toolkit root must hold the CUDA headers); None for
            the generic one.
        missing_code: the `ToolchainError` code raised when ``variable`` names nothing executable.
        version_args: the arguments that make it print its banner.
        banner: a regular expression its version output must match to be this compiler (a g++ named by
            ``ANYACCEL_SYCL_CXX`` runs, but is no SYCL compiler).
        version: a regular expression whose first group is the version in that output.
        compiler_env: variables set whenever it runs, its probe included (hipcc: ``HIP_PLATFORM=amd``).
        source_suffixes: the source file suffixes it compiles.
        suffix_flags: source suffix -> the flags that make it compile such a file (``.sycl``, torch's routing
            suffix, is C++ to the SYCL compilers: ``-x c++``).
        target_flags: target -> the flags that compile for it (``"omp"`` -> ``("--acpp-targets=omp",)``).
        arch_flags: ``"module:function"`` turning a list of device architectures into flags, for a compiler
            whose targets are an open list (nvcc's ``-gencode`` per ``TORCH_CUDA_ARCH_LIST`` entry); None when
            ``target_flags`` names every target.
        cannot: what it cannot do, in words (shown by the report; a builder does not ask it to).
        install: how to get it, named in the report when it is not found.
    """

    name: str
    title: str
    variable: str | None
    path_names: tuple[str, ...]
    prefixes: tuple[tuple[str, str], ...] = ()
    default_dirs: tuple[str, ...] = ()
    prefixes_first: bool = False
    finder: str | None = None
    missing_code: str = "compiler_missing"
    version_args: tuple[str, ...] = ("--version",)
    banner: str = ""
    version: str = r"(\d+\.\d+(?:\.\d+)?)"
    compiler_env: tuple[tuple[str, str], ...] = ()
    source_suffixes: tuple[str, ...] = ()
    suffix_flags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    target_flags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    arch_flags: str | None = None
    cannot: tuple[str, ...] = ()
    install: str = ""


@dataclass(frozen=True)
class Found:
    """What [`survey`][anyaccel.op_builder.toolchains.records.survey] learnt of one record.

    Attributes:
        toolchain: the record's name.
        path: the compiler found (None: not found).
        version: the version its banner states ("" when not probed or not matched).
        banner: the first line it printed ("" when it did not run).
        ok: found, ran, and its banner matched the record.
        why_not: when not ``ok``, why (where it looked, or what the compiler printed), and how to install it.
        ran: the compiler started and exited by itself (False: not found, not executable, or killed after the
            probe's timeout).
    """

    toolchain: str
    path: Path | None
    version: str = ""
    banner: str = ""
    ok: bool = False
    why_not: str = ""
    ran: bool = False

    def numbers(self, count: int) -> tuple[int, ...]:
        """The first ``count`` numbers of ``version`` (``"6.2.41133-dd7f"`` -> ``(6, 2)`` for 2), zeros for the
        missing ones (an empty version gives zeros)."""
        found = [int(n) for n in re.findall(r"\d+", self.version)[:count]]
        return tuple(found + [0] * (count - len(found)))


#: ``.sycl`` is torch's routing suffix (its SYCL rules send only those files to the SYCL compiler); the compilers
#: do not know it, so a build through the core's driver says the language.
_SYCL_SUFFIX_FLAGS: Mapping[str, tuple[str, ...]] = {".sycl": ("-x", "c++")}

TOOLCHAINS: dict[str, Toolchain] = {t.name: t for t in (
    Toolchain(
        "host", "host C++ compiler", "CXX", ("c++", "g++", "clang++"),
        finder="anyaccel.op_builder.toolchains.host:find_cxx",
        banner=r"Free Software Foundation|clang version|\bg\+\+|\bc\+\+",
        source_suffixes=(".cpp", ".cc", ".cxx"),
        # the CPU SIMD levels: each level's one macro and its flags (cpu_isa.ISA_LEVELS, the table's one copy)
        target_flags={level.name: tuple(level.compile_args()) for level in ISA_LEVELS.values()},
        cannot=("device code",),
        install="apt-get install g++ (or set CXX)"),
    Toolchain(
        "nvcc", "CUDA (NVIDIA nvcc)", None, ("nvcc",), (("CUDA_HOME", "bin"), ("CUDA_PATH", "bin")),
        ("/usr/local/cuda/bin",), prefixes_first=True, finder="anyaccel.op_builder.toolchains.cuda:find_nvcc",
        banner=r"Cuda compilation tools", version=r"release (\d+\.\d+)",
        source_suffixes=(".cu",),
        arch_flags="anyaccel.op_builder.toolchains.cuda_flags:gencode_flags",
        cannot=("AMD or Intel GPU code",),
        install="install the CUDA toolkit and set CUDA_HOME"),
    # HIP_PLATFORM=amd: hipcc otherwise picks its platform from the machine, and with nvcc on PATH and no AMD GPU
    # (a build host, CI) Debian's hipcc 5.2 chooses nvidia, for its probe as for a compile.
    Toolchain(
        "hipcc", "HIP (AMD hipcc)", "HIPCC", ("hipcc",),
        (("ROCM_HOME", "bin"), ("ROCM_PATH", "bin"), ("HIP_PATH", "bin")), ("/opt/rocm/bin",), prefixes_first=True,
        banner=r"HIP version|AMD clang", version=r"HIP version:\s*(\d+\.\d+[\w.-]*)",
        compiler_env=(("HIP_PLATFORM", "amd"),),
        source_suffixes=(".hip", ".cu"),
        arch_flags="anyaccel.op_builder.toolchains.cuda_flags:rocm_arch_flags",
        cannot=("NVIDIA GPU code without a CUDA platform", "CUDA sources before hipify"),
        install="apt-get install hipcc libamdhip64-dev rocm-device-libs (or set ROCM_PATH)"),
    Toolchain(
        "icpx", "SYCL (Intel oneAPI DPC++ icpx)", "ANYACCEL_SYCL_CXX", ("icpx",),
        (("ONEAPI_ROOT", "compiler/latest/bin"),), ("/opt/intel/oneapi/compiler/latest/bin",),
        missing_code="sycl_compiler_missing",
        banner=r"Intel\(R\) oneAPI DPC\+\+/C\+\+ Compiler|clang version .*intel/llvm",
        version=r"(\d+\.\d+\.\d+)",
        source_suffixes=(".sycl", ".cpp"),
        suffix_flags=_SYCL_SUFFIX_FLAGS,
        # spir64_x86_64: DPC++'s CPU device (the OpenCL CPU runtime), the target of a host-device build
        target_flags={"spir64": ("-fsycl", "-fsycl-targets=spir64"),
                      "spir64_x86_64": ("-fsycl", "-fsycl-targets=spir64_x86_64"),
                      "pvc": ("-fsycl", "-fsycl-targets=spir64_gen", "-Xs", "-device pvc")},
        cannot=("AdaptiveCpp extensions",),
        install="install the oneAPI DPC++/C++ compiler and source setvars.sh (or set ANYACCEL_SYCL_CXX)"),
    Toolchain(
        "acpp", "SYCL (AdaptiveCpp acpp)", "ANYACCEL_SYCL_CXX", ("acpp",), (("ACPP_HOME", "bin"),),
        missing_code="sycl_compiler_missing",
        version_args=("--acpp-version",),
        banner=r"AdaptiveCpp", version=r"AdaptiveCpp version:\s*(\d+\.\d+[\w.+-]*)",
        source_suffixes=(".sycl", ".cpp"),
        suffix_flags=_SYCL_SUFFIX_FLAGS,
        # omp: AdaptiveCpp's OpenMP CPU backend, the target of a host-device build
        target_flags={"omp": ("--acpp-targets=omp",), "generic": ("--acpp-targets=generic",)},
        cannot=("DPC++-only extensions (-fsycl flags)", "Intel GPU ahead-of-time device images",
                "objects that share torch's XPU queue (a DPC++ sycl::queue)"),
        install="build AdaptiveCpp from its source (github.com/AdaptiveCpp/AdaptiveCpp) and put acpp on PATH "
                "(or set ANYACCEL_SYCL_CXX)"),
)}

#: Op-builder backend -> the toolchain records it chooses among, best first.
BACKEND_TOOLCHAINS: dict[str, tuple[str, ...]] = {
    "cpu": ("host",),
    "cuda": ("nvcc", "hipcc"),
    "xpu": ("icpx", "acpp"),
}


def _prefix_dirs(record: Toolchain, env: Mapping[str, str]) -> list[Path]:
    """The directories the record's set prefix variables name, in order."""
    return [Path(env[var]) / rel for var, rel in record.prefixes if env.get(var, "").strip()]


def _generic_locate(record: Toolchain, env: Mapping[str, str]) -> Path | None:
    """``$variable``, else ``path_names`` on ``PATH`` and in the prefixes (in the record's order), else the
    default directories."""
    if record.variable is not None:
        found = find_tool(env, record.variable, (), record.missing_code,
                          f"point {record.variable} at {record.title} or unset it")
        if found is not None:
            return found
    path = [Path(d) for d in env.get("PATH", os.defpath).split(os.pathsep) if d]
    prefixes = _prefix_dirs(record, env)
    dirs = [*prefixes, *path] if record.prefixes_first else [*path, *prefixes]
    for d in [*dirs, *(Path(d) for d in record.default_dirs)]:
        for name in record.path_names:
            hit = shutil.which(name, path=str(d))
            if hit is not None:
                return Path(os.path.abspath(hit))
    return None


def locate(record: Toolchain, env: Mapping[str, str] | None = None) -> Path | None:
    """Where ``record``'s compiler is, by file-system look-ups only (no process: safe on the load path).

    The builders find their compilers through this function, so the report's path is the build's.

    Args:
        record: the toolchain record.
        env: the environment to read the variables and ``PATH`` from; ``os.environ`` when None.

    Returns:
        The compiler's absolute path, or None when nothing is found.

    Raises:
        ToolchainError: the record's variable is set but names nothing executable (``record.missing_code``, from
            `find_tool` or the record's finder): a wrong setting is reported, never silently replaced.
    """
    env = os.environ if env is None else env
    if record.finder is not None:
        from anyaccel.spec import resolve

        found: Path | None = resolve(record.finder)(env)
        return found
    return _generic_locate(record, env)


def install_root(record: Toolchain, compiler: Path, env: Mapping[str, str] | None = None) -> Path:
    """The root of the toolkit ``compiler`` belongs to (what torch calls ``CUDA_HOME`` / ``ROCM_HOME``).

    Args:
        record: the toolchain record.
        compiler: the compiler, from `locate`.
        env: the environment; ``os.environ`` when None.

    Returns:
        The first of the record's prefix variables that is set (``ROCM_HOME``, else ``ROCM_PATH``...), as
        torch reads it; else the directory above the compiler's (``/usr`` for ``/usr/bin/hipcc``).
    """
    env = os.environ if env is None else env
    return next((Path(env[var]) for var, _ in record.prefixes if env.get(var, "").strip()), compiler.parent.parent)


def flags_for(record: Toolchain, targets: Sequence[str]) -> list[str]:
    """The flags that make ``record``'s compiler compile for ``targets``.

    Args:
        record: the toolchain record.
        targets: its targets: names of ``record.target_flags`` (``["omp"]``, a CPU SIMD level), or device
            architectures for a record with ``arch_flags`` (``["9.0", "8.0+PTX"]``, ``["gfx90a"]``).

    Returns:
        The flags, in the order of ``targets``.

    Raises:
        ValueError: a target the record does not know (the message lists those it does), or a malformed or
            empty architecture list (from the record's ``arch_flags`` function).
    """
    if record.arch_flags is not None:
        from anyaccel.spec import resolve

        return list(resolve(record.arch_flags)(targets))
    unknown = [t for t in targets if t not in record.target_flags]
    if unknown:
        raise ValueError(f"{record.title} has no target {unknown[0]!r}; accepted: {sorted(record.target_flags)}")
    return [flag for t in targets for flag in record.target_flags[t]]


def probe(record: Toolchain, path: Path, timeout_s: float = PROBE_TIMEOUT_S) -> Found:
    """Run ``path`` with the record's version arguments (and ``compiler_env``) and check its banner; never raises.

    Args:
        record: the toolchain record.
        path: the compiler, from `locate`.
        timeout_s: seconds before the compiler is killed.

    Returns:
        A `Found`: ``ok`` with the version when it ran and its output matches ``record.banner``; else
        ``why_not`` quoting what it printed.

    Side effects: starts the compiler once. Never call this on the import or load path.
    """
    env = {**os.environ, **dict(record.compiler_env)} if record.compiler_env else None
    answer = probe_version(path, record.version_args, timeout_s, env)
    ran = answer.returncode is not None
    if not answer.ok:
        return Found(record.name, path, banner=answer.first_line, why_not=answer.describe(), ran=ran)
    if not re.search(record.banner, answer.output, re.IGNORECASE):
        return Found(record.name, path, banner=answer.first_line, ran=ran,
                     why_not=f"{path} is not {record.title}: `{answer.command}` printed {answer.first_line[:160]!r}")
    m = re.search(record.version, answer.output)
    return Found(record.name, path, version=m.group(1) if m else "", banner=answer.first_line, ok=True, ran=ran)


def searched(record: Toolchain, env: Mapping[str, str] | None = None) -> str:
    """Where `locate` looked for ``record``'s compiler, in words (for "not found" messages).

    Args:
        record: the toolchain record.
        env: the environment; ``os.environ`` when None.
    """
    env = os.environ if env is None else env
    where = [f"{record.variable} unset"] if record.variable else []
    on_path = [f"no {' or '.join(record.path_names)} on PATH"]
    prefixes = [f"no {' or '.join(record.path_names)} in {Path(env[var]) / rel} ({var})" if env.get(var, "").strip()
                else f"{var} unset" for var, rel in record.prefixes]
    where += [*prefixes, *on_path] if record.prefixes_first else [*on_path, *prefixes]
    where += list(record.default_dirs)
    return ", ".join(where)


def survey(env: Mapping[str, str] | None = None, names: tuple[str, ...] | None = None,
           timeout_s: float = PROBE_TIMEOUT_S) -> list[Found]:
    """Locate and probe every record (or those named): what ``anyaccel report`` prints.

    Args:
        env: the environment; ``os.environ`` when None.
        names: record names, in the order wanted; all of `TOOLCHAINS` when None.
        timeout_s: seconds each probe may take.

    Returns:
        One `Found` per record, in order: the path and version, or why not (where it looked, or what the
        compiler said, and how to install it).

    Raises:
        KeyError: a name that is not a record.

    Side effects: runs each compiler found once with its version arguments.
    """
    env = os.environ if env is None else env
    out = []
    for name in names or tuple(TOOLCHAINS):
        record = TOOLCHAINS[name]
        try:
            path = locate(record, env)
        except ToolchainError as exc:
            out.append(Found(name, None, why_not=str(exc)))
            continue
        if path is None:
            out.append(Found(name, None, why_not=f"not found ({searched(record, env)}); {record.install}"))
            continue
        found = probe(record, path, timeout_s)
        out.append(found if found.ok else Found(name, path, banner=found.banner,
                                                why_not=f"{found.why_not}; {record.install}", ran=found.ran))
    return out


def choose(backend: str, env: Mapping[str, str] | None = None, timeout_s: float = PROBE_TIMEOUT_S) -> Found | None:
    """The first record of ``backend`` (`BACKEND_TOOLCHAINS`) that is found and answers as itself.

    Args:
        backend: an op-builder backend (``"cpu"``, ``"cuda"``, ``"xpu"``).
        env: the environment; ``os.environ`` when None.
        timeout_s: seconds each probe may take.

    Returns:
        Its `Found`, or None when none of the backend's records is usable.

    Raises:
        ValueError: ``backend`` has no records; the message lists the backends that do.

    Side effects: runs the candidates' compilers with their version arguments (build time only).
    """
    if backend not in BACKEND_TOOLCHAINS:
        raise ValueError(f"backend {backend!r} has no toolchain records; accepted: {sorted(BACKEND_TOOLCHAINS)}")
    return next((f for f in survey(env, BACKEND_TOOLCHAINS[backend], timeout_s) if f.ok), None)
