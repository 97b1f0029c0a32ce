"""Failures of the async I/O op that a normal file never shows: a full disk (a small tmpfs, a file-size
limit), I/O errors and end-of-file in the middle of a transfer, a transfer that hangs (wait()'s timeout), and
fork(). Anything that mounts, limits or injects runs in a child process.

Fault injection (documented in docs/aio.md "Testing failures"): a small LD_PRELOAD library compiled here
interposes pread/pwrite for files whose path contains a marker, making them fail with EIO, return end of
file, or block until a release file appears.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SHIM = r"""
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

// AIO_FAULT=<eio|eof|hang>, AIO_FAULT_MARK=<substring of the path>, AIO_FAULT_AFTER=<calls that succeed>,
// AIO_FAULT_RELEASE=<file whose existence ends a hang>.
static int matches(int fd) {
  const char* mark = getenv("AIO_FAULT_MARK");
  char link[64], target[PATH_MAX];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof(target) - 1);
  if (mark == NULL || n <= 0) return 0;
  target[n] = 0;
  return strstr(target, mark) != NULL;
}

static int fault(int fd) {  // 0: pass through; 1: fail with EIO; 2: end of file
  static int calls = 0;
  if (!matches(fd)) return 0;
  const char* after = getenv("AIO_FAULT_AFTER");
  if (__atomic_fetch_add(&calls, 1, __ATOMIC_SEQ_CST) < (after ? atoi(after) : 0)) return 0;
  const char* kind = getenv("AIO_FAULT");
  if (strcmp(kind, "hang") == 0) {
    const struct timespec ms = {0, 1000000};
    while (access(getenv("AIO_FAULT_RELEASE"), F_OK) != 0) nanosleep(&ms, NULL);
    return 0;
  }
  return strcmp(kind, "eio") == 0 ? 1 : 2;
}

