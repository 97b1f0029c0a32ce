"""AsyncIOHandle (anyaccel/ops/aio/handle.py): DeepSpeed's aio_handle API, the right bytes for any size and
offset, typed errors, async counts, aliasing and threads. Faults that need a separate process (full disk,
injected I/O errors, hangs, fork) are in test_aio_faults.py."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from anyaccel.ops.aio import errors

#: The ``handle`` fixture's block_size (conftest.py), so the sizes below span several pieces.
SMALL_BLOCK = 8192

# Sizes around the 4096-byte O_DIRECT unit and the 8 KiB piece; offsets aligned and not.
SIZES = (0, 1, 511, 4096, 4097, SMALL_BLOCK + 1, 3 * SMALL_BLOCK + 123, 100_003)
OFFSETS = (0, 1, 4096, 5000)


def random_bytes(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def buffer_like(kind: str, n: int, handle: Any) -> torch.Tensor:
    """An n-byte uint8 buffer: page-aligned ("aligned", straight O_DIRECT) or one byte off ("unaligned":
    not congruent with the file offset, so the engine bounces through its staging buffer)."""
    if kind == "aligned":
        return handle.new_cpu_locked_tensor(n, torch.empty(0, dtype=torch.uint8))
    return torch.empty(n + 1, dtype=torch.uint8)[1:]


@pytest.mark.parametrize("kind", ["aligned", "unaligned"])
@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("size", SIZES)
def test_write_then_read_gives_the_same_bytes_at_any_size_and_offset(handle, tmp_path, kind, offset, size):
    path = tmp_path / "data.bin"
    src = buffer_like(kind, size, handle)
    src.copy_(random_bytes(size, seed=size + offset))
    assert handle.sync_pwrite(src, str(path), offset) == 1
    on_disk = path.read_bytes()
    assert len(on_disk) == (offset + size if size else 0)  # an empty write creates the file, extends nothing
    assert on_disk[offset:] == src.numpy().tobytes()
    dst = buffer_like(kind, size, handle)
    dst.fill_(7)
    assert handle.sync_pread(dst, path, offset) == 1  # os.PathLike accepted too
    assert torch.equal(dst, src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64])
def test_any_dtype_and_shape_moves_its_bytes(handle, tmp_path, dtype):
    x = torch.randn(37, 29).to(dtype)
    path = tmp_path / "t.bin"
    handle.sync_pwrite(x, str(path))
    assert path.read_bytes() == x.view(torch.uint8).numpy().tobytes()
    y = torch.zeros_like(x)
    handle.sync_pread(y, str(path))
    assert torch.equal(x, y)


def test_a_write_never_truncates_and_leaves_other_bytes_alone(handle, tmp_path):
    path = tmp_path / "existing.bin"
    original = bytes(range(256)) * 64  # 16 KiB
    path.write_bytes(original)
    patch = random_bytes(5000)
    handle.sync_pwrite(patch, str(path), 3000)
    data = path.read_bytes()
    assert len(data) == len(original)
    assert data[:3000] == original[:3000] and data[8000:] == original[8000:]
    assert data[3000:8000] == patch.numpy().tobytes()


def test_a_file_shorter_than_a_block_reads_right(aio_module, tmp_path):
    with aio_module.aio_handle() as h:  # 1 MiB pieces, a 100-byte file
        path = tmp_path / "short.bin"
        path.write_bytes(bytes(range(100)))
        out = torch.empty(100, dtype=torch.uint8)
        assert h.sync_pread(out, str(path)) == 1
        assert out.tolist() == list(range(100))
        head = torch.empty(10, dtype=torch.uint8)
        h.sync_pread(head, str(path), 90)
        assert head.tolist() == list(range(90, 100))


@pytest.mark.parametrize("offset", [0, 50, 100, 4096])
def test_a_read_past_the_end_raises_before_reading_anything(handle, tmp_path, offset):
    path = tmp_path / "short.bin"
    path.write_bytes(b"x" * 100)
    out = torch.full((101 - min(offset, 100),), 3, dtype=torch.uint8)  # one byte more than the file holds
    with pytest.raises(errors.FileTooShortError, match="shorter than the tensor") as err:
        handle.sync_pread(out, str(path), offset)
    assert isinstance(err.value, EOFError) and str(offset) in str(err.value) and "has 100" in str(err.value)
    assert bool((out == 3).all()), "nothing may be read"
    assert handle.pending() == 0


def test_missing_directory_and_missing_file_are_file_not_found(handle, tmp_path):
    buf = torch.zeros(10, dtype=torch.uint8)
    with pytest.raises(errors.AIOFileNotFoundError, match="create the directory") as err:
        handle.sync_pwrite(buf, str(tmp_path / "no" / "such" / "dir" / "f.bin"))
    assert isinstance(err.value, FileNotFoundError) and err.value.errno == 2
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        handle.async_pread(buf, str(tmp_path / "missing.bin"))
    assert handle.pending() == 0


def test_a_directory_is_refused(handle, tmp_path):
    with pytest.raises(errors.AIOIsADirectoryError, match="is a directory"):
        handle.sync_pread(torch.zeros(1, dtype=torch.uint8), str(tmp_path))


def _make_read_only(path: Path) -> bool:
    """chmod 0444 (enough unless root), else chattr +i (root, on file systems that support it)."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        return True
    import subprocess

    return subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0


