"""Ending a rank of a multi-process test script without the gloo exit race.

For scripts that test suites run as subprocesses; never call it from library code or inside a test process.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def end_rank(status: int = 0) -> NoReturn:
    """Destroy the default process group, flush stdout and stderr, and end the process with ``os._exit``.

    Why not a normal return: a gloo process group that outlives ``destroy_process_group()`` keeps its worker
    threads, and those release the last collectives' tensors after the collectives return, which takes the
    GIL. A process that reaches interpreter finalization first aborts ("terminate called without an active
    exception", pytorch/pytorch#190489). Groups do outlive it in a DeepSpeed run: ``deepspeed.utils.groups``
    keeps its world group, and ``torch.distributed.nn``, imported after the group was created, keeps the
    default group as default arguments. ``os._exit`` skips finalization, and with it ``atexit`` handlers.

    Args:
        status: the process's exit status.

    Side effects: ``torch.distributed.destroy_process_group()`` when a group is initialised; ends the
    process (never returns).
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