#define WRAP(name, buf_t)                                                                   \
  extern "C" ssize_t name(int fd, buf_t buf, size_t n, off_t off) {                       \
    static ssize_t (*real)(int, buf_t, size_t, off_t) = 0;                                 \
    if (!real) real = (ssize_t(*)(int, buf_t, size_t, off_t))dlsym(RTLD_NEXT, #name);     \
    int f = fault(fd);                                                                     \
    if (f == 1) { errno = EIO; return -1; }                                                \
    if (f == 2) return 0;                                                                  \
    return real(fd, buf, n, off);                                                          \
  }
WRAP(pread, void*)
WRAP(pread64, void*)
WRAP(pwrite, const void*)
WRAP(pwrite64, const void*)
"""


@pytest.fixture(scope="module")
def fault_shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The LD_PRELOAD library above, compiled with the C++ compiler the ops use."""
    from anyaccel.op_builder.toolchains.host import find_cxx

    cxx = find_cxx()
    if cxx is None:
        pytest.skip("no C++ compiler")
    d = tmp_path_factory.mktemp("shim")
    (d / "shim.cpp").write_text(SHIM)
    subprocess.run([str(cxx), "-shared", "-fPIC", "-O1", str(d / "shim.cpp"), "-o", str(d / "shim.so"), "-ldl"],
                   check=True, capture_output=True)
    return d / "shim.so"


def shim_env(shim: Path, kind: str, mark: str, after: int = 0, release: str = "") -> dict[str, str]:
    return {"LD_PRELOAD": str(shim), "AIO_FAULT": kind, "AIO_FAULT_MARK": mark, "AIO_FAULT_AFTER": str(after),
            "AIO_FAULT_RELEASE": release}


REPORT = """
def outcome(fn):
    try:
        return {"value": fn()}
    except Exception as exc:
        return {"error": type(exc).__name__, "errno": getattr(exc, "errno", None), "message": str(exc),
                "failed": getattr(exc, "failed", None), "operations": getattr(exc, "operations", None)}
"""


def test_an_io_error_mid_transfer_fails_wait_after_every_transfer_finished(run_python, fault_shim, tmp_path):
    out = run_python(REPORT + f"""
h = aio.aio_handle(block_size=8192, queue_depth=2)
good, bad = torch.arange(50000, dtype=torch.uint8), torch.ones(50000, dtype=torch.uint8)
with open("{tmp_path}/faulty.bin", "wb") as f:
    f.write(bytes([7]) * 1000)
h.async_pwrite(good, "{tmp_path}/good.bin")
h.async_pwrite(bad, "{tmp_path}/faulty.bin", 1000)
first = outcome(h.wait)
after = {{"pending": h.pending(), "again": h.sync_pwrite(good, "{tmp_path}/good2.bin")}}
print(json.dumps([first, after]))
""", env=shim_env(fault_shim, "eio", "faulty", after=2))
    first, after = out
    assert first["error"] == "AIOError" and first["errno"] == 5
    assert (first["failed"], first["operations"]) == (1, 2)
    assert "1 of 2 operations failed" in first["message"] and "faulty.bin" in first["message"]
    assert "Input/output error" in first["message"] and "dmesg" in first["message"]
    assert after == {"pending": 0, "again": 1}
    assert (tmp_path / "good.bin").read_bytes() == bytes(i % 256 for i in range(50000))
    # the failed write had set the file's size at submission (fallocate); it is given back its former size, so
    # the file claims no bytes the write did not deliver, and what it held before is intact
    assert (tmp_path / "faulty.bin").read_bytes() == bytes([7]) * 1000


def test_a_file_that_shrinks_during_a_read_is_an_error_not_a_partial_read(run_python, fault_shim, tmp_path):
    (tmp_path / "shrinking.bin").write_bytes(b"\1" * 40000)
    out = run_python(REPORT + f"""
h = aio.aio_handle(block_size=8192, queue_depth=1)
buf = torch.zeros(40000, dtype=torch.uint8)
print(json.dumps(outcome(lambda: h.sync_pread(buf, "{tmp_path}/shrinking.bin"))))
""", env=shim_env(fault_shim, "eof", "shrinking", after=1))
    assert out["error"] == "FileTooShortError" and "shrank" in out["message"]


def test_wait_times_out_on_a_hung_transfer_and_reaps_it_later(run_python, fault_shim, tmp_path):
    release = tmp_path / "release"
    out = run_python(REPORT + f"""
import pathlib
h = aio.aio_handle(block_size=8192, queue_depth=1)
buf = torch.ones(10000, dtype=torch.uint8)
h.async_pwrite(buf, "{tmp_path}/hung.bin")
timed_out = outcome(lambda: h.wait(timeout=0.2))
pending = h.pending()
pathlib.Path("{release}").touch()
print(json.dumps([timed_out, pending, h.wait()]))
""", env=shim_env(fault_shim, "hang", "hung.bin", release=str(release)))
    timed_out, pending, reaped = out
    assert timed_out["error"] == "AIOTimeoutError" and "still running after 0.2 s" in timed_out["message"]
    assert pending == 1 and reaped == 1
    assert (tmp_path / "hung.bin").read_bytes() == b"\1" * 10000


@pytest.mark.parametrize("direction", ["write", "read"])
def test_close_that_times_out_keeps_the_handle_open_and_the_transfer_reapable(run_python, fault_shim, tmp_path,
                                                                             direction):
    """A close that times out changes nothing; close(timeout=...) said the transfers "stay pending" but closed the
    handle, cancelled
    the transfer and gave a written file back its former size (0 bytes)."""
    release = tmp_path / "release"
    (tmp_path / "source.hung.bin").write_bytes(bytes(range(256)) * 40)
    submit = ('h.async_pwrite(buf, "{0}/hung.bin")' if direction == "write" else
              'h.async_pread(buf, "{0}/source.hung.bin")').format(tmp_path)
    out = run_python(REPORT + f"""
import pathlib
h = aio.aio_handle(block_size=8192, queue_depth=1)
buf = torch.ones(10240, dtype=torch.uint8)
{submit}
timed_out = outcome(lambda: h.close(timeout=0.2))
bad = outcome(lambda: h.close(timeout=-1))
pending = h.pending()
pathlib.Path("{release}").touch()
reaped = h.wait()
closed = outcome(lambda: h.close(timeout=5))
after = outcome(h.pending)
print(json.dumps([timed_out, bad, pending, reaped, closed, after, buf[:300].tolist()]))
""", env=shim_env(fault_shim, "hang", "hung.bin", release=str(release)), timeout_s=120)  # before the fix, close()
    # waited on the hung transfer it had just cancelled, forever (the release file comes after it)
    timed_out, bad, pending, reaped, closed, after, head = out
    assert timed_out["error"] == "AIOTimeoutError", timed_out
    assert "close: 1 transfers still running after 0.2 s" in timed_out["message"]
    assert "the handle stays open" in timed_out["message"]
    assert bad["error"] == "ValueError" and "timeout=-1 is invalid" in bad["message"]
    assert (pending, reaped) == (1, 1)
    assert closed == {"value": None}
    assert after["error"] == "AIOHandleError"
    if direction == "write":
        assert (tmp_path / "hung.bin").read_bytes() == b"\1" * 10240
    else:
        assert head == list(range(256)) + list(range(44))


def test_a_file_size_limit_fails_the_write_as_a_full_disk_at_the_limit(run_python, tmp_path):
    out = run_python(REPORT + f"""
import resource
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
h = aio.aio_handle(block_size=8192, queue_depth=2)
big = outcome(lambda: h.sync_pwrite(torch.ones(2 << 20, dtype=torch.uint8), "{tmp_path}/big.bin"))
small = outcome(lambda: h.sync_pwrite(torch.ones(1 << 19, dtype=torch.uint8), "{tmp_path}/small.bin"))
print(json.dumps([big, small]))
""")
    big, small = out
    assert big["error"] == "DiskFullError" and big["errno"] == 27 and "ulimit -f" in big["message"]
    # the write that would grow the file past the limit is refused at submission, when its blocks are reserved
    # and the size set (fallocate), before a byte is written
    assert "reserving 2097152 bytes at offset 0" in big["message"], big["message"]
    assert (tmp_path / "big.bin").stat().st_size == 0  # nothing written, nothing claimed
    assert small == {"value": 1}


def _can_mount_private_tmpfs() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d && umount $d && rmdir $d"],
                           capture_output=True)
    return probe.returncode == 0


