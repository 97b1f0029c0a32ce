"""A language-model style loop: the device string decides the autocast context and the pinned copies."""

import argparse
from contextlib import nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F
from anyaccel import get_accelerator

device = get_accelerator().device_name() if get_accelerator().is_available() else "cpu"
device_type = get_accelerator().device_name() if get_accelerator().on_accelerator(device, exclude_cpu=True) else "cpu"  # for later use in torch.autocast
ptdtype = torch.bfloat16 if get_accelerator().on_accelerator(device_type, exclude_cpu=True) and get_accelerator().is_bf16_supported() else torch.float32
ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)


def get_batch(data, block_size=8, batch_size=4):
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    if get_accelerator().on_accelerator(device_type, exclude_cpu=True):
        x, y = get_accelerator().pin_memory(x).to(device, non_blocking=True), get_accelerator().pin_memory(y).to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)
    return x, y


class TinyLM(nn.Module):
    def __init__(self, vocab=32, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx, targets):
        logits = self.head(self.emb(idx))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    parser = argparse.ArgumentParser(description="tiny LM")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    print(f"check: device_type={device_type}")
    print(f"check: autocast={not isinstance(ctx, nullcontext)}")
    torch.manual_seed(1337)
    data = torch.randint(0, 32, (256,))
    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler(device_type, enabled=(ptdtype == torch.float16))
    for _ in range(args.steps):
        x, y = get_batch(data)
        with ctx:
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        print(f"loss: {loss.item():.6f}")
    print(f"device: {next(model.parameters()).device}")


if __name__ == "__main__":
    main()
