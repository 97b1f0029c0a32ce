"""The example training script trains for real: its validation loss falls with CPUAdam and with AdamW."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_train_charlm_loss_falls_with_both_optimizers(op_cache_dir):
    env = dict(os.environ, ANYACCEL_CACHE_DIR=str(op_cache_dir),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = ["--optimizer", "both", "--steps", "40", "--d-model", "64", "--layers", "2", "--context", "64",
            "--batch-size", "16", "--max-bytes", "400000", "--log-every", "20"]
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "train_charlm.py"), *args],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = proc.stdout.split("summary")[-1].splitlines()
    rows = {line.split()[0]: [float(v) for v in line.split()[1:]] for line in summary[2:] if line.strip()}
    for name in ("cpuadam", "adamw"):
        loss_first, loss_last, val_before, val_after, _, _ = rows[name]
        assert loss_last < loss_first - 1.0 and val_after < val_before - 1.0, (name, rows[name])
    # same seed, same batches, same maths: the two optimizers land close together
    assert abs(rows["cpuadam"][3] - rows["adamw"][3]) < 0.05, rows
