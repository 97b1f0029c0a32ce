"""``anyaccel cache ls | head -1`` (and ``cache clean``): a reader that goes away is no error (no traceback,
exit 0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("command", "entries"), [(["ls"], 0), (["ls"], 400), (["clean"], 0), (["clean"], 3),
                                                 (["clean", "--all"], 3)])
def test_cache_command_into_a_closed_pipe_is_quiet(tmp_path, command, entries):
    cache = tmp_path / "cache"
    for i in range(entries):  # enough lines to fill the pipe while it is written, not only at exit
        (cache / "ops" / f"op{i:04d}" / ("k" * 64)).mkdir(parents=True)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (head -1) is gone before anything is written
    try:
        proc = subprocess.run([sys.executable, "-m", "anyaccel", "cache", *command], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO), "ANYACCEL_CACHE_DIR": str(cache)})
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
