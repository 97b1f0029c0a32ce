"""``examples/train_ddp.py`` trains for real: two processes under torchrun (gloo on CPU; NCCL on two GPUs).

The example prints one ``{"summary": ...}`` JSON line per rank; the tests check that the loss averaged over
the ranks falls, that both ranks saw the same losses and ended with the same parameters (DDP kept them in
sync), and which device and backend each rank used. Nothing here sleeps or times anything; the GPU test
prints the step time and throughput the example measured.

GPU test (two CUDA GPUs): ``python -m pytest -m gpu tests/examples/test_train_ddp.py -s``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_ddp.py"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "TORCHELASTIC", "OMPI_", "PMI_",
                                "SLURM_", "MV2_", "CROSS_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _summaries(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    decoder, rows, start = json.JSONDecoder(), [], proc.stdout.find('{"summary"')
    while start >= 0:  # each rank writes its line at once, but tolerate lines run together
        row, end = decoder.raw_decode(proc.stdout, start)
        rows.append(row["summary"])
        start = proc.stdout.find('{"summary"', end)
    return sorted(rows, key=lambda row: row["rank"])


def _torchrun(nproc: int, env: dict[str, str], *args: str, timeout: int = 300) -> list[dict[str, Any]]:
    # --standalone: a private rendezvous on a free port, so concurrent runs on one machine do not collide
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               str(EXAMPLE), *args]
    return _summaries(subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout))


def _check_training(rows: list[dict[str, Any]], world: int) -> None:
    assert [row["rank"] for row in rows] == list(range(world))
    losses = rows[0]["losses"]
    head, tail = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert tail < 0.5 * head, f"loss did not fall: first steps {losses[:5]}, last steps {losses[-5:]}"
    for row in rows[1:]:
        assert row["losses"] == losses  # the all-reduced loss is the same number on every rank
        assert row["checksum"] == pytest.approx(rows[0]["checksum"], rel=1e-6, abs=1e-6)  # parameters in sync
    assert all(row["world_size"] == world for row in rows)


def _print_curve(rows: list[dict[str, Any]]) -> None:
    losses = rows[0]["losses"]
    print("\nloss (mean over ranks):", " ".join(f"{v:.4f}" for v in losses[:: max(1, len(losses) // 8)]),
          f"... {losses[-1]:.4f}")


@pytest.mark.slow
def test_two_processes_under_torchrun_on_cpu() -> None:
    rows = _torchrun(2, _env(ANYACCEL_ACCELERATOR="cpu"))
    _check_training(rows, 2)
    assert {(row["device"], row["backend"], row["source"]) for row in rows} == {("cpu", "gloo", "torchrun")}
    _print_curve(rows)


@pytest.mark.slow
def test_one_process_without_a_launcher() -> None:
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "30"], env=_env(ANYACCEL_ACCELERATOR="cpu"),
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    rows = _summaries(proc)
    _check_training(rows, 1)
    assert (rows[0]["source"], rows[0]["backend"]) == ("single", "gloo")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_two_gpus_with_nccl() -> None:
    sizes = ["--steps", "200", "--batch-size", "8192", "--features", "1024", "--hidden", "8192", "--lr", "0.001",
             "--log-every", "50"]
    rows = _torchrun(2, _env(ANYACCEL_ACCELERATOR="cuda", CUDA_VISIBLE_DEVICES="0,1"), *sizes, timeout=600)
    _check_training(rows, 2)
    assert [(row["device"], row["backend"]) for row in rows] == [("cuda:0", "nccl"), ("cuda:1", "nccl")]
    _print_curve(rows)
    for row in rows:
        print(f"rank {row['rank']} on {row['device']} ({row['backend']}): median step {row['median_step_ms']:.2f} ms, "
              f"{row['samples_per_s']:.0f} samples/s across both GPUs "
              f"(batch 8192 per GPU, MLP 1024-8192-1, float32)")
