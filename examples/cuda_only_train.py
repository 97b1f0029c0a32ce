"""A small CUDA-only training script, as people write them: the fixture of ``anyaccel migrate``.

It hard-codes torch.cuda everywhere and only falls back to the CPU where ``torch.cuda.is_available()`` is
checked. ``anyaccel migrate examples/cuda_only_train.py`` shows what the codemod does with it; the
migrated script runs on any accelerator anyaccel supports, CPU included.

Run: ``python examples/cuda_only_train.py [seed]``; prints the loss of each step.
"""

import sys

import torch
import torch.nn as nn
from torch.cuda.amp import GradScaler, autocast

use_cuda = torch.cuda.is_available()
device = torch.device("cuda" if use_cuda else "cpu")


def make_data(seed: int, n: int = 64):
    """Return ``n`` random regression samples (float32, shapes (n, 8) and (n, 1)) drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def train(seed: int, steps: int = 5) -> list[float]:
    """Train a 2-layer MLP for ``steps`` steps on data from ``seed``; return the loss of each step."""
    torch.manual_seed(seed)
    if use_cuda:
        torch.cuda.manual_seed_all(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    if use_cuda:
        model = model.cuda()  # move the weights to the GPU
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = GradScaler(enabled=use_cuda)
    x_all, y_all = make_data(seed)
    losses = []
    for step in range(steps):
        x, y = x_all[step::steps], y_all[step::steps]
        if use_cuda:
            x = x.pin_memory().cuda(non_blocking=True)
            y = y.cuda(non_blocking=True)
        assert x.is_cuda == (device.type == "cuda")
        with autocast(enabled=False):
            loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if use_cuda:
            torch.cuda.synchronize()
        losses.append(loss.item())
    check = torch.zeros(1, device=device)
    assert check.device.type == device.type
    return losses


if __name__ == "__main__":
    for i, value in enumerate(train(int(sys.argv[1]) if len(sys.argv) > 1 else 0)):
        sys.stdout.write(f"step {i}: loss {value:.6f}\n")
