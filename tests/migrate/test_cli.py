"""``anyaccel migrate`` command line: modes, exit codes, unparsable, binary and non-UTF-8 files."""

from __future__ import annotations

import argparse
import io
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from anyaccel.migrate import cli

CUDA_CODE = "import torch\n\n\ndef step(x):\n    torch.cuda.synchronize()\n    return x.cuda()\n"


def _run(argv: list[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    code = cli.run(parser.parse_args(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture()
def cuda_file(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(CUDA_CODE, encoding="utf-8")
    return path


def test_diff_is_default_and_changes_nothing(cuda_file: Path) -> None:
    code, out, _ = _run([str(cuda_file)])
    assert code == 0
    assert cuda_file.read_text(encoding="utf-8") == CUDA_CODE
    assert "-    torch.cuda.synchronize()\n-    return x.cuda()\n+    get_accelerator().synchronize()\n" in out
    assert "+from anyaccel import get_accelerator\n" in out


def test_diff_applies_with_patch(cuda_file: Path, tmp_path: Path) -> None:
    _, out, _ = _run([str(cuda_file)])
    if not shutil_which("patch"):
        pytest.skip("patch(1) not installed")
    subprocess.run(["patch", "-s", "-p1", str(cuda_file)], input=out, text=True, check=True, cwd="/")
    _, again, _ = _run([str(cuda_file)])
    assert again == ""


def shutil_which(name: str) -> bool:
    import shutil

    return shutil.which(name) is not None


def test_write_then_check_passes(cuda_file: Path) -> None:
    os.chmod(cuda_file, 0o754)
    assert _run(["--check", str(cuda_file)])[0] == 1
    code, out, _ = _run(["--write", str(cuda_file)])
    assert code == 0 and out == ""
    text = cuda_file.read_text(encoding="utf-8")
    assert "get_accelerator().synchronize()" in text and "x.to(get_accelerator().device_name())" in text
    assert stat.S_IMODE(cuda_file.stat().st_mode) == 0o754
    assert [p.name for p in cuda_file.parent.iterdir()] == ["train.py"]  # no temporary file left
    assert _run(["--check", str(cuda_file)]) == (0, "", "")
    assert _run(["--write", str(cuda_file)])[0] == 0
    assert cuda_file.read_text(encoding="utf-8") == text  # idempotent on disk


def test_check_reports_file_line_and_opt_out(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("import torch\nname = torch.cuda.get_device_name(0)\n", encoding="utf-8")
    code, out, _ = _run(["--check", str(path)])
    assert code == 1
    assert out.startswith(f"{path}:2:8: no-equivalent: torch.cuda.get_device_name")
    path.write_text("import torch\nname = torch.cuda.get_device_name(0)  # anyaccel: ignore\n", encoding="utf-8")
    assert _run(["--check", str(path)]) == (0, "", "")


def test_check_clean_directory(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ok.py").write_text("import torch\nx = torch.ones(2)\n", encoding="utf-8")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "skipped.py").write_text(CUDA_CODE, encoding="utf-8")
    assert _run(["--check", str(tmp_path)])[0] == 0
    (tmp_path / "pkg" / "bad.py").write_text(CUDA_CODE, encoding="utf-8")
    code, out, _ = _run(["--check", str(tmp_path)])
    assert code == 1 and "bad.py:0:0: rewritable" in out and "skipped.py" not in out


def test_unparsable_file_reported_and_untouched(tmp_path: Path, cuda_file: Path) -> None:
    bad = tmp_path / "bad.py"
    bad_text = "import torch\ndef f(:\n    torch.cuda.synchronize()\n"
    bad.write_text(bad_text, encoding="utf-8")
    code, _, err = _run(["--write", str(bad), str(cuda_file)])
    assert code == 1
    assert f"{bad}:2:" in err and "parse-error" in err
    assert bad.read_text(encoding="utf-8") == bad_text
    assert "get_accelerator" in cuda_file.read_text(encoding="utf-8")  # other files still processed


def test_binary_and_non_utf8_skipped(tmp_path: Path) -> None:
    binary = tmp_path / "blob.py"
    payload = os.urandom(64) + b"\x00torch.cuda.synchronize()"
    binary.write_bytes(payload)
    latin = tmp_path / "latin.py"
    latin_bytes = "# caf\u00e9\nimport torch\ntorch.cuda.synchronize()\n".encode("latin-1")
    latin.write_bytes(latin_bytes)
    code, _, err = _run(["--write", str(binary), str(latin)])
    assert code == 0
    assert f"{binary}:0:0: binary:" in err and f"{latin}:0:0: not-utf8:" in err
    assert binary.read_bytes() == payload and latin.read_bytes() == latin_bytes


def test_missing_path_fails(tmp_path: Path) -> None:
    code, _, err = _run([str(tmp_path / "nope.py")])
    assert code == 1 and "unreadable" in err


def test_bom_and_crlf_preserved(tmp_path: Path) -> None:
    path = tmp_path / "w.py"
    path.write_bytes(b"\xef\xbb\xbfimport torch\r\ntorch.cuda.synchronize()\r\n")
    assert _run(["--write", str(path)])[0] == 0
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbfimport torch\r\n") and b"get_accelerator().synchronize()\r\n" in data


def test_importing_cli_does_not_import_libcst() -> None:
    code = "import sys, anyaccel.migrate.cli; assert 'libcst' not in sys.modules, 'libcst imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_libcst_names_the_extra(tmp_path: Path, cuda_file: Path) -> None:
    code = (
        "import sys, argparse; sys.modules['libcst'] = None\n"
        "from anyaccel.migrate import cli\n"
        "p = argparse.ArgumentParser(); cli.add_arguments(p)\n"
        f"sys.exit(cli.run(p.parse_args([{str(cuda_file)!r}])))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "pip install 'anyaccel[migrate]'" in proc.stderr
