"""``anyaccel report`` and the command-line wiring (anyaccel/report.py, anyaccel/cli.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from anyaccel import cli, report

REPO = Path(__file__).resolve().parent.parent


def _run(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "anyaccel", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=600)


def test_report_json_describes_this_machine(op_cache_dir):
    proc = _run("report", "--json", env_extra={"ANYACCEL_CACHE_DIR": str(op_cache_dir)})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    import torch

    assert data["torch"]["version"] == torch.__version__
    acc = data["accelerator"]
    assert acc["chosen"] == "cpu" and acc["device_name"] == "cpu" and acc["communication_backend"] == "gloo"
    names = {c["name"] for c in acc["candidates"]}
    assert {"cpu", "cuda", "xpu", "npu", "mps"} <= names
    assert all(c["reason"] for c in acc["candidates"]), "every candidate says why"
    tc = data["toolchain"]
    assert tc["cache_root"] == str(op_cache_dir)
    assert tc["cpu_isa"]["chosen"] in tc["cpu_isa"]["supported"]
    assert tc["cxx"]["path"] and tc["ninja"]["path"]
    ops = {row["op"]: row for row in data["ops"]}
    assert ops["CPUAdamBuilder"]["compatible"] is True


def test_report_build_builds_compatible_ops(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    proc = _run("report", "--json", "--build", env_extra={"ANYACCEL_CACHE_DIR": str(cache)})
    assert proc.returncode == 0, proc.stderr
    row = {r["op"]: r for r in json.loads(proc.stdout)["ops"]}["CPUAdamBuilder"]
    assert row["build"].startswith("ok") and row["built"] is True
    # the text form names the chosen accelerator and the op table
    text = _run("report", env_extra={"ANYACCEL_CACHE_DIR": str(cache)})
    assert text.returncode == 0 and "accelerator: cpu" in text.stdout and "CPUAdamBuilder" in text.stdout


def test_report_shows_forced_isa_error_instead_of_crashing(op_cache_dir):
    proc = _run("report", "--json", env_extra={"ANYACCEL_CACHE_DIR": str(op_cache_dir),
                                                "ANYACCEL_CPU_ISA": "sse9"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    isa = data["toolchain"]["cpu_isa"]
    assert "sse9" in isa["error"] and "avx2" in isa["error"]
    row = {r["op"]: r for r in data["ops"]}["CPUAdamBuilder"]
    assert row["compatible"] is False and "ANYACCEL_CPU_ISA" in row["reason"]


def test_render_is_text_for_every_section():
    data = report.collect(build=False)
    text = report.render(data)
    for needle in ("accelerator:", "candidates:", "cpu SIMD level:", "cxx", "ninja", "cache root:", "op "):
        assert needle in text


def test_an_unavailable_accelerator_is_an_error_not_an_empty_op_table():
    """As ``ANYACCEL_ACCELERATOR=cuda anyaccel report`` on a machine without a GPU: the selection failed, so
    collect() lists no op; render() says why instead of printing the table's header alone."""
    data = report.collect(build=False)
    message = "accelerator 'cuda' requested by ANYACCEL_ACCELERATOR=cuda is unavailable: no GPU"
    data.update(accelerator={"error": message}, ops=[],
                errors=[{"section": "accelerator", "type": "AcceleratorUnavailableError", "message": message}])
    text = report.render(data)
    assert "compatible" not in text and "ops: not listed: the accelerator could not be selected" in text
    assert f"error (accelerator): {message}" in text


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine where CUDA is unavailable")
def test_forcing_an_unavailable_accelerator_fails_the_report(tmp_path):
    proc = _run("report", env_extra={"ANYACCEL_CACHE_DIR": str(tmp_path), "ANYACCEL_ACCELERATOR": "cuda"})
    assert proc.returncode == 1, proc.stderr
    assert "ops: not listed" in proc.stdout and "compatible" not in proc.stdout
    assert "Traceback" not in proc.stderr


def test_cli_without_command_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "report" in capsys.readouterr().out


def test_cli_unknown_command_is_a_usage_error():
    with pytest.raises(SystemExit) as exc:
        cli.main(["no-such-command"])
    assert exc.value.code == 2
