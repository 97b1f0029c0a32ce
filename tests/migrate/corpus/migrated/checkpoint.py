"""Save a checkpoint, then resume from it on a given GPU with map_location."""

import argparse
import os
import tempfile

import torch
import torch.nn as nn
from anyaccel import get_accelerator


def save_checkpoint(model, optimizer, step, path):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path)


def load_checkpoint(path, gpu: int):
    return torch.load(path, map_location=get_accelerator().device_name(gpu))


def main():
    parser = argparse.ArgumentParser(description="checkpoint and resume")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--gpu", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Linear(10, 1).to(get_accelerator().device_name(args.gpu))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 10).to(get_accelerator().device_name(args.gpu)), torch.randn(32, 1).to(get_accelerator().device_name(args.gpu))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ckpt.pt")
        for step in range(args.steps):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            print(f"loss: {loss.item():.6f}")
            save_checkpoint(model, optimizer, step, path)
        state = load_checkpoint(path, args.gpu)
        resumed = nn.Linear(10, 1).to(get_accelerator().device_name(args.gpu))
        resumed.load_state_dict(state["model"])
        same = torch.load(path, map_location=get_accelerator().device_name())["model"]["weight"]
    print(f"check: loaded_on_gpu={get_accelerator().on_accelerator(state['model']['weight'], exclude_cpu=True)}")
    print(f"resumed: {torch.equal(resumed.weight, model.weight) and torch.equal(same, model.weight)}")
    print(f"device: {next(resumed.parameters()).device}")


if __name__ == "__main__":
    main()
