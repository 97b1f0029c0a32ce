"""The ``anyaccel`` command line itself: help that imports no torch and reads as plain text, quiet start-up.

Each command runs in a fresh interpreter (``python -m anyaccel``), since what a command imports is only
visible from a clean ``sys.modules``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from anyaccel import cli

REPO = Path(__file__).resolve().parents[1]

#: Runs the command line in this interpreter, then prints whether torch was imported (help exits via SystemExit).
PROBE = """
import sys
from anyaccel.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("torch imported:", "torch" in sys.modules)
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANYACCEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    return env


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE, *args], env=env or _env(), cwd=REPO, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("args", [["--help"], ["-v", "--help"], ["migrate", "--help"], ["report", "--help"],
                                  ["build", "--help"], ["cache", "--help"], ["cache", "ls", "--help"],
                                  ["tune", "--help"]], ids=" ".join)
def test_help_imports_no_torch(args: list[str]) -> None:
    proc = _run(*args)
    assert proc.returncode == 0, proc.stderr
    assert "usage: anyaccel" in proc.stdout
    assert proc.stdout.rstrip().endswith("torch imported: False"), proc.stdout


@pytest.mark.parametrize("args", [["--help"], ["migrate", "--help"], ["report", "--help"], ["build", "--help"],
                                  ["cache", "clean", "--help"], ["tune", "--help"]], ids=" ".join)
def test_help_is_plain_text(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(args)
    assert exited.value.code == 0
    out = capsys.readouterr().out
    markup = re.findall(r"``|:(?:mod|func|meth|class|attr|data):`|\[`[^]]*`\]\[", out)
    assert markup == [], out


def test_a_subcommand_still_gets_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["migrate", "--help"])
    assert "--write" in capsys.readouterr().out


def test_an_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["repport"])
    assert exited.value.code == 2
    assert "invalid choice: 'repport'" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "command"), [([], None), (["-v", "report", "--json"], "report"),
                                               (["--help"], None), (["nope"], None), (["cache", "ls"], "cache")])
def test_command_of(argv: list[str], command: str | None) -> None:
    assert cli.command_of(argv) == command


def test_every_parser_can_still_be_built_whole() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["migrate", "--check", "x.py"]).mode == "check"
    assert parser.parse_args(["report", "--json"]).json


def test_a_command_does_not_repeat_the_selection_at_info(tmp_path: Path) -> None:
    env = dict(_env(), ANYACCEL_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "anyaccel", "report"], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "accelerator: cpu" in proc.stdout or "accelerator: " in proc.stdout
    assert "INFO" not in proc.stderr, proc.stderr
    verbose = subprocess.run([sys.executable, "-m", "anyaccel", "-v", "cache", "ls"], env=env, cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert verbose.returncode == 0, verbose.stderr


# ---- a stdout that cannot be written is one line on stderr and status 1 -------------------

CUDA_SCRIPT = "import torch\ntorch.cuda.synchronize()\n"


def _command(kind: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m anyaccel ARGS`` with stdout on ``/dev/full``, closed, or a read-only descriptor."""
    command = [sys.executable, "-m", "anyaccel", *args]
    env = _env()
    if kind == "full":
        with open("/dev/full", "w") as full:
            return subprocess.run(command, stdout=full, stderr=subprocess.PIPE, env=env, cwd=cwd, text=True,
                                  timeout=300)
    if kind == "read-only":
        with open(os.devnull) as read_only:
            return subprocess.run(command, stdout=read_only, stderr=subprocess.PIPE, env=env, cwd=cwd, text=True,
                                  timeout=300)
    # closed: the child starts with file descriptor 1 closed (`anyaccel report >&-`)
    return subprocess.run(["/bin/sh", "-c", '"$@" >&-', "sh", *command], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, env=env, cwd=cwd, text=True, timeout=300)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("kind", ["full", "closed", "read-only"])
@pytest.mark.parametrize("args", [["report"], ["report", "--json"], ["migrate", "--check", "script.py"],
                                  ["migrate", "script.py"], ["cache", "ls"]], ids=" ".join)
def test_an_unwritable_stdout_is_one_line_and_status_1(tmp_path: Path, kind: str, args: list[str]) -> None:
    (tmp_path / "script.py").write_text(CUDA_SCRIPT, encoding="utf-8")
    proc = _command(kind, args, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1, proc.stderr
    assert "stdout" in errors[0] and f"'anyaccel {args[0]}'" in errors[0], errors
    assert (tmp_path / "script.py").read_text(encoding="utf-8") == CUDA_SCRIPT


def test_an_oserror_of_the_command_itself_is_not_called_a_stdout_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the output's failures become the one-line stdout error; the command's own OSError propagates."""
    import anyaccel.report

    def fail(args: object) -> int:
        raise FileNotFoundError(2, "No such file or directory", "/no/such")

    monkeypatch.setattr(anyaccel.report, "run", fail)
    with pytest.raises(FileNotFoundError):
        cli.main(["report"])
