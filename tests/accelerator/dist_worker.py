"""One rank of the two-process all-reduce test (run as a script by ``test_distributed.py``).

argv: rank, world size, port, output file. The accelerator comes from ANYACCEL_ACCELERATOR.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from anyaccel import get_accelerator


def main() -> None:
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    acc = get_accelerator()
    if acc.device_name() != "cpu":
        acc.set_device(rank)
    dist.init_process_group(acc.communication_backend_name(), init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    generator = torch.Generator().manual_seed(int(sys.argv[5]) + rank)
    local = torch.randn(1000, generator=generator)
    tensor = acc.FloatTensor(local.tolist())  # data form; torch.cuda.FloatTensor refuses a CPU tensor
    dist.all_reduce(tensor)
    acc.synchronize()
    torch.save({"sum": tensor.cpu(), "backend": dist.get_backend(), "device": str(tensor.device)}, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
