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
