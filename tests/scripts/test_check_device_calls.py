"""scripts/check_device_calls.py: package code calls vendor runtimes only from anyaccel/accelerator/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_device_calls.py"


def _run(target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(target)], capture_output=True, text=True, timeout=120)


def test_the_package_calls_no_vendor_runtime_outside_the_accelerator_layer() -> None:
    result = _run(ROOT / "anyaccel")
    assert result.returncode == 0, result.stdout


def test_a_direct_call_an_import_and_a_from_import_are_each_reported(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "accelerator").mkdir(parents=True)
    (pkg / "accelerator" / "ok.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    (pkg / "bad.py").write_text("import torch\nimport torch.xpu\nfrom torch import mps\n"
                                "# torch.cuda.synchronize() in a comment\nx = 'torch.cuda'\ntorch.cuda.synchronize()\n")
    result = _run(pkg)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert [line.split(": ")[0].rsplit(":", 1)[1] for line in lines] == ["2", "3", "6"]
    assert "torch.cuda.synchronize" in lines[-1]
