"""Train a small character-level transformer language model with anyaccel's CPUAdam.

The corpus is the CPython standard library's own ``.py`` sources, which every machine with Python has.
Text is read as bytes (a 256-symbol vocabulary), split 90/10 into training and validation data, and a
causal transformer learns to predict the next byte.

The device comes from ``get_accelerator()``; the optimizer is :class:`anyaccel.ops.adam.CPUAdam`, whose
kernel is compiled from ``anyaccel/csrc/adam`` by ``CPUAdamBuilder`` on first use and cached after.
``--optimizer both`` repeats the same run (same seed, same batches) with ``torch.optim.AdamW`` and prints
the two side by side.

Examples::

    python examples/train_charlm.py                      # 200 steps with CPUAdam
    python examples/train_charlm.py --optimizer both     # CPUAdam, then torch AdamW, compared
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from anyaccel import get_accelerator


def load_corpus(max_bytes: int) -> torch.Tensor:
    """Return up to ``max_bytes`` bytes of the standard library's sources as a uint8 tensor of shape (n,).

    Files are read in sorted path order, so the corpus is the same on every run of one Python version.

    Raises:
        FileNotFoundError: if the standard library directory holds no ``.py`` file.
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    chunks: list[bytes] = []
    total = 0
    for path in sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/*.py")):
        data = path.read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    if not chunks:
        raise FileNotFoundError(f"no .py files under {stdlib}; pass a Python with its standard library")
    blob = b"".join(chunks)[:max_bytes]
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8)


class CharTransformer(nn.Module):
    """A causal transformer over bytes: embedding, ``layers`` pre-norm encoder blocks, a linear head."""

    def __init__(self, context: int, d_model: int, layers: int, heads: int) -> None:
        super().__init__()
        self.token = nn.Embedding(256, d_model)
        self.position = nn.Embedding(context, d_model)
        block = nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=4 * d_model, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 256)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(context), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Map token ids of shape (batch, time), int64, to logits of shape (batch, time, 256)."""
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.token(idx) + self.position(pos)
        x = self.blocks(x, mask=self.mask[:t, :t], is_causal=True)
        return self.head(self.norm(x))


@dataclass
class RunResult:
    name: str
    losses: list[float]
    val_before: float
    val_after: float
    step_ms: list[float]
    optimizer_ms: list[float]


def batches(data: torch.Tensor, batch: int, context: int, generator: torch.Generator):
    """Yield (inputs, targets) pairs, both int64 of shape (batch, context), drawn at random offsets."""
    while True:
        starts = torch.randint(0, data.numel() - context - 1, (batch,), generator=generator)
        rows = torch.stack([data[s : s + context + 1] for s in starts.tolist()]).long()
        yield rows[:, :-1], rows[:, 1:]


@torch.no_grad()
def evaluate(model: nn.Module, data: torch.Tensor, context: int, device: str, n_batches: int = 8) -> float:
    """Mean cross-entropy (nats per byte) of ``model`` on ``n_batches`` fixed batches of ``data``."""
    model.eval()
    gen = torch.Generator().manual_seed(1234)
    it = batches(data, 32, context, gen)
    losses = []
    for _ in range(n_batches):
        x, y = next(it)
        logits = model(x.to(device))
        losses.append(nn.functional.cross_entropy(logits.flatten(0, 1), y.to(device).flatten()).item())
    model.train()
    return statistics.fmean(losses)


def make_optimizer(name: str, params, args: argparse.Namespace) -> torch.optim.Optimizer:
    """Build the optimizer called ``name`` ("cpuadam" or "adamw") with the same hyper-parameters."""
    if name == "cpuadam":
        from anyaccel.ops.adam import CPUAdam

        return CPUAdam(params, lr=args.lr, weight_decay=args.weight_decay, adamw_mode=True)
    return torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)


def train(name: str, args: argparse.Namespace, train_data: torch.Tensor, val_data: torch.Tensor,
          device: str, log: Callable[[str], None]) -> RunResult:
    """Train a fresh model with optimizer ``name`` for ``args.steps`` steps; return losses and timings."""
    torch.manual_seed(args.seed)
    model = CharTransformer(args.context, args.d_model, args.layers, args.heads).to(device)
    opt = make_optimizer(name, model.parameters(), args)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"[{name}] {n_params / 1e6:.2f}M parameters on {device}, optimizer {type(opt).__module__}.{type(opt).__name__}")
    val_before = evaluate(model, val_data, args.context, device)
    gen = torch.Generator().manual_seed(args.seed)
    it = batches(train_data, args.batch_size, args.context, gen)
    acc = get_accelerator()
    losses, step_ms, opt_ms = [], [], []
    for step in range(1, args.steps + 1):
        x, y = next(it)
        t0 = time.perf_counter()
        logits = model(x.to(device))
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), y.to(device).flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        acc.synchronize()
        t2 = time.perf_counter()
        losses.append(loss.item())
        step_ms.append((t2 - t0) * 1e3)
        opt_ms.append((t2 - t1) * 1e3)
        if step == 1 or step % args.log_every == 0 or step == args.steps:
            recent = statistics.fmean(losses[-args.log_every:])
            log(f"[{name}] step {step:5d}  loss {recent:.4f}  "
                f"step {statistics.median(step_ms[-args.log_every:]):7.1f} ms  "
                f"optimizer {statistics.median(opt_ms[-args.log_every:]):6.2f} ms")
    val_after = evaluate(model, val_data, args.context, device)
    log(f"[{name}] validation loss {val_before:.4f} -> {val_after:.4f} nats/byte "
        f"({val_after / math.log(2):.3f} bits/byte)")
    return RunResult(name, losses, val_before, val_after, step_ms, opt_ms)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--optimizer", choices=["cpuadam", "adamw", "both"], default="cpuadam")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-bytes", type=int, default=4_000_000, help="corpus size in bytes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=25)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    acc = get_accelerator()
    device = acc.device_name()
    if args.optimizer in ("cpuadam", "both") and device != "cpu":
        print(f"CPUAdam updates CPU tensors; the accelerator here is {device!r}. "
              "Run with --optimizer adamw, or ANYACCEL_ACCELERATOR=cpu.", file=sys.stderr)
        return 2
    data = load_corpus(args.max_bytes)
    split = int(0.9 * data.numel())
    train_data, val_data = data[:split], data[split:]
    print(f"accelerator {acc._name} ({device}); corpus {data.numel() / 1e6:.2f} MB of CPython stdlib sources; "
          f"{torch.get_num_threads()} threads")
    if args.optimizer in ("cpuadam", "both"):
        t0 = time.perf_counter()
        acc.create_op_builder("CPUAdamBuilder").load()
        print(f"CPUAdamBuilder.load(): {time.perf_counter() - t0:.2f} s (compiles on the first run, cached after)")
    names = ["cpuadam", "adamw"] if args.optimizer == "both" else [args.optimizer]
    results = [train(n, args, train_data, val_data, device, print) for n in names]
    print("\nsummary")
    print(f"{'optimizer':10s} {'loss first':>10s} {'loss last25':>11s} {'val before':>10s} {'val after':>10s} "
          f"{'step ms':>8s} {'opt ms':>7s}")
    for r in results:
        print(f"{r.name:10s} {r.losses[0]:10.4f} {statistics.fmean(r.losses[-25:]):11.4f} {r.val_before:10.4f} "
              f"{r.val_after:10.4f} {statistics.median(r.step_ms):8.1f} {statistics.median(r.optimizer_ms):7.2f}")
    failed = [r.name for r in results if not r.val_after < r.val_before]
    if failed:
        print(f"validation loss did not fall for: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
