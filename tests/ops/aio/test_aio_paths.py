"""Paths and files the async I/O op must refuse before it touches anything: a NUL inside a path (C would
cut the path there and write another file), and files that are not regular files (a FIFO's open blocks
until a peer comes, a device has no bytes of its own). Every case that could block runs in a child process
with a short timeout, so a hang fails the test instead of stalling the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from anyaccel.ops.aio import errors

REPO = Path(__file__).resolve().parents[3]
CONTENT = b"the checkpoint that must survive\n"


def _calls(h: Any, buf: torch.Tensor, path: Any) -> dict[str, Any]:
    return {
        "async_pread": lambda: h.async_pread(buf, path),
        "async_pwrite": lambda: h.async_pwrite(buf, path),
        "sync_pread": lambda: h.sync_pread(buf, path),
        "sync_pwrite": lambda: h.sync_pwrite(buf, path),
        "pread": lambda: h.pread(buf, path, False, False),
        "pread_async": lambda: h.pread(buf, path, True, True),
        "pwrite": lambda: h.pwrite(buf, path, False, False),
        "pwrite_async": lambda: h.pwrite(buf, path, True, True, 4),
        "read": lambda: h.read(buf, path, False),
        "write": lambda: h.write(buf, path, True),
    }


@pytest.mark.parametrize("entry", list(_calls(None, torch.empty(0), "")))
@pytest.mark.parametrize("where", ["end", "middle", "pathlike"])
def test_a_nul_in_a_path_is_refused_by_every_entry_point(handle, tmp_path, entry, where):
    ckpt = tmp_path / "ckpt.pt"
    ckpt.write_bytes(CONTENT)
    bad: Any = {"end": f"{ckpt}\0.tmp", "middle": f"{tmp_path}/ck\0pt.pt",
                "pathlike": Path(f"{ckpt}\0.tmp")}[where]
    buf = torch.full((len(CONTENT),), 7, dtype=torch.uint8)
    with pytest.raises(ValueError, match="NUL") as err:
        _calls(handle, buf, bad)[entry]()
    assert repr(os.fspath(bad)) in str(err.value)
    assert ckpt.read_bytes() == CONTENT and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
    assert handle.pending() == 0 and torch.all(buf == 7)


@pytest.mark.parametrize("fn", ["aio_submit_read", "aio_submit_write"])
def test_the_kernel_and_its_fake_refuse_a_nul_too(aio_module, tmp_path, fn):
    from torch._subclasses.fake_tensor import FakeTensorMode

    ckpt = tmp_path / "ckpt.pt"
    ckpt.write_bytes(CONTENT)
    op = getattr(aio_module, fn)
    with aio_module.aio_handle() as h:
        with pytest.raises(RuntimeError, match="NUL") as kernel_error:
            op(h._id, torch.zeros(4, dtype=torch.uint8), f"{ckpt}\0.tmp", -1, 0)
        with FakeTensorMode() as mode, pytest.raises(RuntimeError) as fake_error:
            op(h._id, mode.from_tensor(torch.zeros(4, dtype=torch.uint8)), f"{ckpt}\0.tmp", -1, 0)
        assert str(kernel_error.value) == str(fake_error.value)
        assert h.pending() == 0
    assert ckpt.read_bytes() == CONTENT


def _run_bounded(cache_dir: str, code: str, timeout_s: float = 30.0) -> Any:
    """Run ``code`` (gets ``aio``, ``torch``, ``outcome``) in a child; a hang past ``timeout_s`` fails the test."""
    script = ("import json, os, sys, time, torch\n"
              "from anyaccel.accelerator import get_accelerator\n"
              "aio = get_accelerator().create_op_builder('AsyncIOBuilder').load()\n"
              "def outcome(fn):\n"
              "    start = time.monotonic()\n"
              "    try:\n"
              "        return {'ok': fn(), 's': time.monotonic() - start}\n"
              "    except Exception as exc:\n"
              "        return {'error': type(exc).__name__, 'message': str(exc), 's': time.monotonic() - start,\n"
              "                'value_error': isinstance(exc, ValueError)}\n"
              + textwrap.dedent(code))
    env = {**os.environ, "PYTHONPATH": str(REPO), "ANYACCEL_CACHE_DIR": cache_dir, "ANYACCEL_AIO_TIMEOUT": "5"}
    try:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: the child did not finish in {timeout_s:g} s")
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("direction", ["sync_pread", "sync_pwrite", "async_pread", "async_pwrite"])
def test_a_fifo_is_refused_at_once_never_waited_on(_ops_cache_dir, tmp_path, direction):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    out = _run_bounded(_ops_cache_dir, f"""
h = aio.aio_handle()
first = outcome(lambda: h.{direction}(torch.zeros(16, dtype=torch.uint8), {str(fifo)!r}))
print(json.dumps([first, h.pending()]))
""")
    first, pending = out
    assert first.get("error") == "AIONotRegularFileError", first
    assert first["value_error"] and str(fifo) in first["message"] and "FIFO" in first["message"]
    assert first["s"] < 2 and pending == 0


def test_a_fifo_with_a_reader_is_refused_too(handle, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(errors.AIONotRegularFileError, match="FIFO"):
            handle.sync_pwrite(torch.zeros(16, dtype=torch.uint8), str(fifo))
        assert handle.pending() == 0
    finally:
        os.close(reader)


def test_a_fifo_descriptor_is_refused_without_reopening_it(_ops_cache_dir, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    out = _run_bounded(_ops_cache_dir, f"""
fd = os.open({str(fifo)!r}, os.O_RDONLY | os.O_NONBLOCK)  # no writer: reopening it would block
h = aio.aio_handle()
print(json.dumps([outcome(lambda: h.sync_pread(torch.zeros(16, dtype=torch.uint8), fd)), h.pending()]))
""")
    first, pending = out
    assert first.get("error") == "AIONotRegularFileError" and "fd " in first["message"], first
    assert pending == 0


@pytest.mark.parametrize("device,read", [("/dev/zero", True), ("/dev/null", False), ("/dev/full", False)])
def test_a_character_device_is_refused(handle, device, read):
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    buf = torch.ones(8192, dtype=torch.uint8)
    with pytest.raises(errors.AIONotRegularFileError, match="character device") as err:
        (handle.sync_pread if read else handle.sync_pwrite)(buf, device)
    assert device in str(err.value) and handle.pending() == 0 and torch.all(buf == 1)


def test_a_regular_file_still_works_after_the_checks(handle, tmp_path):
    path = tmp_path / "ok.bin"
    data = torch.arange(10000, dtype=torch.int32)
    assert handle.sync_pwrite(data, str(path)) == 1
    back = torch.zeros_like(data)
    assert handle.sync_pread(back, path) == 1 and torch.equal(back, data)
    with open(path, "rb+") as f:
        assert handle.sync_pread(back, f.fileno()) == 1 and torch.equal(back, data)
