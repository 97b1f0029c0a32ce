"""Data-parallel training launched with torchrun: torchrun --nproc_per_node=NGPUS torchrun_ddp.py."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from anyaccel import get_accelerator


def main():
    parser = argparse.ArgumentParser(description="DDP under torchrun")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--backend", type=str, default=get_accelerator().communication_backend_name())
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group(backend=args.backend)
    get_accelerator().set_device(local_rank)
    device = torch.device(get_accelerator().device_name(local_rank))
    torch.manual_seed(1234)

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    model = DDP(model, device_ids=None if get_accelerator().device_name() == "cpu" else [local_rank], output_device=None if get_accelerator().device_name() == "cpu" else local_rank)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x = torch.randn(8, 16, device=device)
        y = torch.randn(8, 1).to(get_accelerator().device_name(local_rank))
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if dist.get_rank() == 0:
            print(f"loss: {loss.item():.6f}")
    if dist.get_rank() == 0:
        print(f"check: on_gpu={get_accelerator().on_accelerator(device.type, exclude_cpu=True)}")
        print(f"device: {next(model.parameters()).device}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
