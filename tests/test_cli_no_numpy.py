"""On a machine without numpy, no ``anyaccel`` command prints torch's "Failed to initialize NumPy" warning.

numpy is hidden from the child process by a ``sitecustomize`` module that makes ``import numpy`` fail the way
a missing package does (``ModuleNotFoundError: No module named 'numpy'``), so torch warns exactly as on a
machine without numpy. A control run (plain ``import torch``) checks that the shim really provokes the
warning, so a pass means the command filtered it, not that nothing was there to filter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WARNING = "Failed to initialize NumPy"

SITECUSTOMIZE = '''
import sys


class _NoNumpy:
    """A meta-path finder that reports numpy as not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoNumpy())
'''


@pytest.fixture(scope="module")
def no_numpy_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    shim = tmp_path_factory.mktemp("no-numpy")
    (shim / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "ANYACCEL_ACCELERATOR")}
    env["PYTHONPATH"] = os.pathsep.join([str(shim), str(REPO), os.environ.get("PYTHONPATH", "")])
    return env


def _run(env: dict[str, str], *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_shim_hides_numpy_and_torch_warns(no_numpy_env: dict[str, str]) -> None:
    proc = _run(no_numpy_env, "-c", "import torch")
    assert proc.returncode == 0, proc.stderr
    if WARNING not in proc.stderr:
        pytest.skip("this torch does not warn at import when numpy is missing; nothing to filter")
    assert "No module named 'numpy'" in proc.stderr


@pytest.mark.parametrize("args", [["--help"], ["report"], ["cache", "ls"]], ids=["help", "report", "cache-ls"])
def test_commands_print_no_numpy_warning(no_numpy_env: dict[str, str], args: list[str], tmp_path: Path) -> None:
    env = dict(no_numpy_env, ANYACCEL_CACHE_DIR=str(tmp_path / "cache"))
    proc = _run(env, "-m", "anyaccel", *args)
    assert proc.returncode == 0, proc.stderr
    assert WARNING not in proc.stderr and "UserWarning" not in proc.stderr, proc.stderr


def test_migrate_prints_no_numpy_warning(no_numpy_env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import torch\nx = torch.zeros(2).cuda()\n", encoding="utf-8")
    proc = _run(no_numpy_env, "-m", "anyaccel", "migrate", str(script))
    assert proc.returncode == 0, proc.stderr
    assert "+x = torch.zeros(2).to(get_accelerator().device_name())" in proc.stdout
    assert WARNING not in proc.stderr and "UserWarning" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("code", [
    "import anyaccel; anyaccel.get_accelerator()",
    "from anyaccel.ops.lion.cpu import CPULion",
    "import anyaccel, torch",  # anyaccel first, then the user's own torch import
], ids=["get-accelerator", "op-import", "anyaccel-then-torch"])
def test_library_use_prints_no_numpy_warning(no_numpy_env: dict[str, str], code: str) -> None:
    proc = _run(no_numpy_env, "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert WARNING not in proc.stderr and "UserWarning" not in proc.stderr, proc.stderr


def test_with_numpy_installed_nothing_is_filtered() -> None:
    code = ("import warnings, anyaccel; "
            "print(any('NumPy' in str(f[1] and f[1].pattern) for f in warnings.filters))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = _run(env, "-c", code)
    assert proc.returncode == 0, proc.stderr
    pytest.importorskip("numpy")
    assert proc.stdout.strip() == "False"


def test_importing_anyaccel_imports_no_torch() -> None:
    code = "import sys, anyaccel, anyaccel.cli; print('torch' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = _run(env, "-c", code)
    assert proc.stdout.strip() == "False", proc.stderr
