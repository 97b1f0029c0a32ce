"""Fixtures of the async I/O tests: the loaded op (private session cache), fresh handles, a subprocess runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
#: A small O_DIRECT piece, so small files already span head, several body pieces and a tail.
SMALL_BLOCK = 8192


@pytest.fixture(scope="session")
def aio_module(_ops_cache_dir: str) -> Any:
    """The ``async_io`` op module (``AsyncIOBuilder().load()``)."""
    from anyaccel.accelerator import get_accelerator

    return get_accelerator().create_op_builder("AsyncIOBuilder").load()


@pytest.fixture
def handle(aio_module: Any) -> Iterator[Any]:
    """A handle with 8 KiB pieces and 4 workers, closed after the test."""
    h = aio_module.aio_handle(block_size=SMALL_BLOCK, queue_depth=4)
    yield h
    h.close()


@pytest.fixture
def run_python(_ops_cache_dir: str, tmp_path: Path):
    """Run a Python snippet in a fresh process (for crash-prone cases) and return its last stdout line as
    JSON. The snippet gets ``aio`` (the loaded module) and ``torch``; the kernel cache is the session's."""

    def run(code: str, env: dict[str, str] | None = None, prefix: list[str] | None = None,
            timeout_s: float = 300) -> Any:
        script = tmp_path / "snippet.py"
        script.write_text("import json, os, sys, torch\n"
                          "from anyaccel.accelerator import get_accelerator\n"
                          "aio = get_accelerator().create_op_builder('AsyncIOBuilder').load()\n"
                          + textwrap.dedent(code))
        full_env = {**os.environ, "PYTHONPATH": str(REPO), "ANYACCEL_CACHE_DIR": _ops_cache_dir, **(env or {})}
        proc = subprocess.run([*(prefix or []), sys.executable, str(script)], capture_output=True, text=True,
                              env=full_env, timeout=timeout_s)
        assert proc.returncode == 0, f"snippet failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return run
