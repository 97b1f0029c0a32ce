"""``anyaccel report`` and the command-line wiring (anyaccel/report.py, anyaccel/cli.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from anyaccel import cli, report

REPO = Path(__file__).resolve().parent.parent


def _run(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
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


def _sample_line(line: str) -> str:
    """A report line without what differs between machines and runs: versions, the SIMD level's details, the
    memory-lock limit, the pinned bytes and calls so far in the process, whether DeepSpeed is installed, the
    built column, trailing blanks."""
    line = line.rstrip()
    if line.startswith(("anyaccel ", "torch ", "cpu SIMD level:", "deepspeed:")):
        return line.split()[0]
    line = re.sub(r"RLIMIT_MEMLOCK \S+( bytes)?", "RLIMIT_MEMLOCK ?", line)
    line = re.sub(r"\d+ bytes asked in \d+ call\(s\)", "? bytes asked in ? call(s)", line)
    return re.sub(r"^(\w+Builder\s+(?:yes|no)\s+)(?:yes|no)\b", r"\1?", line)


def test_the_getting_started_sample_is_the_real_report():
    """docs/getting_started.md shows ``anyaccel report`` on a CPU-only machine: each of its lines (but ``...``)
    is a line of the real output, in the same order, up to what differs between machines."""
    import torch

    data = report.collect(build=False)
    if data["accelerator"].get("chosen") != "cpu" or torch.version.cuda or torch.version.hip:
        pytest.skip("the sample is of a CPU-only torch on a machine without an accelerator")
    page = (REPO / "docs" / "getting_started.md").read_text()
    block = re.search(r"## `anyaccel report`.*?```text\n(.*?)```", page, re.S)
    assert block is not None, "no sample of `anyaccel report` in docs/getting_started.md"
    real = [_sample_line(line) for line in report.render(data).splitlines()]
    position = 0
    for line in block.group(1).splitlines():
        if line == "...":
            continue
        wanted = _sample_line(line)
        assert wanted in real[position:], f"the sample's line is not in the real report (after line {position}):\n"\
                                          f"{line}\nreal report:\n" + "\n".join(real)
        position = real.index(wanted, position) + 1
    sample_ops = re.findall(r"^(\w+Builder) ", block.group(1), re.M)
    assert sample_ops == [row["op"] for row in data["ops"]], "the sample lists other ops than the real report"


def test_cli_without_command_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "report" in capsys.readouterr().out


def test_cli_unknown_command_is_a_usage_error():
    with pytest.raises(SystemExit) as exc:
        cli.main(["no-such-command"])
    assert exc.value.code == 2


def test_report_pinned_memory_section_in_a_fresh_process(op_cache_dir):
    """The command runs in a fresh process: it shows the backend and the limit, builds nothing for it."""
    proc = _run("report", "--json", env_extra={"ANYACCEL_CACHE_DIR": str(op_cache_dir),
                                                "DS_PIN_MEMORY_BACKEND": "native"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    pinned = data["pinned_memory"]
    assert pinned["backend"] == "native" and pinned["native"] is None
    assert pinned["tracked_bytes"] == 0 and pinned["tracked_calls"] == 0
    import resource

    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    assert pinned["memlock_limit_bytes"] == (None if soft == resource.RLIM_INFINITY else soft)
    row = {r["op"]: r for r in data["ops"]}["PinMemoryBuilder"]
    assert row["compatible"] is True
    text = report._render_pinned(pinned)
    assert "backend native" in text and "native: not used in this process" in text


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



def test_report_names_every_compiler_record_with_path_and_version_or_why_not(monkeypatch, tmp_path):
    """The compilers section: one row per toolchain record; a compiler found says its path and version, one
    missing says where it was looked for (here: an acpp stand-in on PATH, no icpx anywhere)."""
    from anyaccel.op_builder.toolchains import records

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    acpp = bin_dir / "acpp"
    acpp.write_text('#!/bin/sh\n[ "$1" = "--acpp-version" ] && echo "  AdaptiveCpp version: 24.10.0" && exit 0\n'
                    'exit 1\n')
    acpp.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for var in ("ANYACCEL_SYCL_CXX", "ONEAPI_ROOT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setitem(records.TOOLCHAINS, "icpx", dataclasses.replace(records.TOOLCHAINS["icpx"], default_dirs=()))
    data = report.collect(build=False)
    rows = {r["toolchain"]: r for r in data["compilers"]}
    assert list(rows) == list(records.TOOLCHAINS)
    assert rows["acpp"]["ok"] and rows["acpp"]["path"] == str(acpp) and rows["acpp"]["version"] == "24.10.0"
    assert not rows["icpx"]["ok"] and "no icpx on PATH" in rows["icpx"]["why_not"]
    assert all(r["ok"] == (r["why_not"] == "") for r in rows.values())
    text = report.render(data)
    assert f"  acpp   {acpp}" in text and "24.10.0" in text and "  icpx   -" in text