def test_a_read_only_file_cannot_be_written_and_can_be_read(handle, tmp_path):
    path = tmp_path / "ro.bin"
    path.write_bytes(b"abcd")
    if not _make_read_only(path):
        pytest.skip("running as root on a file system without chattr +i: no way to make a file read-only")
    try:
        with pytest.raises(errors.AIOPermissionError, match="ro.bin.*fix") as err:
            handle.sync_pwrite(torch.zeros(4, dtype=torch.uint8), str(path))
        assert isinstance(err.value, PermissionError)
        out = torch.zeros(4, dtype=torch.uint8)
        handle.sync_pread(out, str(path))
        assert bytes(out.tolist()) == b"abcd"
        assert path.read_bytes() == b"abcd"
    finally:
        if os.geteuid() == 0:
            import subprocess

            subprocess.run(["chattr", "-i", str(path)], capture_output=True)


def test_async_calls_return_zero_and_wait_counts_them(handle, tmp_path):
    bufs = [random_bytes(10_000 + i, seed=i) for i in range(5)]
    for i, b in enumerate(bufs):
        assert handle.async_pwrite(b, str(tmp_path / f"{i}.bin")) == 0
    assert handle.pending() == 5  # queued and not yet reaped, finished or not
    assert handle.wait() == 5
    assert handle.pending() == 0 and handle.wait() == 0
    outs = [torch.empty_like(b) for b in bufs]
    for i, o in enumerate(outs):
        handle.async_pread(o, str(tmp_path / f"{i}.bin"))
    assert handle.wait() == 5
    assert all(torch.equal(o, b) for o, b in zip(outs, bufs, strict=True))


def test_a_sync_call_waits_for_everything_pending_as_deepspeed(handle, tmp_path):
    handle.async_pwrite(random_bytes(1000), str(tmp_path / "a.bin"))
    handle.async_pwrite(random_bytes(1000), str(tmp_path / "b.bin"))
    assert handle.sync_pwrite(random_bytes(1000), str(tmp_path / "c.bin")) == 3
    assert handle.pending() == 0


def test_deepspeed_pread_pwrite_read_write_with_validate(handle, tmp_path):
    x = random_bytes(20_000)
    path = str(tmp_path / "v.bin")
    assert handle.pwrite(x, path, True, False) == 1
    y = torch.empty_like(x)
    assert handle.pread(y, path, True, True) == 0 and handle.wait() == 1
    assert torch.equal(x, y)
    assert handle.write(x, path, True) == 1 and handle.read(y, path, True) == 1


def test_validate_names_the_first_differing_byte(tmp_path):
    from anyaccel.ops.aio.handle import _validate

    path = tmp_path / "f.bin"
    path.write_bytes(b"\0" * 100 + b"\1" + b"\0" * 10)
    with pytest.raises(errors.AIOValidationError, match="from byte 100 on"):
        _validate(False, torch.zeros(111, dtype=torch.uint8), str(path), 5)
    _validate(True, torch.zeros(100, dtype=torch.uint8), str(path), 0)


def test_file_descriptors_as_deepspeeds_fast_writer(handle, tmp_path):
    path = tmp_path / "fd.bin"
    x = random_bytes(3 * 4096 + 17)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        assert handle.async_pwrite(x, fd, 0) == 0 and handle.wait() == 1
    finally:
        os.close(fd)
    assert path.read_bytes() == x.numpy().tobytes()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))  # a caller's O_DIRECT fd, unaligned tail
    try:
        y = torch.empty_like(x)
        assert handle.pread(y, fd, False, False) == 1
        assert torch.equal(x, y)
        with pytest.raises(errors.AIOError, match="open for reading only") as err:
            handle.async_pwrite(x, fd)
        assert err.value.errno == 9
    finally:
        os.close(fd)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        with pytest.raises(errors.AIOError, match="O_APPEND"):
            handle.async_pwrite(x, fd)
    finally:
        os.close(fd)


