"""Every Triton kernel of the ops compiled for an AMD GPU (gfx942, 64-lane wavefronts) by Triton's own AMD backend,
to an hsaco code object, with no GPU.

`amd_capture.py` (run in a subprocess: it installs a Triton driver for the AMD target) calls every model op
(forward and backward, fp32/bf16/fp16, row and inner-dimension reductions, with and without weights) and the
Triton optimizers (Adam, Lion, LAMB; fp32 and bf16, with and without bf16 model copies) on CPU tensors; each launch
goes through Triton's own ``JITFunction.run``, so every kernel is compiled with the specialization a launch on the
GPU would give it (the generated pointwise kernels included), and nothing is launched.

Coverage is checked from the code: every function decorated with ``@triton.jit`` under ``anyaccel/ops`` must be
a compiled kernel or be called by one (a helper is inlined into its caller), so a new kernel that the capture does
not reach fails `test_every_triton_kernel_of_the_ops_is_compiled`.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
OPS = REPO / "anyaccel" / "ops"
CAPTURE = Path(__file__).resolve().parent / "amd_capture.py"
ARCH = "gfx942"


def _has_amd_backend() -> bool:
    if importlib.util.find_spec("triton") is None:
        return False
    from triton.backends import backends

    return "amd" in backends


pytestmark = [
    pytest.mark.rocm_toolchain,
    pytest.mark.slow,
    pytest.mark.skipif(not _has_amd_backend(),
                       reason="needs Triton with its AMD backend (the x86-64 Linux triton wheel: pip install -e "
                              "'.[test]'; the other rocm_toolchain tools: bash scripts/install_toolchains.sh)"),
]


def jit_functions(root: Path) -> list[tuple[str, str]]:
    """Every ``@triton.jit`` function under ``root``, as (file, function name), found by parsing the sources
    (nested definitions included)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                    ast.unparse(d.func if isinstance(d, ast.Call) else d) in ("triton.jit", "jit")
                    for d in node.decorator_list):
                found.append((str(path), node.name))
    return found


def uncovered(functions: list[tuple[str, str]], records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The functions that are neither a compiled kernel nor called (``name(``) in a compiled kernel's source."""
    compiled = {r["name"] for r in records}
    sources = "\n".join(r["src"] for r in records)
    return [(f, name) for f, name in functions
            if name not in compiled and not re.search(rf"\b{re.escape(name)}\s*\(", sources)]


@pytest.fixture(scope="module")
def records() -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, str(CAPTURE), ARCH], capture_output=True, text=True, timeout=1800,
                          env=env, check=False)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    calls = [r["call_error"] for r in lines if "call_error" in r]
    assert done.returncode == 0 and not calls, f"capture failed ({done.returncode}): {calls}\n{done.stderr[-4000:]}"
    return lines


def test_every_launch_compiles_to_an_amd_code_object(records):
    failed = [f"{r['module']}.{r['name']} {r['signature']}: {r['error']}" for r in records if not r["ok"]]
    assert not failed, "\n".join(failed)
    assert all(r["elf"] and r["hsaco_bytes"] > 0 for r in records)
    # each model-op kernel was compiled for fp32, bf16 and fp16 tensors (the capture calls every op in the three)
    model = {r["name"] for r in records if r["module"].startswith("anyaccel.ops.nn.")}
    assert model
    for name in model:
        pointers = {t for r in records if r["name"] == name for t in r["signature"].values() if t.startswith("*")}
        assert {"*fp32", "*bf16", "*fp16"} <= pointers, (name, pointers)


def test_every_triton_kernel_of_the_ops_is_compiled(records):
    functions = jit_functions(OPS)
    names = {name for _, name in functions}
    assert {"_adam_kernel", "_lion_kernel", "_lamb_update_kernel", "_softmax_fwd_kernel", "_rope_qk_kernel",
            "_sum_partials_kernel", "_swiglu"} <= names  # the enumeration sees module kernels and pointwise bodies
    assert uncovered(functions, records) == []


def test_the_coverage_check_reports_a_kernel_nobody_launches(tmp_path, records):
    module = tmp_path / "new_family" / "triton.py"
    module.parent.mkdir(parents=True)
    module.write_text("import triton\n\n\n@triton.jit\ndef _brand_new_kernel(x):\n    pass\n\n\n"
                      "def factory():\n    @triton.jit\n    def _nested_kernel(y):\n        pass\n")
    functions = jit_functions(tmp_path)
    assert [n for _, n in functions] == ["_brand_new_kernel", "_nested_kernel"]
    assert uncovered(functions, records) == functions
