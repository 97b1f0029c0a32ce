"""``EnvironmentTable``: what ``init_distributed()`` set up, as one small frozen record.

The name is ColossalAI's (its Booster proposal keeps the process's distributed facts in an
``EnvironmentTable``); the fields are what every training loop asks: who am I, how many are we, which
device, which backend, and which launcher said so.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["EnvironmentTable"]


@dataclasses.dataclass(frozen=True)
class EnvironmentTable:
    """The distributed environment of this process, as initialised.

    Attributes:
        rank: global rank, ``0 <= rank < world_size``.
        world_size: number of processes in the process group.
        local_rank: rank among the processes of this node.
        local_world_size: number of processes on this node.
        device: this process's device (``cuda:1``, ``cpu``); the current device after ``init_distributed``.
        backend: the process group's ``torch.distributed`` backend (``"nccl"``, ``"gloo"``...).
        accelerator: the anyaccel accelerator's name (``"cuda"``, ``"cpu"``...).
        source: where rank and world size came from: a launcher (``"torchrun"``, ``"deepspeed"``, ``"env"``,
            ``"openmpi"``, ``"mvapich"``, ``"pmi"``, ``"slurm"``), ``"single"`` (no launcher), or
            ``"process-group"`` (adopted from a group initialised before and no launcher variables).
        master_addr: the rendezvous host, None when the group needed none (one process, or adopted).
        master_port: the rendezvous TCP port, None when no rendezvous was made.
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str
    accelerator: str
    source: str
    master_addr: str | None = None
    master_port: int | None = None

    @property
    def is_main_process(self) -> bool:
        """True on global rank 0 (where to log and save)."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        """True when more than one process takes part."""
        return self.world_size > 1

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the fields (the device as its string, e.g. ``"cuda:0"``)."""
        data = dataclasses.asdict(self)
        data["device"] = str(self.device)
        return data