def test_async_pwrite_takes_deepspeeds_keywords_for_a_path_or_an_fd(handle, tmp_path):
    # DeepSpeed's two async_pwrite overloads: (buffer, filename, file_offset) and (buffer, fd, file_offset), called
    # by keyword as its unit/v1/nvme/test_aio.py does
    x = random_bytes(2 * 4096 + 5)
    by_name, by_fd = tmp_path / "name.bin", tmp_path / "fd.bin"
    assert handle.async_pwrite(buffer=x[:4096], filename=str(by_name), file_offset=0) == 0
    assert handle.async_pwrite(buffer=x[4096:], filename=str(by_name), file_offset=4096) == 0
    assert handle.wait() == 2
    fd = os.open(by_fd, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        assert handle.async_pwrite(buffer=x[4096:], fd=fd, file_offset=4096) == 0
        assert handle.async_pwrite(buffer=x[:4096], fd=fd, file_offset=0) == 0
        assert handle.wait() == 2
        with pytest.raises(TypeError, match="both given; give one of them"):
            handle.async_pwrite(x, str(by_name), fd=fd)
    finally:
        os.close(fd)
    with pytest.raises(TypeError, match="filename=None is invalid"):
        handle.async_pwrite(buffer=x)
    assert by_name.read_bytes() == by_fd.read_bytes() == x.numpy().tobytes()


def test_racing_transfers_are_refused_until_wait(handle, tmp_path):
    buf = random_bytes(50_000)
    a, b = str(tmp_path / "a.bin"), str(tmp_path / "b.bin")
    handle.sync_pwrite(buf, a)
    handle.sync_pwrite(buf, b)
    handle.async_pread(buf[:30_000], a)
    with pytest.raises(errors.AIOConflictError, match="uses memory") as err:
        handle.async_pread(buf[20_000:], b)  # a second read into overlapping memory
    assert isinstance(err.value, ValueError)
    with pytest.raises(errors.AIOConflictError, match="uses memory"):
        handle.async_pwrite(buf[:10], b)  # writing from memory a read is filling
    handle.async_pread(buf[30_000:], b)  # disjoint memory: fine
    other = random_bytes(100)
    handle.async_pwrite(other, str(tmp_path / "c.bin"), 0)
    with pytest.raises(errors.AIOConflictError, match="file bytes"):
        handle.async_pwrite(random_bytes(100), str(tmp_path / "c.bin"), 50)  # same file bytes, both write
    reader = torch.empty(100, dtype=torch.uint8)
    handle.async_pwrite(random_bytes(50), str(tmp_path / "c.bin"), 100)  # adjacent bytes: fine
    assert handle.wait() == 4
    handle.async_pread(reader, str(tmp_path / "c.bin"))
    handle.async_pread(torch.empty(100, dtype=torch.uint8), str(tmp_path / "c.bin"))  # two readers: fine
    assert handle.wait() == 2 and torch.equal(reader, other)


def test_the_handle_keeps_the_buffer_alive_until_wait(handle, tmp_path):
    path = tmp_path / "alive.bin"
    expected = random_bytes(200_000, seed=3)
    buf = expected.clone()
    handle.async_pwrite(buf, str(path))
    del buf
    gc.collect()
    torch.empty(200_000, dtype=torch.uint8).fill_(0)  # reuse freed memory if it had been freed
    assert handle.wait() == 1
    assert path.read_bytes() == expected.numpy().tobytes()


def test_one_handle_serves_many_threads(aio_module, tmp_path):
    h = aio_module.aio_handle(block_size=SMALL_BLOCK, queue_depth=8)
    failures: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(5):
                x = random_bytes(30_000 + 97 * i + j, seed=100 * i + j)
                path = str(tmp_path / f"t{i}-{j}.bin")
                h.sync_pwrite(x, path)
                y = torch.empty_like(x)
                h.sync_pread(y, path)
                assert torch.equal(x, y)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    h.close()
    assert failures == []


def test_constructor_defaults_and_getters_are_deepspeeds(aio_module):
    with aio_module.aio_handle() as h:
        assert (h.get_block_size(), h.get_queue_depth(), h.get_single_submit(), h.get_overlap_events(),
                h.get_intra_op_parallelism(), h.get_alignment()) == (1024 * 1024, 128, False, False, 1, 512)
    with aio_module.aio_handle(block_size=4096, queue_depth=2, single_submit=True, overlap_events=True,
                               intra_op_parallelism=4) as h:
        assert (h.get_block_size(), h.get_queue_depth(), h.get_single_submit(), h.get_overlap_events(),
                h.get_intra_op_parallelism(), h.get_alignment()) == (4096, 2, True, True, 4, 2048)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"block_size": 0}, ValueError, "block_size=0 is invalid; accepted: a finite 1 <= block_size <= 1073741824"),
    ({"queue_depth": -1}, ValueError, "queue_depth=-1 is invalid"),
    ({"intra_op_parallelism": 2.0}, TypeError, "intra_op_parallelism=2.0 is invalid; accepted: an int"),
])
def test_bad_constructor_arguments_are_typed_errors(aio_module, kwargs, error, match):
    with pytest.raises(error, match=match):
        aio_module.aio_handle(**kwargs)


