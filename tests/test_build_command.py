"""``anyaccel build`` (anyaccel/build_command.py, called through its module)."""

from __future__ import annotations

import argparse

import pytest
from opb_helpers import make_wrapper

from anyaccel import build_command as commands


def _parse(argv):
    parser = argparse.ArgumentParser()
    commands.add_arguments(parser)
    return parser.parse_args(argv)


def test_build_unknown_op(capsys, caplog) -> None:
    assert commands.run(_parse(["--ops", "no_such_op"])) == 2
    assert "unknown op builder 'no_such_op'" in caplog.text


def test_defaults_are_every_host_op() -> None:
    args = _parse([])
    assert args.ops is None and args.accelerator == "*"


@pytest.mark.slow
def test_build_a_host_op_into_the_cache_and_skip_a_gpu_one(capsys) -> None:
    """The CPU Adam op is built (or found) in the cache; the CUDA build is skipped on this torch with its reason."""
    import torch

    assert commands.run(_parse(["--ops", "cpu_adam"])) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["op", "status", "time", "detail"]
    assert "cpu_adam[" in out and "built" in out
    if torch.version.cuda is None:  # a requested op that is skipped fails the command
        assert commands.run(_parse(["--ops", "FusedAdamBuilder", "--accelerator", "cuda"])) == 1
        out = capsys.readouterr().out
        assert "fused_adam" in out and "skipped" in out and "CPU-only" in out


def test_a_failing_build_makes_the_command_fail(tmp_path, monkeypatch, capsys, caplog) -> None:
    broken = make_wrapper(tmp_path, "echo 'c++: error: something broke' >&2\nexit 1\n", name="broken-cxx")
    monkeypatch.setenv("CXX", str(broken))
    monkeypatch.setenv("ANYACCEL_CPU_ISA", "portable")
    assert commands.run(_parse(["--ops", "CPULionBuilder"])) == 1
    assert "failed" in capsys.readouterr().out and "something broke" in caplog.text


def test_an_unusable_cache_is_reported_once_not_once_per_op(tmp_path) -> None:
    """In a fresh process (one that loaded no op yet): the table has one line per failed op, the error once."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANYACCEL_")}
    env.update(PYTHONPATH=os.pathsep.join([str(repo), env.get("PYTHONPATH", "")]),
               ANYACCEL_CACHE_DIR=str(blocker / "cache"))  # every build fails to create the cache
    proc = subprocess.run([sys.executable, "-m", "anyaccel", "build", "--ops", "CPUAdamBuilder", "CPULionBuilder"],
                          env=env, cwd=repo, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1, proc.stderr
    table = proc.stdout.splitlines()[1:]
    assert len(table) >= 2 and all(" failed " in row for row in table), proc.stdout  # one line per failed op
    assert "is a file, not a directory" in errors[0] and "cpu_adam[" in errors[0] and "cpu_lion[" in errors[0]
