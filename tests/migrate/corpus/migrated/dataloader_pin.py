"""A DataLoader feeding the GPU through pinned memory, with non-blocking copies."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from anyaccel import get_accelerator


def main():
    parser = argparse.ArgumentParser(description="pinned-memory input pipeline")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    use_cuda = get_accelerator().is_available()
    device = torch.device(get_accelerator().device_name(0) if use_cuda else "cpu")
    print(f"avail: use_cuda={use_cuda}")
    pin = get_accelerator().on_accelerator(device.type, exclude_cpu=True)
    print(f"check: pin_memory={pin}")
    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(128, 12), torch.randint(0, 3, (128,)))
    loader = DataLoader(dataset, batch_size=16, shuffle=True, num_workers=1, pin_memory=pin)
    model = nn.Linear(12, 3)
    if use_cuda:
        model.to(get_accelerator().device_name())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(loader):
        if step == args.steps:
            break
        if pin:
            x, y = x.to(get_accelerator().device_name(), non_blocking=True), y.to(get_accelerator().device_name(), non_blocking=True)
        else:
            x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        print(f"loss: {loss.item():.6f}")
    print(f"check: batch_pinned={get_accelerator().on_accelerator(x, exclude_cpu=True) or get_accelerator().is_pinned(x)}")
    print(f"device: {next(model.parameters()).device}")


if __name__ == "__main__":
    main()
