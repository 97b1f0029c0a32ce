"""Helpers of the DeepSpeed integration tests: DeepSpeed present or skip, subprocess runners.

Every test that imports DeepSpeed does so in a subprocess: wiring changes process-wide DeepSpeed state (and
registers a virtual subclass with DeepSpeed's ABC), which must not leak into other tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

#: variables of the outer environment that would change what the subprocesses do
_SCRUB = ("ANYACCEL_DEEPSPEED", "ANYACCEL_ACCELERATOR", "DS_ACCELERATOR", "ANYACCEL_STRICT",
          "ANYACCEL_DEEPSPEED_ABI_FALLBACK", "ANYACCEL_DEEPSPEED_ALLOW_UNTESTED", "DS_PIN_MEMORY_BACKEND",
          "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_SIZE", "MASTER_ADDR", "MASTER_PORT")


def deepspeed_installed() -> bool:
    """DeepSpeed is a test-only dependency: present here or the test skips."""
    return importlib.util.find_spec("deepspeed") is not None


needs_deepspeed = pytest.mark.skipif(not deepspeed_installed(), reason="DeepSpeed is not installed (test-only)")


def base_env(extra_path: os.PathLike | str | None = None, **overrides: str) -> dict[str, str]:
    """The environment for a subprocess: this repository (and ``extra_path``) first on ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    paths = [str(extra_path)] if extra_path else []
    paths += [str(REPO), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(overrides)
    return env


def run_python(args: list[str], env: dict[str, str], timeout: int = 600, cwd: Path | None = None
               ) -> subprocess.CompletedProcess:
    """Run ``python args...`` and return the completed process (text output)."""
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd or REPO, capture_output=True, text=True,
                          timeout=timeout)


def last_json(proc: subprocess.CompletedProcess) -> Any:
    """The JSON object on the last stdout line that parses, or fail with the process output."""
    for line in reversed(proc.stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    raise AssertionError(f"no JSON in output (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
