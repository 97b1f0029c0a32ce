"""Helpers of the DeepSpeed integration tests: DeepSpeed present or skip, subprocess runners.

Every test that imports DeepSpeed does so in a subprocess: wiring changes process-wide DeepSpeed state (and
registers a virtual subclass with DeepSpeed's ABC), which must not leak into other tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TRAIN = str(HERE / "ds_train.py")
STEPS = 6
#: Relative tolerance of loss comparisons with DeepSpeed's own kernels (justified in
#: ``test_deepspeed_training.py``'s module doc: ~1e-7 seen, a wrong update rule moves losses by >= 1e-4).
LOSS_RTOL = 1e-5

#: variables of the outer environment that would change what the subprocesses do
_SCRUB = ("ANYACCEL_DEEPSPEED", "ANYACCEL_ACCELERATOR", "DS_ACCELERATOR", "ANYACCEL_STRICT",
          "ANYACCEL_DEEPSPEED_ALLOW_UNTESTED", "DS_PIN_MEMORY_BACKEND",
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


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for ``MASTER_PORT``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def train(accelerator: str, stage: int, world_size: int, env_extra: dict[str, str], optimizer: str = "AdamW",
          offload: str = "cpu") -> list[dict]:
    """Run ``ds_train.py`` on ``world_size`` local ranks (gloo on CPU, NCCL on GPUs: DeepSpeed's choice for the
    accelerator); return each rank's JSON facts, rank order."""
    port = str(free_port())
    procs = []
    for rank in range(world_size):
        env = base_env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                       LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **env_extra)
        procs.append(subprocess.Popen([sys.executable, TRAIN, accelerator, str(stage), str(STEPS), optimizer,
                                       offload], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=1800)
        completed = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        assert proc.returncode == 0, f"{accelerator} rank failed:\n{err[-6000:]}"
        results.append(last_json(completed))
    return sorted(results, key=lambda r: r["rank"])


def compare_losses(label: str, reference: list[dict], ours: list[dict]) -> float:
    """Assert ours equal the reference losses within LOSS_RTOL; print both; return the largest relative diff."""
    largest = 0.0
    for theirs, mine in zip(reference, ours, strict=True):
        rel = max(abs(a - b) / abs(a) for a, b in zip(theirs["losses"], mine["losses"], strict=True))
        largest = max(largest, rel)
        print(f"\n{label} rank {mine['rank']}: anyaccel  {mine['losses']}\n{'':>{len(label) + 8}}deepspeed "
              f"{theirs['losses']}\n{'':>{len(label) + 8}}max relative |diff| {rel:.3g}")
        assert mine["losses"] == pytest.approx(theirs["losses"], rel=LOSS_RTOL, abs=0)
    return largest


def assert_anyaccel_ran_everything(results: list[dict], extensions: Path, optimizer: str, op: str,
                                   accelerator: str = "CPU_Accelerator") -> None:
    """Every rank ran on anyaccel's accelerator (DeepSpeed's view of it) with ``optimizer`` over anyaccel's
    ``op`` module, and DeepSpeed built nothing into ``extensions`` (its ``TORCH_EXTENSIONS_DIR``)."""
    for result in results:
        assert result["accelerator"] == f"anyaccel.integrations.deepspeed.view.{accelerator}"
        assert result["optimizer"] == optimizer
        assert f"OpModule(op='{op}'" in result["kernel_module"], result["kernel_module"]
        assert len(result["losses"]) == STEPS
    assert sorted(p.name for p in extensions.iterdir()) == [], "DeepSpeed JIT-built ops itself"
