"""Toolchains as data: one record per compiler family, how it is found, how it is probed, what it compiles.

A [`Toolchain`][anyaccel.op_builder.toolchains.records.Toolchain] is a frozen record: the variable that names
the compiler, the names looked up on ``PATH``, the install prefixes searched after them, the command that makes it
say what it is and the banner that proves it, its flags per target, the source suffixes it compiles and what it
cannot do. [`TOOLCHAINS`][anyaccel.op_builder.toolchains.records.TOOLCHAINS] holds the host C++ compiler,
nvcc, hipcc, icpx and acpp; [`BACKEND_TOOLCHAINS`][anyaccel.op_builder.toolchains.records.BACKEND_TOOLCHAINS]
says which records an op-builder backend chooses among, best first.

Two steps, kept apart so the import and load paths start no process:

- [`locate`][anyaccel.op_builder.toolchains.records.locate]: file-system look-ups only (the record's existing
  finder where the builders already have one: ``find_cxx``, ``find_nvcc``, ``find_sycl_compiler``), safe on the
  load path and in the cache key;
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from anyaccel.op_builder.errors import ToolchainError
from anyaccel.op_builder.toolchains.host import find_tool, probe_version

__all__ = ["BACKEND_TOOLCHAINS", "TOOLCHAINS", "Found", "Toolchain", "choose", "locate", "probe", "survey"]

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
            (``("ROCM_PATH", "bin")``), searched after ``PATH``.
        default_dirs: absolute directories searched last (``/opt/rocm/bin``).
        finder: ``"module:function"`` of the finder the builders already use for this compiler, called with the
            environment instead of the generic look-up (so the record and the builders agree); None for the
            generic one.
        version_args: the arguments that make it print its banner.
        banner: a regular expression its version output must match to be this compiler (a g++ named by
            ``ANYACCEL_SYCL_CXX`` runs, but is no SYCL compiler).
        version: a regular expression whose first group is the version in that output.
        source_suffixes: the source file suffixes it compiles.
        target_flags: target -> the flags that compile for it (``"omp"`` -> ``("--acpp-targets=omp",)``).
        cannot: what it cannot do, in words (shown by the report; a builder does not ask it to).
        install: how to get it, named in the report when it is not found.
    """

    name: str
    title: str
    variable: str | None
    path_names: tuple[str, ...]
    prefixes: tuple[tuple[str, str], ...] = ()
    default_dirs: tuple[str, ...] = ()
    finder: str | None = None
    version_args: tuple[str, ...] = ("--version",)
    banner: str = ""
    version: str = r"(\d+\.\d+(?:\.\d+)?)"
    source_suffixes: tuple[str, ...] = ()
    target_flags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
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
    """

    toolchain: str
    path: Path | None
    version: str = ""
    banner: str = ""
    ok: bool = False
    why_not: str = ""


TOOLCHAINS: dict[str, Toolchain] = {t.name: t for t in (
    Toolchain(
        "host", "host C++ compiler", "CXX", ("c++", "g++", "clang++"),
        finder="anyaccel.op_builder.toolchains.host:find_cxx",
        banner=r"Free Software Foundation|clang version|\bg\+\+|\bc\+\+",
        source_suffixes=(".cpp", ".cc", ".cxx"),
        target_flags={"avx512": ("-mavx512f", "-mavx512bw", "-mavx512vl"), "avx2": ("-mavx2", "-mfma"),
                      "neon": (), "portable": ()},
        cannot=("device code",),
        install="apt-get install g++ (or set CXX)"),
    Toolchain(
        "nvcc", "CUDA (NVIDIA nvcc)", None, ("nvcc",), (("CUDA_HOME", "bin"), ("CUDA_PATH", "bin")),
        ("/usr/local/cuda/bin",), finder="anyaccel.op_builder.toolchains.cuda:find_nvcc",
        banner=r"Cuda compilation tools", version=r"release (\d+\.\d+)",
        source_suffixes=(".cu",),
        target_flags={"sm_80": ("-gencode=arch=compute_80,code=sm_80",),
                      "sm_90": ("-gencode=arch=compute_90,code=sm_90",)},
        cannot=("AMD or Intel GPU code",),
        install="install the CUDA toolkit and set CUDA_HOME"),
    Toolchain(
        "hipcc", "HIP (AMD hipcc)", "HIPCC", ("hipcc",), (("ROCM_PATH", "bin"), ("HIP_PATH", "bin")),
        ("/opt/rocm/bin",),
        banner=r"HIP version|AMD clang", version=r"HIP version:\s*(\d+\.\d+[\w.-]*)",
        source_suffixes=(".hip", ".cu"),
        target_flags={"gfx90a": ("--offload-arch=gfx90a",), "gfx942": ("--offload-arch=gfx942",)},
        cannot=("NVIDIA GPU code without a CUDA platform", "CUDA sources before hipify"),
        install="apt-get install hipcc libamdhip64-dev rocm-device-libs (or set ROCM_PATH)"),
    Toolchain(
        "icpx", "SYCL (Intel oneAPI DPC++ icpx)", "ANYACCEL_SYCL_CXX", ("icpx",),
        (("ONEAPI_ROOT", "compiler/latest/bin"),), ("/opt/intel/oneapi/compiler/latest/bin",),
        # the generic look-up, not the SYCL builder's finder: that one falls back to acpp, another record
        banner=r"Intel\(R\) oneAPI DPC\+\+/C\+\+ Compiler|clang version .*intel/llvm",
        version=r"(\d+\.\d+\.\d+)",
        source_suffixes=(".sycl", ".cpp"),
        target_flags={"spir64": ("-fsycl", "-fsycl-targets=spir64"),
                      "pvc": ("-fsycl", "-fsycl-targets=spir64_gen", "-Xs", "-device pvc")},
        cannot=("AdaptiveCpp extensions",),
        install="install the oneAPI DPC++/C++ compiler and source setvars.sh (or set ANYACCEL_SYCL_CXX)"),
    Toolchain(
        "acpp", "SYCL (AdaptiveCpp acpp)", "ANYACCEL_SYCL_CXX", ("acpp",), (("ACPP_HOME", "bin"),),
        version_args=("--acpp-version",),
        banner=r"AdaptiveCpp", version=r"AdaptiveCpp version:\s*(\d+\.\d+[\w.+-]*)",
        source_suffixes=(".sycl", ".cpp"),
        target_flags={"omp": ("--acpp-targets=omp",), "generic": ("--acpp-targets=generic",)},
        cannot=("DPC++-only extensions (-fsycl flags)", "Intel GPU ahead-of-time device images"),
        install="build AdaptiveCpp from its source (github.com/AdaptiveCpp/AdaptiveCpp) and put acpp on PATH "
                "(or set ANYACCEL_SYCL_CXX)"),
)}

#: Op-builder backend -> the toolchain records it chooses among, best first.
BACKEND_TOOLCHAINS: dict[str, tuple[str, ...]] = {
    "cpu": ("host",),
    "cuda": ("nvcc", "hipcc"),
    "xpu": ("icpx", "acpp"),
}


def _generic_locate(record: Toolchain, env: Mapping[str, str]) -> Path | None:
    """``$variable``, else ``path_names`` on ``PATH``, else the prefixes and default directories."""
    if record.variable is not None or record.path_names:
        found = find_tool(env, record.variable or "", record.path_names, "compiler_missing",
                          f"point {record.variable} at {record.title} or unset it")
        if found is not None:
            return found
    dirs = [Path(env[var]) / rel for var, rel in record.prefixes if env.get(var, "").strip()]
    dirs += [Path(d) for d in record.default_dirs]
    for d in dirs:
        for name in record.path_names:
            hit = shutil.which(name, path=str(d))
            if hit is not None:
                return Path(os.path.abspath(hit))
    return None


def locate(record: Toolchain, env: Mapping[str, str] | None = None) -> Path | None:
    """Where ``record``'s compiler is, by file-system look-ups only (no process: safe on the load path).

    Args:
        record: the toolchain record.
        env: the environment to read the variables and ``PATH`` from; ``os.environ`` when None.

    Returns:
        The compiler's absolute path, or None when nothing is found.

    Raises:
        ToolchainError: the record's variable is set but names nothing executable (from `find_tool` or the
            record's finder): a wrong setting is reported, never silently replaced.
    """
    env = os.environ if env is None else env
    if record.finder is not None:
        from anyaccel.spec import resolve

        found: Path | None = resolve(record.finder)(env)
        if found is not None or record.name == "host":
            return found
    return _generic_locate(record, env)


def probe(record: Toolchain, path: Path, timeout_s: float = PROBE_TIMEOUT_S) -> Found:
    """Run ``path`` with the record's version arguments and check its banner; never raises.

    Args:
        record: the toolchain record.
        path: the compiler, from `locate`.
        timeout_s: seconds before the compiler is killed.

    Returns:
        A `Found`: ``ok`` with the version when it ran and its output matches ``record.banner``; else
        ``why_not`` quoting what it printed.

    Side effects: starts the compiler once. Never call this on the import or load path.
    """
    answer = probe_version(path, record.version_args, timeout_s)
    if not answer.ok:
        return Found(record.name, path, banner=answer.first_line, why_not=answer.describe())
    if not re.search(record.banner, answer.output, re.IGNORECASE):
        return Found(record.name, path, banner=answer.first_line,
                     why_not=f"{path} is not {record.title}: `{answer.command}` printed {answer.first_line[:160]!r}")
    m = re.search(record.version, answer.output)
    return Found(record.name, path, version=m.group(1) if m else "", banner=answer.first_line, ok=True)


def _searched(record: Toolchain, env: Mapping[str, str]) -> str:
    """Where `locate` looked for ``record``, in words."""
    where = [f"{record.variable} unset"] if record.variable else []
    where.append(f"no {' or '.join(record.path_names)} on PATH")
    where += [f"{var}/{rel}" if env.get(var, "").strip() else f"{var} unset" for var, rel in record.prefixes]
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
            out.append(Found(name, None, why_not=f"not found ({_searched(record, env)}); {record.install}"))
            continue
        found = probe(record, path, timeout_s)
        out.append(found if found.ok else Found(name, path, banner=found.banner,
                                                why_not=f"{found.why_not}; {record.install}"))
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
