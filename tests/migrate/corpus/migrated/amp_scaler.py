"""Mixed-precision training with torch.cuda.amp: autocast and a GradScaler."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from anyaccel import get_accelerator


def main():
    parser = argparse.ArgumentParser(description="AMP training")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    use_amp = get_accelerator().is_available()
    print(f"avail: use_amp={use_amp}")
    device = get_accelerator().device_name() if use_amp else "cpu"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(get_accelerator().device_name(), enabled=use_amp and get_accelerator().device_name() != "cpu")
    x = torch.randn(16, 32, device=device)
    y = torch.randint(0, 8, (16,), device=device)
    for _ in range(args.steps):
        optimizer.zero_grad()
        with torch.autocast(device_type=get_accelerator().device_name(), dtype=torch.bfloat16, enabled=use_amp and get_accelerator().device_name() != "cpu"):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        print(f"loss: {loss.item():.6f}")
    print(f"check: logits_on_gpu={get_accelerator().on_accelerator(logits, exclude_cpu=True)}")
    print(f"device: {next(model.parameters()).device}")


if __name__ == "__main__":
    main()
