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


def test_cli_without_command_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "report" in capsys.readouterr().out


def test_cli_unknown_command_is_a_usage_error():
    with pytest.raises(SystemExit) as exc:
        cli.main(["no-such-command"])
    assert exc.value.code == 2


def test_report_shows_sve_on_a_faked_aarch64_cpu_with_sve(monkeypatch):
    # the CPU is faked: an aarch64 machine whose AT_HWCAP has HWCAP_SVE (1 << 22) and HWCAP_ASIMD (1 << 1)
    import anyaccel.op_builder.toolchains.cpu_isa as cpu_isa

    monkeypatch.setattr(cpu_isa, "platform", type("P", (), {"machine": staticmethod(lambda: "aarch64")}))
    monkeypatch.setattr(cpu_isa, "_read_hwcap", lambda: (1 << 22) | (1 << 1))
    monkeypatch.setattr(cpu_isa, "cpuinfo_flags", lambda: frozenset({"asimd", "sve"}))
    monkeypatch.delenv("ANYACCEL_CPU_ISA", raising=False)
    data = report.collect(build=False)
    isa = data["toolchain"]["cpu_isa"]
    assert isa["supported"] == ["sve", "neon", "portable"] and isa["chosen"] == "sve"
    assert "cpu SIMD level: sve  (supported: sve, neon, portable;" in report.render(data)
