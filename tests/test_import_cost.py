"""``import anyaccel`` + ``get_accelerator()`` spawns no process, runs no compiler, imports no absent vendor
package and no compiler machinery, and adds little over ``import torch``.

The measured overhead is printed (``pytest -s``); only a loose ceiling is asserted, never a timing ratio.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, sys, time
events = []
def hook(event, args):
    if event in ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.system"):
        events.append(event)
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
sys.addaudithook(hook)  # after torch: what torch's own import spawns (2.15 runs ldconfig) is not anyaccel's
baseline = set(sys.modules)
import anyaccel
acc = anyaccel.get_accelerator()
t2 = time.perf_counter()
print(json.dumps({"events": events, "new_modules": sorted(set(sys.modules) - baseline),
                  "torch_s": t1 - t0, "anyaccel_s": t2 - t1, "name": acc._name}))
"""

FORBIDDEN_PREFIXES = (
    "torch.utils.cpp_extension", "torch._dynamo", "torch._inductor", "setuptools", "distutils",
    "torch_npu", "intel_extension_for_pytorch", "oneccl_bindings_for_pytorch", "deepspeed",
    "anyaccel.op_builder", "anyaccel.ops", "anyaccel.spec", "cpuinfo", "triton",
)


def _probe() -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for var in ("ANYACCEL_ACCELERATOR", "DS_ACCELERATOR", "ANYACCEL_STRICT"):
        env.pop(var, None)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_and_selection_are_cheap():
    runs = [_probe() for _ in range(3)]
    first = runs[0]
    assert first["events"] == [], f"process spawned: {first['events']}"
    bad = [m for m in first["new_modules"] if m.startswith(FORBIDDEN_PREFIXES)]
    assert bad == [], f"heavy or vendor modules imported: {bad}"
    overhead = statistics.median(r["anyaccel_s"] for r in runs)
    torch_s = statistics.median(r["torch_s"] for r in runs)
    print(f"\nimport torch {torch_s * 1000:.0f} ms; import anyaccel + get_accelerator() adds "
          f"{overhead * 1000:.1f} ms (median of {len(runs)}), chose {first['name']}")
    assert overhead < 2.0  # very loose ceiling; the design aim is < 50 ms on an idle machine
