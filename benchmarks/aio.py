"""Benchmark: anyaccel's async I/O op vs the disk's sequential bandwidth and DeepSpeed's ``aio_handle``.

For each size (default 1 GiB and 8 GiB) one page-aligned, page-locked host buffer is written to a file in
``--dir`` and read back, by

- the disk probe: ``fio`` (libaio, ``O_DIRECT``, the same block size and queue depth), else up to 8 ``dd``
  processes in parallel on slices of the file (``oflag=direct``/``iflag=direct``);
- anyaccel: ``AsyncIOBuilder().load().aio_handle(...).sync_pwrite`` / ``sync_pread``;
- DeepSpeed's ``aio_handle`` (its ``AsyncIOBuilder``, which needs libaio-dev), where it loads;

interleaved round-robin (each round runs every implementation once, the order rotating), every write into
a fresh file, every read of the file just written. Reported: the median MB/s (1e6 bytes/s) with its range,
and the median over rounds of the same-round ratios anyaccel / disk and anyaccel / DeepSpeed. anyaccel's
reads are checked against the written pattern. Nothing is fsync-ed (as fio with ``direct=1``, DeepSpeed and
anyaccel: ``O_DIRECT`` writes complete when the device acknowledges them).

Both handles get the same settings and the same buffer (DeepSpeed's ``new_cpu_locked_tensor`` when
DeepSpeed is measured, so DeepSpeed does not bounce through a copy; anyaccel's otherwise). Rounds stop when
``--budget-s`` seconds of measuring (default 100) have passed, and a size whose one round is estimated (from
the smaller sizes) at over 1.5 times the budget left is skipped, so one command stays bounded (about 2.5
minutes on a 2-vCPU machine, with 70 s of loading and allocating); DeepSpeed's op builds on
its first use (minutes), which is timed and printed apart. Sizes that do not fit in available memory are
skipped with a message.

Usage (from the repository root; ``--dir`` must be on the disk to measure, not a tmpfs)::

    python benchmarks/aio.py --dir /var/tmp
    python benchmarks/aio.py --dir /nvme/scratch --sizes 1G --repeats 5 --deepspeed off
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _common import GIB, REPO_ROOT, format_table, median

from anyaccel.accelerator.host_memory_stats import available_host_memory_bytes

logger = logging.getLogger("benchmarks.aio")
MIB = 1024**2


def parse_bytes(text: str) -> int:
    """``"1G"`` -> 1 GiB, ``"512M"`` -> 512 MiB, ``"4096"`` -> 4096 bytes (binary units)."""
    units = {"k": 1024, "m": MIB, "g": GIB}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    try:
        return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except (ValueError, KeyError):
        raise ValueError(f"bad size {text!r}; accepted: bytes, or a number with K/M/G (binary)") from None


def label(nbytes: int) -> str:
    """``1 GiB``, ``512 MiB``."""
    return f"{nbytes / GIB:g} GiB" if nbytes >= GIB else f"{nbytes / MIB:g} MiB"


def filesystem_of(path: Path) -> tuple[str, str]:
    """``(type, source)`` of the mount holding ``path`` (from /proc/self/mountinfo), or ("?", "?")."""
    best, found = -1, ("?", "?")
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    target = str(path.resolve())
    for line in lines:
        left, _, right = line.partition(" - ")
        mount_point = left.split()[4]
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) > best:
            fields = right.split()
            best, found = len(mount_point), (fields[0], fields[1])
    return found


# ---- the disk probe -------------------------------------------------------------------------------------


class DiskProbe:
    """Sequential O_DIRECT bandwidth of the disk under ``directory``: fio when installed, else ``dd``
    processes in parallel, each on its slice of the file (``min(queue_depth, 8)`` of them: one dd keeps one
    request in flight, which understates NVMe drives), the file preallocated as fio does."""

    def __init__(self, block: int, queue_depth: int, probe: str) -> None:
        self.block = block
        self.queue_depth = queue_depth
        self.fio = shutil.which("fio") if probe in ("auto", "fio") else None
        if probe == "fio" and not self.fio:
            raise SystemExit("--probe fio: fio is not installed (apt-get install fio)")
        self.jobs = max(1, min(queue_depth, 8))
        if self.fio:
            version = subprocess.run([self.fio, "--version"], capture_output=True, text=True).stdout.strip()
            self.name = f"{version} (libaio, O_DIRECT, {label(block)} blocks, iodepth {queue_depth})"
        else:
            self.name = f"{self.jobs} parallel dd (O_DIRECT, {label(block)} blocks; install fio for the standard probe)"

    def run(self, write: bool, path: Path, nbytes: int) -> float:
        """Seconds to write (or read) ``nbytes`` sequentially at ``path``."""
        if self.fio:
            return self._fio(write, path, nbytes)
        return self._dd(write, path, nbytes)

    def _fio(self, write: bool, path: Path, nbytes: int) -> float:
        cmd = [self.fio, "--name=seq", f"--filename={path}", f"--size={nbytes}", f"--bs={self.block}",
               "--direct=1", f"--rw={'write' if write else 'read'}", "--ioengine=libaio",
               f"--iodepth={self.queue_depth}", "--output-format=json"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        job = json.loads(out[out.index("{"):])["jobs"][0]["write" if write else "read"]
        return nbytes / job["bw_bytes"]

    def _dd(self, write: bool, path: Path, nbytes: int) -> float:
        blocks = nbytes // self.block
        per_job = -(-blocks // self.jobs)
        cmds = []
        for j in range(self.jobs):
            count = min(per_job, blocks - j * per_job)
            if count <= 0:
                break
            if write:
                cmds.append(["dd", "if=/dev/zero", f"of={path}", f"bs={self.block}", f"count={count}",
                             f"seek={j * per_job}", "oflag=direct", "conv=notrunc"])
            else:
                cmds.append(["dd", f"if={path}", "of=/dev/null", f"bs={self.block}", f"count={count}",
                             f"skip={j * per_job}", "iflag=direct"])
        start = time.perf_counter()
        if write:
            with open(path, "wb") as f:  # preallocate, as fio (and anyaccel) do before writing
                os.posix_fallocate(f.fileno(), 0, blocks * self.block)
        procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in cmds]
        for proc in procs:
            if proc.wait() != 0:
                raise SystemExit(f"dd failed: {proc.stderr.read().decode() if proc.stderr else ''}")
        return time.perf_counter() - start


# ---- the handles ----------------------------------------------------------------------------------------


def load_anyaccel(args: argparse.Namespace) -> Any:
    """anyaccel's handle; prints the load time."""
    from anyaccel import get_accelerator

    start = time.perf_counter()
    module = get_accelerator().create_op_builder("AsyncIOBuilder").load()
    print(f"anyaccel: op {module.op} loaded ({module.source}) in {time.perf_counter() - start:.1f} s")
    return module.aio_handle(args.block, args.queue_depth, False, True, 1)


