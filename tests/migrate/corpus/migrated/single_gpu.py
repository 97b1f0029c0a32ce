"""Train a small classifier on one GPU, falling back to the CPU when there is none."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from anyaccel import get_accelerator


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.fc2 = nn.Linear(64, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def main():
    parser = argparse.ArgumentParser(description="single GPU training")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--no-cuda", action="store_true", default=False, help="disables CUDA training")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    use_cuda = not args.no_cuda and get_accelerator().is_available()
    print(f"avail: use_cuda={use_cuda}")
    torch.manual_seed(args.seed)
    if use_cuda:
        get_accelerator().manual_seed(args.seed)
        torch.backends.cudnn.benchmark = True
    device = torch.device(get_accelerator().device_name() if use_cuda else "cpu")

    model = Net().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = torch.randn(64, 20)
    target = torch.randint(0, 4, (64,))
    on_gpu = get_accelerator().on_accelerator(device.type, exclude_cpu=True)
    print(f"check: on_gpu={on_gpu}")
    for _ in range(args.steps):
        x, y = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if on_gpu:
            get_accelerator().synchronize()
        print(f"loss: {loss.item():.6f}")
    print(f"check: weights_on_gpu={get_accelerator().on_accelerator(next(model.parameters()), exclude_cpu=True)}")
    if use_cuda:
        print(f"peak memory {get_accelerator().max_memory_allocated() / 2**20:.1f} MiB")
    print(f"device: {next(model.parameters()).device}")


if __name__ == "__main__":
    main()
