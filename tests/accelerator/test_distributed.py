"""A real two-process torch.distributed job through ``communication_backend_name()``: gloo on CPU, nccl on GPUs."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_job(accelerator: str, tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    port = str(_free_port())
    pythonpath = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")
    env = dict(os.environ, ANYACCEL_ACCELERATOR=accelerator, PYTHONPATH=pythonpath)
    outs = [tmp_path / f"rank{r}.pt" for r in range(WORLD)]
    procs = [
        subprocess.Popen([sys.executable, "-m", "tests.accelerator.dist_worker", str(r), str(WORLD), port,
                          str(outs[r]), str(seed)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for r in range(WORLD)
    ]
    for p in procs:
        output, _ = p.communicate(timeout=240)
        assert p.returncode == 0, output.decode(errors="replace")[-3000:]
    expected = sum(torch.randn(1000, generator=torch.Generator().manual_seed(seed + r)) for r in range(WORLD))
    expected_backend = "nccl" if accelerator == "cuda" else "gloo"
    for r, out in enumerate(outs):
        result = torch.load(out)
        assert result["backend"] == expected_backend
        assert result["device"] == ("cpu" if accelerator == "cpu" else f"cuda:{r}")
        torch.testing.assert_close(result["sum"], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_two_process_allreduce_gloo_on_cpu(tmp_path):
    _run_job("cpu", tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_two_process_allreduce_nccl_one_gpu_each(tmp_path):
    _run_job("cuda", tmp_path)
