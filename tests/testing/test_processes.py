"""``anyaccel.testing.processes.end_rank``: output flushed, the status kept, the group destroyed first."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    import torch.distributed as dist
    from anyaccel.testing.processes import end_rank

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    import torch.distributed.nn  # after the group: its default arguments keep the group alive
    total = torch.ones(4)
    dist.all_reduce(total)
    import atexit
    atexit.register(lambda: print("atexit ran"))
    print("reduced", total.tolist(), end="")  # no newline: only an explicit flush writes it through a pipe
    sys.stderr.write("to stderr")
    end_rank(int(sys.argv[1]))
    print("not reached")
""")


def test_end_rank_flushes_and_exits_with_the_status() -> None:
    for status in (0, 3):
        proc = subprocess.run([sys.executable, "-c", SCRIPT, str(status)], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == status, proc.stderr[-3000:]
        assert proc.stdout == "reduced [1.0, 1.0, 1.0, 1.0]"  # flushed; atexit and later code did not run
        assert proc.stderr.endswith("to stderr")
