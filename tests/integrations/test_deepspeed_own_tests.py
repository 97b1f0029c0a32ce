"""DeepSpeed's own unit tests (accelerator and CPU optimizers) against anyaccel, through
``scripts/run_deepspeed_tests.py``. Runs when ``ANYACCEL_DEEPSPEED_CHECKOUT`` names a DeepSpeed checkout (or its
``tests/`` folder; we use commit edaa722 with DeepSpeed 0.19.8 installed); skipped otherwise, as on CI.

``ANYACCEL_DEEPSPEED_BASELINE_PASSED`` is the number DeepSpeed's own CPU accelerator passes on the same tests
(``scripts/run_deepspeed_tests.py CHECKOUT --accelerator deepspeed``; 52 on our 2-core machine).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.integrations.ds_helpers import REPO, base_env, needs_deepspeed, run_python

CHECKOUT_ENV = "ANYACCEL_DEEPSPEED_CHECKOUT"
BASELINE_ENV = "ANYACCEL_DEEPSPEED_BASELINE_PASSED"
pytestmark = [
    needs_deepspeed,
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get(CHECKOUT_ENV), reason=f"set {CHECKOUT_ENV} to a DeepSpeed checkout"),
]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Counts of one run of the script with anyaccel installed."""
    scratch = tmp_path_factory.mktemp("deepspeed-tests")
    out = scratch / "results.json"
    proc = run_python([str(REPO / "scripts" / "run_deepspeed_tests.py"), os.environ[CHECKOUT_ENV],
                       "--accelerator", "anyaccel", "--scratch", str(scratch / "run"), "--json", str(out)],
                      base_env(), timeout=5400)
    sys.stdout.write(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (result,) = json.loads(out.read_text())
    result["log_text"] = Path(result["log"]).read_text()
    return result


def test_deepspeeds_accelerator_tests_pass_on_anyaccel(results):
    assert "anyaccel" in results["log_text"]  # the plug-in's header: DeepSpeed used anyaccel's accelerator
    failed = [t for t in results["failures"] if "test_accelerator" in t]
    assert failed == []
    assert results["passed"] > 0


def test_at_least_as_many_pass_as_with_deepspeeds_own_accelerator_and_deepspeed_built_nothing(results):
    baseline = int(os.environ.get(BASELINE_ENV, "52"))
    assert results["passed"] >= baseline, f"{results['passed']} passed with anyaccel, {baseline} with DeepSpeed's"
    assert results["deepspeed_built"] == [], "DeepSpeed JIT-built ops itself"