def test_bad_call_arguments_are_typed_errors(handle, tmp_path):
    path = str(tmp_path / "x.bin")
    with pytest.raises(TypeError, match="buffer=list is invalid"):
        handle.async_pwrite([1, 2], path)
    with pytest.raises(TypeError, match="filename=None is invalid"):
        handle.async_pwrite(torch.zeros(1), None)
    with pytest.raises(TypeError, match="filename=''"):
        handle.async_pwrite(torch.zeros(1), "")
    with pytest.raises(ValueError, match="file_offset=-1 is invalid; accepted: an int >= 0"):
        handle.async_pwrite(torch.zeros(1), path, -1)
    with pytest.raises(ValueError, match="fd=-3 is invalid"):
        handle.async_pwrite(torch.zeros(1), -3)
    with pytest.raises(ValueError, match="not a contiguous dense tensor; pass a contiguous one"):
        handle.async_pread(torch.zeros(4, 4).t(), path)
    with pytest.raises(ValueError, match="timeout=-1 is invalid"):
        handle.wait(timeout=-1)
    assert handle.pending() == 0


def test_close_waits_then_refuses_and_is_idempotent(aio_module, tmp_path):
    h = aio_module.aio_handle(block_size=SMALL_BLOCK, queue_depth=2)
    x = random_bytes(100_000)
    h.async_pwrite(x, str(tmp_path / "c.bin"))
    h.close()
    assert (tmp_path / "c.bin").read_bytes() == x.numpy().tobytes()
    h.close()
    with pytest.raises(errors.AIOHandleError, match="closed"):
        h.sync_pwrite(x, str(tmp_path / "d.bin"))
    with pytest.raises(errors.AIOHandleError, match="closed"):
        h.wait()
    assert "closed" in repr(h)


def test_a_closed_or_unknown_handle_id_is_refused_by_the_kernel(aio_module):
    with pytest.raises(RuntimeError, match=r"kind=handle.*handle=999999 is not an open handle"):
        aio_module.aio_wait(999999, 0.0)
    aio_module.aio_close(999999)  # closing an unknown handle is harmless


def test_new_cpu_locked_tensor_is_aligned_recognised_and_freed_once(handle):
    example = torch.empty(0, dtype=torch.bfloat16)
    t = handle.new_cpu_locked_tensor(12345, example)
    assert t.dtype == torch.bfloat16 and t.shape == (12345,) and t.data_ptr() % 4096 == 0
    assert handle.is_pinned(t) and handle.is_pinned(t[100:200]) and handle.is_pinned(t.narrow(0, 5, 10))
    assert not handle.is_pinned(torch.empty(10))
    assert handle.free_cpu_locked_tensor(t) is True
    assert handle.free_cpu_locked_tensor(t) is False
    assert not handle.is_pinned(t)
    empty = handle.new_cpu_locked_tensor(0, example)
    assert empty.numel() == 0
    with pytest.raises(ValueError, match="num_elem=-1 is invalid"):
        handle.new_cpu_locked_tensor(-1, example)


def test_a_locked_tensor_is_forgotten_when_it_dies(handle):
    from anyaccel.ops.aio import pinned

    t = handle.new_cpu_locked_tensor(4096, torch.empty(0, dtype=torch.uint8))
    start = t.data_ptr()
    assert start in pinned._REGIONS
    del t
    gc.collect()
    assert start not in pinned._REGIONS


@pytest.mark.parametrize(("num_elem", "dtype"), [(2**62, torch.float32), (2**63, torch.uint8),
                                                 (2**100, torch.float16)])
def test_a_locked_tensor_count_past_the_ops_size_is_a_value_error(handle, num_elem, dtype):
    """A count past the 64-bit size is a ValueError; torch.empty's "Overflow when unpacking long long" (a TypeError)
    leaked before."""
    with pytest.raises(ValueError, match=rf"num_elem={num_elem} of {dtype} is \d+ bytes, more than one buffer"):
        handle.new_cpu_locked_tensor(num_elem, torch.empty(0, dtype=dtype))
