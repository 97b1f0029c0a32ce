"""Helpers of the op-builder tests: compiler wrappers, unique variants and subprocess loads of the toy op."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REAL_CXX = shutil.which("g++") or shutil.which("c++") or "c++"


def make_wrapper(directory: Path, body: str, name: str = "cxx") -> Path:
    """Write an executable shell script ``name`` with ``body`` into ``directory``."""
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def unique() -> str:
    """A fresh variant name, so a test's build has a key no other test or run has used."""
    return uuid.uuid4().hex[:8]


LOAD_SCRIPT = """
import json, sys
sys.path.insert(0, {here!r})
from toy_builder import ToyBuilder
import torch
m = ToyBuilder({variant!r}).load()
x = torch.randn(1000)
y = x.clone()
getattr(torch.ops, m.namespace).scale_(x, 3.0)
ok = bool(torch.allclose(x, y * 3.0))
print(json.dumps({{"ok": ok, "source": m.source, "namespace": m.namespace, "path": str(m.path),
                  "isa": getattr(torch.ops, m.namespace).isa(),
                  "cpp_extension": "torch.utils.cpp_extension" in sys.modules}}))
"""


def toy_load_cmd(variant: str) -> list[str]:
    """A python command line that loads the toy op (variant) and prints a JSON summary."""
    return [sys.executable, "-c", LOAD_SCRIPT.format(here=str(HERE), variant=variant)]


def run_json(cmd: list[str], env: dict, timeout: float = 300) -> dict:
    """Run ``cmd`` and parse the last stdout line as JSON; fail with its output otherwise."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_env(**extra: str) -> dict:
    """os.environ plus ``extra`` (for subprocesses)."""
    env = dict(os.environ)
    env.update(extra)
    return env