def load_deepspeed(args: argparse.Namespace) -> Any | None:
    """DeepSpeed's handle, or None (the reason printed) when DeepSpeed or its op is unavailable."""
    if args.deepspeed == "off":
        return None
    try:
        import deepspeed
        from deepspeed.accelerator import get_accelerator as ds_accelerator
    except ImportError as exc:
        print(f"DeepSpeed: not importable ({exc}); its rows are left out")
        return None
    builder = ds_accelerator().create_op_builder("AsyncIOBuilder")
    if builder is None or not builder.is_compatible(verbose=False):
        print("DeepSpeed: its AsyncIOBuilder is not compatible here (it needs libaio-dev); its rows are left out")
        return None
    start = time.perf_counter()
    try:
        module = builder.load(verbose=False)
    except Exception as exc:  # a failed DeepSpeed build must not end the benchmark
        print(f"DeepSpeed: its aio op failed to load ({type(exc).__name__}: {exc}); its rows are left out")
        return None
    print(f"DeepSpeed {deepspeed.__version__}: aio op loaded in {time.perf_counter() - start:.1f} s "
          "(a first load JIT-builds it)")
    return module.aio_handle(args.block, args.queue_depth, False, True, 1)


def fill_pattern(buf: torch.Tensor) -> None:
    """Byte ``i`` of MiB ``k`` of ``buf`` = ``k % 251`` (cheap to write, cheap to check)."""
    rows = buf.numel() // MIB
    buf[:rows * MIB].view(rows, MIB).copy_((torch.arange(rows) % 251).to(torch.uint8)[:, None].expand(rows, MIB))
    buf[rows * MIB:] = rows % 251


