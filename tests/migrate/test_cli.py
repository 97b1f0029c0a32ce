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


# ---- --check never passes a file it did not examine ---------------------------------------

LATIN_CUDA = "# caf\u00e9, \u00e0 la carte\nimport torch\ntorch.cuda.synchronize()\n"


@pytest.mark.parametrize(("encoding", "cookie", "text"), [
    ("latin-1", "# -*- coding: latin-1 -*-\n", LATIN_CUDA),
    ("cp1252", "# coding=cp1252\n", "# 10 \u20ac \u2014 caf\u00e9\nimport torch\ntorch.cuda.synchronize()\n"),
    ("iso-8859-15", "#!/usr/bin/env python\n# vim: set fileencoding=iso-8859-15 :\n", "# 5 \u20ac\n" + CUDA_CODE),
    ("utf-8", "# coding: utf-8\n", "# \u00fcber \u4e2d\u6587\n" + CUDA_CODE),
], ids=["latin-1", "cp1252", "iso-8859-15-line-2", "utf-8"])
@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_a_file_with_a_coding_cookie_is_read_checked_and_written_in_its_encoding(
        tmp_path: Path, encoding: str, cookie: str, text: str, newline: str) -> None:
    path = tmp_path / "legacy.py"
    original = (cookie + text).replace("\n", newline).encode(encoding)
    path.write_bytes(original)
    code, out, _ = _run(["--check", str(path)])
    assert code == 1 and f"{path}:0:0: rewritable:" in out, out  # examined: the CUDA call is seen
    code, out, err = _run(["--diff", str(path)])
    assert code == 0 and "get_accelerator().synchronize()" in out, (out, err)
    assert path.read_bytes() == original
    assert _run(["--write", str(path)])[0] == 0
    data = path.read_bytes()
    rewritten = data.decode(encoding)
    assert rewritten.startswith(cookie.replace("\n", newline)) and "get_accelerator().synchronize()" in rewritten
    assert text.splitlines()[0] in rewritten  # the non-ASCII comment kept, in the file's own encoding
    assert data.count(b"\r\n") == (data.count(b"\n") if newline == "\r\n" else 0)
    assert _run(["--check", str(path)])[0] == 0  # migrated and clean


def test_a_clean_file_with_a_coding_cookie_passes_the_check(tmp_path: Path) -> None:
    path = tmp_path / "clean.py"
    path.write_bytes("# -*- coding: latin-1 -*-\n# na\u00efve\nimport torch\nx = torch.ones(2)\n".encode("latin-1"))
    assert _run(["--check", str(path)]) == (0, "", "")


@pytest.mark.parametrize(("data", "expected"), [
    (b"# coding: no-such-codec\nimport torch\n", "unknown encoding"),
    (b"\xef\xbb\xbf# coding: latin-1\nimport torch\n", "encoding problem"),
    (b"# coding: utf-8\n# caf\xe9\nimport torch\n", "not UTF-8 (byte 21 is b'\\xe9')"),
    (b"# coding: ascii\n# caf\xe9\nimport torch\n", "does not decode as ascii"),
], ids=["unknown-codec", "bom-contradicts-cookie", "utf-8-cookie-latin-bytes", "ascii-cookie"])
def test_a_file_that_does_not_decode_as_declared_fails_every_mode(tmp_path: Path, data: bytes, expected: str) -> None:
    path = tmp_path / "broken.py"
    path.write_bytes(data)
    for mode in ("--check", "--diff", "--write"):
        code, out, err = _run([mode, str(path)])
        findings = out if mode == "--check" else err
        assert expected in findings, (mode, findings)
        if b"no-such" in data or b"\xef\xbb\xbf" in data or b"ascii" in data:
            assert code == 1 and ": bad-encoding:" in findings
        else:  # a UTF-8 file (cookie or not) that is not UTF-8: skipped, which only --check counts as failing
            assert code == (1 if mode == "--check" else 0) and ": not-utf8:" in findings
    assert path.read_bytes() == data


def test_check_fails_on_a_file_it_skipped(tmp_path: Path) -> None:
    """A non-UTF-8 file without a cookie, or a binary one, is skipped: --check cannot vouch for it."""
    latin = tmp_path / "latin.py"
    latin.write_bytes(LATIN_CUDA.encode("latin-1"))
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\x00torch.cuda.synchronize()")
    for path, kind in ((latin, "not-utf8"), (binary, "binary")):
        code, out, _ = _run(["--check", str(path)])
        assert code == 1 and f"{path}:0:0: {kind}:" in out


NOTEBOOK = {
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Train\n"]},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
         "source": ["import torch\n", "torch.cuda.synchronize()\n"]},
    ],
    "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
}


@pytest.mark.parametrize("name", ["train.ipynb", "Train.IPYNB"])
def test_a_notebook_given_by_name_is_refused_in_every_mode(tmp_path: Path, name: str) -> None:
    import json

    path = tmp_path / name
    data = json.dumps(NOTEBOOK, indent=1).encode()
    path.write_bytes(data)
    for mode in ("--check", "--diff", "--write"):
        code, out, err = _run([mode, str(path)])
        findings = out if mode == "--check" else err
        assert code == 1 and f"{path}:0:0: notebook:" in findings and "nbconvert --to script" in findings, findings
    assert path.read_bytes() == data
