"""Train a small classifier on one GPU, falling back to the CPU when there is none."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


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

    use_cuda = not args.no_cuda and torch.cuda.is_available()
    print(f"avail: use_cuda={use_cuda}")
    torch.manual_seed(args.seed)
    if use_cuda:
        torch.cuda.manual_seed(args.seed)
        torch.backends.cudnn.benchmark = True
    device = torch.device("cuda" if use_cuda else "cpu")

    model = Net().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = torch.randn(64, 20)
    target = torch.randint(0, 4, (64,))
    on_gpu = device.type == "cuda"
    print(f"check: on_gpu={on_gpu}")
    for _ in range(args.steps):
        x, y = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if on_gpu:
            torch.cuda.synchronize()
        print(f"loss: {loss.item():.6f}")
    print(f"check: weights_on_gpu={next(model.parameters()).is_cuda}")
    if use_cuda:
        print(f"peak memory {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
    print(f"device: {next(model.parameters()).device}")


if __name__ == "__main__":
    main()
