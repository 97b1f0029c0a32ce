"""DeepSpeed's own unit tests against anyaccel, through ``scripts/run_deepspeed_tests.py``'s fast slice (the
accelerator, CPU optimizer, fp16 and pinned-memory tests) in both modes: DeepSpeed alone and with anyaccel.

Runs when ``ANYACCEL_DEEPSPEED_CHECKOUT`` names a DeepSpeed checkout (or its ``tests/`` folder; we use commit
edaa722 with DeepSpeed 0.19.8 installed); skipped otherwise, as on CI, which has no DeepSpeed checkout. The
whole CPU CI selection takes hours on two cores; docs/deepspeed.md has its table.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.integrations.ds_helpers import REPO, base_env, needs_deepspeed, run_python

CHECKOUT_ENV = "ANYACCEL_DEEPSPEED_CHECKOUT"
pytestmark = [
    needs_deepspeed,
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get(CHECKOUT_ENV), reason=f"set {CHECKOUT_ENV} to a DeepSpeed checkout"),
]

#: Tests that pass with DeepSpeed alone and skip with anyaccel, and why a DeepSpeed user would accept it: they
#: need DeepSpeed's native pinned-memory allocator (``PinMemoryBuilder``), which anyaccel does not offer yet, and
#: skip as DeepSpeed's tests intend when that op cannot load (docs/deepspeed.md "What stays unimplemented").
NATIVE_PIN_MEMORY = (
    "unit/v1/accelerator/test_accelerator.py::test_pin_memory_native_backend",
    "unit/v1/accelerator/test_accelerator.py::test_is_pinned_handles_storageless_tensors",
    "unit/v1/pin_memory/test_pin_memory.py::",
    "unit/v1/pin_memory/test_pin_memory_op.py::",
    "unit/v1/pin_memory/test_destroy_unpin.py::TestDestroyUnpinsNativeBuffers::test_native_",
)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One run of the fast slice in both modes (each in its own network namespace where possible)."""
    scratch = tmp_path_factory.mktemp("deepspeed-tests")
    out = scratch / "results.json"
    proc = run_python([str(REPO / "scripts" / "run_deepspeed_tests.py"), os.environ[CHECKOUT_ENV],
                       "--selection", "fast", "--scratch", str(scratch / "run"), "--json", str(out)],
                      base_env(), timeout=5400)
    sys.stdout.write(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    result["anyaccel_log"] = "".join(Path(log).read_text() for log in result["modes"]["anyaccel"]["logs"])
    return result


def test_every_test_that_passes_with_deepspeed_alone_passes_with_anyaccel(results):
    assert "uses anyaccel's" in results["anyaccel_log"]  # the plug-in's header: DeepSpeed used anyaccel
    assert results["modes"]["anyaccel"]["counts"]["passed"] > 0
    worse = [(d["test"], d["anyaccel"]["outcome"], d["anyaccel"]["message"]) for d in results["differences"]
             if d["deepspeed"]["outcome"] == "passed" and d["anyaccel"]["outcome"] != "passed"
             and not (d["anyaccel"]["outcome"] == "skipped" and d["test"].startswith(NATIVE_PIN_MEMORY))]
    assert worse == []


def test_deepspeed_built_nothing_with_anyaccel(results):
    assert results["modes"]["anyaccel"]["deepspeed_built"] == [], "DeepSpeed JIT-built ops itself"
