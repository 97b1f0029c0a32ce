"""Data-parallel training on every GPU of the machine, one process per GPU started with mp.spawn."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler
from anyaccel import get_accelerator


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ.setdefault("MASTER_PORT", "12355")
    dist.init_process_group(get_accelerator().communication_backend_name(), rank=rank, world_size=world_size)
    get_accelerator().set_device(rank)


class Trainer:
    def __init__(self, model: nn.Module, loader: DataLoader, gpu_id: int):
        self.gpu_id = gpu_id
        self.model = DDP(model.to(get_accelerator().device_name(gpu_id)), device_ids=None if get_accelerator().device_name() == "cpu" else [gpu_id])
        self.loader = loader
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)

    def run(self, steps):
        step = 0
        while step < steps:
            for source, targets in self.loader:
                source = source.to(get_accelerator().device_name(self.gpu_id))
                targets = targets.to(get_accelerator().device_name(self.gpu_id))
                self.optimizer.zero_grad()
                loss = F.mse_loss(self.model(source), targets)
                loss.backward()
                self.optimizer.step()
                reduced = loss.detach().clone()
                dist.all_reduce(reduced)
                if self.gpu_id == 0:
                    print(f"loss: {reduced.item() / dist.get_world_size():.6f}")
                step += 1
                if step == steps:
                    break


def main(rank, world_size, steps):
    setup(rank, world_size)
    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(256, 20), torch.randn(256, 1))
    loader = DataLoader(dataset, batch_size=32, pin_memory=True, shuffle=False,
                        sampler=DistributedSampler(dataset, num_replicas=world_size, rank=rank))
    trainer = Trainer(nn.Linear(20, 1), loader, rank)
    trainer.run(steps)
    if rank == 0:
        print(f"check: params_on_gpu={get_accelerator().on_accelerator(next(trainer.model.parameters()), exclude_cpu=True)}")
        print(f"device: {next(trainer.model.parameters()).device}")
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="DDP with mp.spawn")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    world_size = get_accelerator().device_count()
    print(f"avail: world_size={world_size}")
    mp.spawn(main, args=(world_size, args.steps), nprocs=world_size)