def test_a_full_tmpfs_refuses_a_write_that_does_not_fit(run_python, tmp_path):
    if not _can_mount_private_tmpfs():
        pytest.skip("needs root and mount namespaces (unshare -m) to mount a private tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
              f'mount -t tmpfs -o size=1m tmpfs {mnt} && exec "$@"', "sh"]
    out = run_python(REPORT + f"""
h = aio.aio_handle(block_size=8192, queue_depth=2)
fits = outcome(lambda: h.sync_pwrite(torch.ones(600_000, dtype=torch.uint8), "{mnt}/a.bin"))
full = outcome(lambda: h.sync_pwrite(torch.ones(600_000, dtype=torch.uint8), "{mnt}/b.bin"))
back = torch.zeros(600_000, dtype=torch.uint8)
h.sync_pread(back, "{mnt}/a.bin")
print(json.dumps([fits, full, bool((back == 1).all())]))
""", prefix=prefix)
    fits, full, intact = out
    assert fits == {"value": 1} and intact
    assert full["error"] == "DiskFullError" and full["errno"] == 28 and "b.bin" in full["message"]
    assert not any(mnt.iterdir()), "the tmpfs was private to the child"


def test_a_forked_child_gets_a_typed_error_and_the_parent_keeps_working(run_python, tmp_path):
    out = run_python(REPORT + f"""
h = aio.aio_handle(block_size=8192, queue_depth=2)
buf = torch.ones(1000, dtype=torch.uint8)
h.sync_pwrite(buf, "{tmp_path}/before.bin")
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    res = outcome(lambda: h.sync_pwrite(buf, "{tmp_path}/child.bin"))
    os.write(w, json.dumps(res).encode())
    os._exit(0)
os.close(w)
child = json.loads(os.read(r, 65536))
os.waitpid(pid, 0)
print(json.dumps([child, h.sync_pwrite(buf, "{tmp_path}/after.bin")]))
""")
    child, parent = out
    assert child["error"] == "AIOHandleError" and "fork()ed child" in child["message"]
    assert parent == 1 and not (tmp_path / "child.bin").exists()
