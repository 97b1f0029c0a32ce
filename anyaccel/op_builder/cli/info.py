"""Toolchain facts for ``anyaccel report``: compilers, ninja, nvcc, torch, Python, CPU ISA and cache root.

Unlike the load path, this runs ``--version`` of each tool and may call py-cpuinfo once (about 1.1 s).
"""

from __future__ import annotations

from typing import Any

from anyaccel import settings
from anyaccel.op_builder.core.cache import default_cache_root
from anyaccel.op_builder.errors import OpBuilderError
from anyaccel.op_builder.toolchains import cpu_isa
from anyaccel.op_builder.toolchains import cuda as cuda_toolchain
from anyaccel.op_builder.toolchains import host as toolchain


def describe() -> dict[str, Any]:
    """Return the toolchain facts as a JSON-serialisable dict.

    Keys: ``cxx`` {path, version} (path None when missing, or an "error"), ``ninja`` {path, version},
    ``nvcc`` {path, version} (None values without a toolkit), ``torch`` {version, cuda, cxx11_abi},
    ``python_tag``, ``cpu_isa`` {chosen or error, supported, torch_capability, cpuinfo_flags_checked},
    ``build_jobs``, ``cache_root``.

    Side effects: starts ``--version`` processes; calls py-cpuinfo at most once per process.
    """
    import torch

    facts: dict[str, Any] = {}
    try:
        cxx = toolchain.find_cxx()
        facts["cxx"] = {"path": str(cxx) if cxx else None, "version": toolchain.tool_version(cxx) if cxx else None}
    except OpBuilderError as exc:
        facts["cxx"] = {"path": None, "version": None, "error": str(exc)}
    ninja = toolchain.find_ninja()
    facts["ninja"] = {"path": str(ninja) if ninja else None,
                      "version": toolchain.tool_version(ninja) if ninja else None}
    nvcc = cuda_toolchain.find_nvcc()
    facts["nvcc"] = {"path": str(nvcc) if nvcc else None, "version": None}
    if nvcc:
        probe = toolchain.probe_version(nvcc)
        try:
            if not probe.ok:
                raise ValueError(probe.describe())
            major, minor = cuda_toolchain.parse_nvcc_version(probe.output)
            facts["nvcc"]["version"] = f"{major}.{minor}"
        except ValueError as exc:
            facts["nvcc"]["version"] = f"unknown ({exc})"
    facts["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                      "cxx11_abi": bool(torch.compiled_with_cxx11_abi())}
    facts["python_tag"] = toolchain.python_tag()
    isa: dict[str, Any] = {"torch_capability": cpu_isa.torch_capability(),
                           "supported": list(cpu_isa.supported_levels()), "env": settings.CPU_ISA.raw()}
    try:
        isa["chosen"] = cpu_isa.resolve_isa().name
    except OpBuilderError as exc:
        isa["error"] = str(exc)
    simd_prefixes = ("avx", "fma", "f16c", "sve", "asimd")
    isa["cpuinfo_flags"] = sorted(f for f in cpu_isa.cpuinfo_flags() if f.startswith(simd_prefixes))
    facts["cpu_isa"] = isa
    try:
        facts["build_jobs"] = toolchain.build_jobs()
    except ValueError as exc:
        facts["build_jobs"] = str(exc)
    facts["cache_root"] = str(default_cache_root())
    return facts

