"""The CPU optimizer kernels compiled for aarch64 (NEON, SVE) and run under qemu-aarch64, against x86.

No aarch64 torch is needed: the kernel units (``anyaccel/csrc/<family>/cpu_<family>_kernel.cpp``) work on raw
pointers, so ``kernel_driver.cpp`` includes one, fills buffers from a fixed pseudo-random sequence and prints
what every segment function of the family wrote (hex for small arrays, a 64-bit FNV-1a hash of the bytes for
large ones; the driver's header says which). The driver is compiled with the cross compiler (``-static``) for
the portable, ``neon`` and ``sve`` levels, with exactly the macro and flags of
``anyaccel.op_builder.toolchains.cpu_isa.ISA_LEVELS`` plus the builder's ``-O3 -std=c++17`` (ISO C++: no FMA
contraction the sources do not write), and natively for x86 (the portable level: the reference, and the best
AVX level of this CPU). The aarch64 builds run under ``qemu-aarch64 -cpu max,sve=off`` (NEON, portable) and
``-cpu max,sveN=on`` for SVE vector lengths of 128, 256 and 512 bits (qemu 7.2's user mode goes no higher).

What must agree, and why:

- Adam (step and rollback), Lion, Adagrad, and LAMB's pass 2 and its m and v: **bit for bit**, every dtype
  combination. Each lane does the same IEEE operations in the same order on every level (add, sub, mul,
  correctly rounded div and sqrt, fused multiply-add), conversions to bf16 and fp16 round to nearest even
  everywhere, and the tails (TailBuffer on fixed widths, the svwhilelt predicate on SVE) run the same code.
- LAMB's norms (sum of p^2 and of u^2 over a tensor, in double): **within 256 * 2^-24 relative**. Each level
  sums fp32 lane accumulators of at most 256 vectors into double, so the grouping follows the vector width; the
  bound is the usual n * u of a sum of n = 256 non-negative fp32 terms. The test feeds pass 2 a fixed trust
  ratio so that its outputs are compared bit for bit rather than through the norms.

Sizes 1, 7, 33, 257 and 1000003 are not multiples of any vector length; 257 and 1000003 also run as two pieces
split at an offset that is not a multiple of one (as a thread's range can start anywhere in a tensor). Every
array has a guard zone after it that no kernel may write.

Coverage: the kernel units (all of their math, loads, stores, conversions and tails) are what runs; the torch
glue of the registration units (validation, the dtype dispatch by tensor, the stable-ABI wrapper) and the
threading over torch's pool do not (they hold no ISA-specific code, and run in tests/ops on x86).
"""

from __future__ import annotations

import concurrent.futures
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from anyaccel.op_builder.toolchains.cpu_isa import ISA_LEVELS, supported_levels
from anyaccel.op_builder.toolchains.schema import DTYPES_HEADER_NAME, generate_dtypes
from anyaccel.spec import op_spec

CROSS_CXX = "aarch64-linux-gnu-g++"
QEMU = "qemu-aarch64"
HOST_CXX = "g++"
INSTALL = "apt-get install -y --no-install-recommends qemu-user g++-aarch64-linux-gnu"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which(CROSS_CXX) and shutil.which(QEMU) and shutil.which(HOST_CXX)),
        reason=f"needs {CROSS_CXX}, {QEMU} and {HOST_CXX} on PATH (Debian/Ubuntu: {INSTALL})"),
]

REPO = Path(__file__).resolve().parents[2]
CSRC = REPO / "anyaccel" / "csrc"
DRIVER = Path(__file__).resolve().parent / "kernel_driver.cpp"
FAMILIES = ("adam", "lion", "adagrad", "lamb")
# SIZE[:SPLIT] arguments of the driver (see the module docstring).
SIZES = ("1", "7", "33", "257:65", "1000003:517")
BASE_FLAGS = ("-O3", "-std=c++17")
# Relative bound on LAMB's norms between levels: n * 2^-24 for fp32 partial sums of n = 256 terms.
NORM_RTOL = 256 * 2.0**-24


@dataclass(frozen=True)
class Run:
    """One way of running a family's driver: the ISA level it is built for and how it is started."""

    label: str
    level: str
    cross: bool  # built with the aarch64 cross compiler and run under qemu
    qemu_cpu: str = ""
    width: int = 1  # fp32 lanes per vector the driver must report


def _x86_best() -> str:
    """The best AVX level of this CPU, or ``portable`` on a host that is not x86."""
    if platform.machine() not in ("x86_64", "AMD64", "amd64"):
        return "portable"
    return supported_levels(machine=platform.machine())[0]


X86_BEST = _x86_best()
REFERENCE = Run("x86-portable", "portable", cross=False)
RUNS = (
    Run("aarch64-portable", "portable", cross=True, qemu_cpu="max,sve=off"),
    Run("neon", "neon", cross=True, qemu_cpu="max,sve=off", width=4),
    Run("sve128", "sve", cross=True, qemu_cpu="max,sve128=on", width=4),
    Run("sve256", "sve", cross=True, qemu_cpu="max,sve256=on", width=8),
    Run("sve512", "sve", cross=True, qemu_cpu="max,sve512=on", width=16),
) + ((Run(f"x86-{X86_BEST}", X86_BEST, cross=False, width={"avx512": 16, "avx2": 8}[X86_BEST]),)
     if X86_BEST != "portable" else ())


