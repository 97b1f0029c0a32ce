"""scripts/check_private_names.py: private torch/Triton internals are used only in anyaccel/_compat/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_private_names.py"


def _run(target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(target)], capture_output=True, text=True, timeout=120)


def test_the_package_uses_no_private_name_outside_compat() -> None:
    result = _run(ROOT / "anyaccel")
    assert result.returncode == 0, result.stdout


def test_each_kind_of_private_use_is_reported_and_compat_is_allowed(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "_compat").mkdir(parents=True)
    (pkg / "_compat" / "ok.py").write_text("import torch\ntorch._C._x()\n")
    (pkg / "bad.py").write_text(
        '"""Docstrings may name torch._C freely."""\n'
        "import ctypes\nimport torch\nfrom torch import _C\n"
        "_C.parse_schema('x')\n"                                   # line 5: alias of torch._C
        "getattr(torch, '_foreach_add')\n"                          # line 6: getattr with a literal
        "MARK = '_dynamo_marked_constant'\n"                        # line 7: a private attribute as a string
        "def f(opt, t):\n"
        "    opt._optimizer_step_code()\n"                          # line 9: a private attribute of an object
        "    ctypes.c_float.from_address(t.data_ptr()).value = 1\n"  # line 10: ctypes into tensor memory
        "    return 'torch._dynamo'\n"                               # line 11: a private path as a string
    )
    result = _run(pkg)
    assert result.returncode == 1
    lines = sorted(int(line.split(":")[1]) for line in result.stdout.splitlines())
    assert lines == [4, 5, 6, 7, 9, 10, 11], result.stdout
    assert "ok.py" not in result.stdout
