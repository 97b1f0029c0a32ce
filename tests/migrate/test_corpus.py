"""The corpus of CUDA-only training scripts (``tests/migrate/corpus``), migrated and run for a few steps.

On the CPU (every CI machine, with CUDA hidden) each migrated script must train: every step's loss finite,
the model on the CPU, and every device check (``check:`` lines) taking the original's branch, compared with the
original run on the same machine wherever the original has a CPU fallback. On a CUDA machine
(``-m gpu``), the original and the migrated script both run on the GPU and must print the same ``check:`` and
``avail:`` lines: the same branch choices. See ``corpus/README.md`` for what the scripts print.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

CORPUS = Path(__file__).resolve().parent / "corpus"
#: The scripts as ``anyaccel migrate --write`` leaves them, committed so that the GPU test runs where libcst is
#: not installed; ``test_committed_migration_is_current`` keeps them equal to the codemod's output.
MIGRATED = CORPUS / "migrated"
ROOT = Path(__file__).resolve().parents[2]
STEPS = 3
TIMEOUT_S = 300


@dataclasses.dataclass(frozen=True)
class Script:
    """One corpus script: what the migration must report, and how to run it.

    Attributes:
        name: the file name in ``corpus/``.
        findings: the kinds of the places the migration must report (the rest is rewritten).
        original_runs_on_cpu: the original has a CPU fallback, so its ``check:`` lines and losses can be
            compared on a CPU-only machine (CUDA AMP, off there in the original, is off in the migrated script).
        torchrun: start it with ``torch.distributed.run`` (one process per device) instead of ``python``.
    """

    name: str
    findings: tuple[str, ...] = ()
    original_runs_on_cpu: bool = False
    torchrun: bool = False


SCRIPTS = [
    Script("single_gpu.py", findings=("cuda-only-setting",), original_runs_on_cpu=True),
    Script("ddp_spawn.py"),
    Script("torchrun_ddp.py", torchrun=True),
    Script("amp_scaler.py", original_runs_on_cpu=True),
    Script("checkpoint.py"),
    Script("dataloader_pin.py", original_runs_on_cpu=True),
    Script("lm_style.py", original_runs_on_cpu=True),
]


@dataclasses.dataclass
class Run:
    """What one run printed: its ``check:``/``avail:`` decisions, losses and final device."""

    checks: dict[str, str]
    avails: dict[str, str]
    losses: list[float]
    device: str | None
    output: str


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _migrate(script: Script, where: Path) -> Path:
    target = where / "migrated" / script.name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(MIGRATED / script.name, target)
    return target


def _original(script: Script, where: Path) -> Path:
    target = where / "original" / script.name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CORPUS / script.name, target)
    return target


def _run(script: Script, path: Path, env_overrides: dict[str, str]) -> Run:
    path_entries = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]  # anyaccel, installed or not
    env = dict(os.environ, MASTER_PORT=str(_free_port()), PYTHONWARNINGS="ignore",
               PYTHONPATH=os.pathsep.join(path_entries), **env_overrides)
    launcher = [sys.executable]
    if script.torchrun:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={_devices(env_overrides)}"]
    proc = subprocess.run([*launcher, str(path), "--steps", str(STEPS)], cwd=path.parent, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{path} failed ({proc.returncode}):\n{output[-4000:]}"
    run = Run({}, {}, [], None, output)
    for line in proc.stdout.splitlines():
        head, _, value = line.partition(": ")
        if head in ("check", "avail"):
            key, _, setting = value.partition("=")
            (run.checks if head == "check" else run.avails)[key] = setting
        elif head == "loss":
            run.losses.append(float(value))
        elif head == "device":
            run.device = value
    return run


def _devices(env: dict[str, str]) -> int:
    return 1 if env.get("CUDA_VISIBLE_DEVICES") == "" else max(torch.cuda.device_count(), 1)


CPU_ENV = {"ANYACCEL_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": ""}


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_committed_migration_is_current(script: Script) -> None:
    pytest.importorskip("libcst", reason="anyaccel migrate needs libcst: pip install 'anyaccel[migrate]'")
    from anyaccel.migrate.engine import migrate_source

    result = migrate_source((CORPUS / script.name).read_text(encoding="utf-8"), script.name)
    assert result.error is None and result.changed
    assert sorted({f.kind for f in result.findings}) == sorted(script.findings), [f.format() for f in result.findings]
    assert result.rewritten == (MIGRATED / script.name).read_text(encoding="utf-8"), (
        f"corpus/migrated/{script.name} is stale: copy corpus/{script.name} over it and run "
        f"anyaccel migrate --write on the copy"
    )
    assert migrate_source(result.rewritten).rewritten == result.rewritten  # idempotent


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_migrated_script_trains_on_cpu(script: Script, tmp_path: Path) -> None:
    migrated = _run(script, _migrate(script, tmp_path), CPU_ENV)
    assert len(migrated.losses) == STEPS and all(math.isfinite(v) for v in migrated.losses), migrated.output
    assert migrated.device is not None and torch.device(migrated.device).type == "cpu"
    assert migrated.checks, "every corpus script prints its device checks"
    for name, value in migrated.checks.items():  # on a CPU-only machine, every device check is False
        assert value in ("False", "cpu"), (name, value, migrated.output)
    assert "resumed: False" not in migrated.output
    if script.original_runs_on_cpu:  # the same branches, so the same computation and the same losses
        original = _run(script, _original(script, tmp_path), CPU_ENV)
        assert migrated.checks == original.checks
        assert migrated.losses == original.losses, (original.output, migrated.output)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_migrated_script_takes_the_original_branches_on_gpu(script: Script, tmp_path: Path) -> None:
    gpu_env = {"ANYACCEL_ACCELERATOR": "cuda"}
    original = _run(script, _original(script, tmp_path), gpu_env)
    migrated = _run(script, _migrate(script, tmp_path), gpu_env)
    sys.stdout.write(
        f"\n{script.name}: original checks {original.checks} avails {original.avails} device {original.device}"
        f"\n{' ' * len(script.name)}  migrated checks {migrated.checks} avails {migrated.avails} "
        f"device {migrated.device}; losses {original.losses} -> {migrated.losses}\n"
    )
    assert migrated.device is not None and torch.device(migrated.device).type == "cuda"
    assert migrated.checks == original.checks and migrated.avails == original.avails
    assert len(migrated.losses) == len(original.losses) == STEPS
    assert all(math.isfinite(v) for v in migrated.losses)