def sample_rows(buf: torch.Tensor) -> list[int]:
    rows = buf.numel() // MIB
    return sorted({0, rows // 2, max(rows - 1, 0)})


def clobber(buf: torch.Tensor) -> None:
    """Overwrite the sampled MiBs, so a read that moved nothing is caught by :func:`check_pattern`."""
    for r in sample_rows(buf):
        buf[r * MIB:(r + 1) * MIB] = 255


def check_pattern(buf: torch.Tensor, who: str) -> None:
    for r in sample_rows(buf):
        if not bool((buf[r * MIB:(r + 1) * MIB] == r % 251).all()):
            raise SystemExit(f"{who}: MiB {r} read back wrong: the read is broken")


# ---- the measurement ------------------------------------------------------------------------------------


def measure_size(nbytes: int, repeats: int, directory: Path, probe: DiskProbe, ours: Any, theirs: Any | None,
                 deadline: float) -> dict[tuple[str, str], list[float]]:
    """Seconds per (implementation, "write"/"read"), round-robin; rounds stop at ``deadline``."""
    allocator = theirs if theirs is not None else ours
    buf = allocator.new_cpu_locked_tensor(nbytes, torch.empty(0, dtype=torch.uint8))
    who_allocated = "DeepSpeed's" if theirs is not None else "anyaccel's"
    print(f"{label(nbytes)}: buffer from {who_allocated} new_cpu_locked_tensor, address % 4096 = "
          f"{buf.data_ptr() % 4096}, pinned per anyaccel: {ours.is_pinned(buf)}")
    fill_pattern(buf)

    def handle_op(h: Any, name: str) -> Callable[[bool, Path], float]:
        def run(write: bool, path: Path) -> float:
            if not write:
                clobber(buf)
            start = time.perf_counter()
            count = h.sync_pwrite(buf, str(path)) if write else h.sync_pread(buf, str(path))
            seconds = time.perf_counter() - start
            if count != 1:
                raise SystemExit(f"{name}: the {'write' if write else 'read'} returned {count}, not 1")
            if not write and name == "anyaccel":
                check_pattern(buf, name)
            return seconds
        return run

    impls: dict[str, Callable[[bool, Path], float]] = {
        "disk": lambda write, path: probe.run(write, path, nbytes),
        "anyaccel": handle_op(ours, "anyaccel"),
    }
    if theirs is not None:
        impls["DeepSpeed"] = handle_op(theirs, "DeepSpeed")
    times: dict[tuple[str, str], list[float]] = {(n, op): [] for n in impls for op in ("write", "read")}
    names = list(impls)
    for rnd in range(repeats):
        if rnd > 0 and time.monotonic() > deadline:
            print(f"  budget spent: {rnd} of {repeats} rounds measured")
            break
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for name in order:
            path = directory / f"aio-bench-{name}.dat"
            path.unlink(missing_ok=True)
            times[(name, "write")].append(impls[name](True, path))
            times[(name, "read")].append(impls[name](False, path))
            path.unlink()
    if theirs is not None:
        theirs.free_cpu_locked_tensor(buf)
    else:
        ours.free_cpu_locked_tensor(buf)
    return times


def table_rows(nbytes: int, times: dict[tuple[str, str], list[float]]) -> list[list[str]]:
    def mbps(seconds: list[float]) -> str:
        if not seconds:
            return "-"
        rates = [nbytes / s / 1e6 for s in seconds]
        return f"{median(rates):.0f} ({min(rates):.0f}-{max(rates):.0f})"

    def ratio(op: str, other: str) -> str:
        ours, theirs = times.get(("anyaccel", op), []), times.get((other, op), [])
        pairs = [t / o for o, t in zip(ours, theirs, strict=False)]  # same round: their seconds / ours
        return f"{median(pairs):.2f} ({min(pairs):.2f}-{max(pairs):.2f})" if pairs else "-"

    rows = []
    for op in ("write", "read"):
        rounds = len(times[("anyaccel", op)])
        rows.append([label(nbytes), op, str(rounds), mbps(times[("disk", op)]), mbps(times[("anyaccel", op)]),
                     mbps(times.get(("DeepSpeed", op), [])), ratio(op, "disk"), ratio(op, "DeepSpeed")])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="directory on the disk to measure (default: the temp dir; a scratch subdirectory is "
                             "made and removed)")
    parser.add_argument("--sizes", default="1G,8G", help="comma-separated sizes (binary units), default 1G,8G")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per size below 4 GiB (default 3)")
    parser.add_argument("--repeats-large", type=int, default=1, help="rounds per size of 4 GiB and more (default 1)")
    parser.add_argument("--block", type=parse_bytes, default=MIB, help="bytes per request (default 1M)")
    parser.add_argument("--queue-depth", type=int, default=32, help="requests in flight (default 32)")
    parser.add_argument("--probe", choices=("auto", "fio", "dd"), default="auto",
                        help="the disk probe: fio when installed (auto), or parallel dd")
    parser.add_argument("--deepspeed", choices=("auto", "off"), default="auto",
                        help="measure DeepSpeed's aio_handle where it loads (default auto)")
    parser.add_argument("--budget-s", type=float, default=100.0,
                        help="seconds of measuring: later sizes get the rounds that fit, and are skipped when one "
                             "round would take over 1.5 times what is left (default 100)")
    args = parser.parse_args(argv)
    sizes = [parse_bytes(s) for s in args.sizes.split(",") if s.strip()]

    fs_type, source = filesystem_of(args.dir)
    scratch = Path(tempfile.mkdtemp(prefix="anyaccel-aio-bench-", dir=args.dir))
    print(f"dir {scratch} ({fs_type} on {source}); torch {torch.__version__}; {os.cpu_count()} CPUs, load "
          f"average {os.getloadavg()[0]:.1f}; repo {REPO_ROOT}")
    if fs_type in ("tmpfs", "ramfs"):
        print(f"WARNING: {args.dir} is on {fs_type} (memory, not a disk): the figures below say nothing about a disk")
    probe = DiskProbe(args.block, args.queue_depth, args.probe)
    print(f"disk probe: {probe.name}")
    print(f"handles: block_size {args.block}, queue_depth {args.queue_depth}, intra_op_parallelism 1, "
          "overlap_events True")
    try:
        ours = load_anyaccel(args)
        theirs = load_deepspeed(args)
        deadline = time.monotonic() + args.budget_s
        rows = []
        round_s_per_byte = 0.0  # one round of every implementation, from the sizes measured so far
        for nbytes in sizes:
            need, available = nbytes + GIB // 2, available_host_memory_bytes()
            if available < need:
                print(f"{label(nbytes)}: skipped, {available / GIB:.1f} GiB of memory available, "
                      f"{need / GIB:.1f} GiB needed")
                continue
            repeats = args.repeats_large if nbytes >= 4 * GIB else args.repeats
            left = deadline - time.monotonic()
            if round_s_per_byte:  # bound the run: the rounds the budget holds (one if it nearly does)
                estimate = round_s_per_byte * nbytes
                if estimate > 1.5 * left:
                    print(f"{label(nbytes)}: skipped, one round would take about {estimate:.0f} s and {left:.0f} s "
                          "of the budget are left (raise --budget-s)")
                    continue
                fit = max(1, int(left / estimate))
                if fit < repeats:
                    print(f"{label(nbytes)}: {fit} of {repeats} rounds fit in the {left:.0f} s of budget left")
                    repeats = fit
            elif left <= 0:
                print(f"{label(nbytes)}: skipped, the budget of {args.budget_s:g} s is spent")
                continue
            times = measure_size(nbytes, repeats, scratch, probe, ours, theirs, deadline)
            rows += table_rows(nbytes, times)
            measured = [median(v) / nbytes for v in times.values() if v]
            round_s_per_byte = max(round_s_per_byte, sum(measured))
        print()
        print(format_table(["size", "op", "rounds", "disk MB/s", "anyaccel MB/s", "DeepSpeed MB/s",
                            "anyaccel / disk", "anyaccel / DeepSpeed"], rows))
        print("\nMB/s: median (min-max) of the rounds; ratios: median (min-max) of same-round speed ratios; "
              f"load average now {os.getloadavg()[0]:.1f}.")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())