def _compile(family: str, level: str, cross: bool, out_dir: Path) -> Path:
    include = out_dir / family
    include.mkdir(parents=True, exist_ok=True)
    spec = op_spec(family)
    build = next(b for b in spec.builds if b.name == f"cpu_{family}")
    (include / DTYPES_HEADER_NAME).write_text(generate_dtypes(spec, build))
    import torch.utils.cpp_extension as cpp_extension

    torch_include = cpp_extension.include_paths()[0]  # torch/headeronly: the BFloat16/Half types
    exe = out_dir / f"{family}-{'aarch64' if cross else 'x86'}-{level}"
    cmd = [CROSS_CXX if cross else HOST_CXX, *BASE_FLAGS, *ISA_LEVELS[level].compile_args(),
           f"-DDRIVER_FAMILY_{family.upper()}", "-I", str(CSRC), "-I", str(CSRC / "includes"), "-I", str(include),
           "-isystem", torch_include, str(DRIVER), "-o", str(exe)]
    if cross:
        cmd.insert(1, "-static")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr[-4000:]}"
    return exe


def _run_output(exe: Path, qemu_cpu: str) -> str:
    cmd = ([QEMU, "-cpu", qemu_cpu] if qemu_cpu else []) + [str(exe), *SIZES]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited with {proc.returncode}\n{proc.stderr[-2000:]}"
    return proc.stdout


def _parse(text: str) -> tuple[str, dict[str, str]]:
    lines = text.splitlines()
    results = {}
    for line in lines[1:]:
        key, _, value = line.rpartition(" ")
        assert key not in results, f"duplicate result {key!r}"
        results[key] = value
    return lines[0], results


Outputs = dict[tuple[str, str], tuple[str, dict[str, str]]]


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, bool], Path]:
    """Every (family, level, cross) build the runs need, compiled two at a time (CI has two cores)."""
    out_dir = tmp_path_factory.mktemp("arm_kernels")
    wanted = sorted({(f, r.level, r.cross) for f in FAMILIES for r in (REFERENCE, *RUNS)})
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {key: pool.submit(_compile, *key, out_dir) for key in wanted}
        return {key: fut.result() for key, fut in futures.items()}


@pytest.fixture(scope="module")
def outputs(binaries: dict[tuple[str, str, bool], Path]) -> Outputs:
    """The parsed output of every (family, run label), the runs two at a time."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {(f, r.label): pool.submit(_run_output, binaries[(f, r.level, r.cross)], r.qemu_cpu)
                   for f in FAMILIES for r in (REFERENCE, *RUNS)}
        return {key: _parse(fut.result()) for key, fut in futures.items()}


@pytest.mark.parametrize("run", RUNS, ids=[r.label for r in RUNS])
@pytest.mark.parametrize("family", FAMILIES)
def test_kernels_match_the_x86_portable_reference(outputs: Outputs, family: str, run: Run) -> None:
    """Every output of every dtype combination and size equals the x86 portable build's bit for bit; LAMB's
    norms agree within NORM_RTOL (module docstring: why)."""
    header, got = outputs[(family, run.label)]
    _, want = outputs[(family, REFERENCE.label)]
    assert header == f"isa {run.level} width {run.width}"  # the level and vector length really in use
    overwritten = [k for k, v in got.items() if "GUARD-OVERWRITTEN" in k + v]
    assert not overwritten, f"{run.label} wrote past the end of: {overwritten[:5]}"
    assert got.keys() == want.keys()
    assert len(want) > 9 * len(SIZES)  # every dtype combination printed something for every size
    mismatches = []
    for key, expected in want.items():
        if " norm " in key:
            a, b = float.fromhex(got[key]), float.fromhex(expected)
            if abs(a - b) > NORM_RTOL * abs(b):
                mismatches.append(f"{key}: {a!r} vs {b!r}")
        elif got[key] != expected:
            mismatches.append(f"{key}: {got[key][:80]} vs {expected[:80]}")
    assert not mismatches, f"{run.label} differs from {REFERENCE.label} in {len(mismatches)} results:\n" + "\n".join(
        mismatches[:20])


def test_the_sve_build_really_uses_sve(binaries: dict[tuple[str, str, bool], Path]) -> None:
    """The SVE build dies of an illegal instruction on a CPU without SVE, so the SVE runs above are not
    running NEON or scalar code by mistake."""
    import resource

    exe = binaries[("adam", "sve", True)]
    proc = subprocess.run([QEMU, "-cpu", "max,sve=off", str(exe), "7"], capture_output=True, text=True, timeout=60,
                          cwd=exe.parent, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
    assert proc.returncode != 0
    assert "Illegal instruction" in proc.stderr or proc.returncode in (-4, 128 + 4)
