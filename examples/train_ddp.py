"""Data-parallel training of a small MLP with DistributedDataParallel, set up by anyaccel's engine component.

The script holds no device or launcher logic of its own: ``init_distributed()`` reads the launcher
(torchrun, deepspeed, mpirun, srun, or none), binds the local device and creates the process group with the
accelerator's backend (gloo on CPU, NCCL on CUDA...); ``Accelerator.configure_model`` puts the model on the
device. The same file runs:

    python examples/train_ddp.py                               # one process
    torchrun --nproc_per_node 2 examples/train_ddp.py          # two processes (CPU: gloo, GPUs: NCCL)

It fits a fixed random regression target (each rank cycles through its own pool of samples, DDP averages
the gradients), logs the loss averaged over the ranks every ``--log-every`` steps on rank 0, and at the end
each rank prints one JSON line (``{"summary": ...}``) with its losses, a checksum of its parameters (equal on
every rank when DDP kept them in sync) and the median step time and throughput. Options: ``--help``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from anyaccel.engine import Accelerator, destroy_distributed, init_distributed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (sizes default to a run of a few seconds on a 2-core CPU)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps (default 40)")
    parser.add_argument("--batch-size", type=int, default=64, help="samples per rank per step (default 64)")
    parser.add_argument("--pool", type=int, default=16, help="batches of data per rank, cycled (default 16)")
    parser.add_argument("--features", type=int, default=32, help="input features (default 32)")
    parser.add_argument("--hidden", type=int, default=64, help="hidden width of the MLP (default 64)")
    parser.add_argument("--lr", type=float, default=0.05, help="Adam learning rate (default 0.05)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and the initial weights")
    parser.add_argument("--log-every", type=int, default=10, help="log the mean loss every N steps (rank 0)")
    parser.add_argument("--timeout", type=float, default=120.0, help="rendezvous/collective timeout, seconds")
    return parser.parse_args(argv)


def make_data(args: argparse.Namespace, rank: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's pool of ``--pool`` batches: inputs ``(pool * batch, features)`` and targets ``(pool * batch, 1)``.

    The targets come from one fixed random teacher (the same on every rank); each rank draws its own inputs,
    directly on ``device`` (no host copy of GPU-sized data).
    """
    teacher = torch.Generator().manual_seed(args.seed)
    w1 = (torch.randn(args.features, 16, generator=teacher) / args.features**0.5).to(device)
    w2 = (torch.randn(16, 1, generator=teacher) / 4).to(device)
    inputs = torch.Generator(device=device).manual_seed(args.seed + 1 + rank)
    x = torch.randn(args.pool * args.batch_size, args.features, generator=inputs, device=device)
    y = torch.tanh(x @ w1) @ w2 + 0.01 * torch.randn(x.shape[0], 1, generator=inputs, device=device)
    return x, y


def main(argv: list[str] | None = None) -> int:
    """Train; return the exit status."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    env = init_distributed(timeout=args.timeout)
    accel = Accelerator()
    log = logging.getLogger("train_ddp")

    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.features, args.hidden), torch.nn.GELU(), torch.nn.Linear(args.hidden, 1)
    )
    model = accel.configure_model(model)
    ddp = DistributedDataParallel(model, device_ids=accel.device_ids)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr)

    x_all, y_all = make_data(args, env.rank, env.device)
    # the reduced loss lives where the backend can reduce it (CPU for gloo on MPS)
    reduce_device = env.device if accel.supports_collectives else torch.device("cpu")

    losses: list[float] = []
    step_seconds: list[float] = []
    for step in range(args.steps):
        start = time.perf_counter()
        first = (step % args.pool) * args.batch_size
        x, y = x_all[first:first + args.batch_size], y_all[first:first + args.batch_size]
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        mean = loss.detach().to(reduce_device)
        dist.all_reduce(mean)  # also waits for the device, so the step time below is real
        losses.append(round(mean.item() / env.world_size, 6))
        step_seconds.append(time.perf_counter() - start)
        if env.is_main_process and (step % args.log_every == 0 or step == args.steps - 1):
            log.info("step %3d  loss %.5f", step, losses[-1])

    checksum = float(sum(p.detach().double().sum().item() for p in model.parameters()))
    step_s = statistics.median(step_seconds[1:] or step_seconds)  # the first step includes warm-up
    summary = {
        "rank": env.rank, "world_size": env.world_size, "device": str(env.device), "backend": env.backend,
        "source": env.source, "losses": losses, "checksum": checksum, "median_step_ms": step_s * 1e3,
        "samples_per_s": args.batch_size * env.world_size / step_s,
    }
    # one write of one line (ranks share stdout; print() would write the newline separately when unbuffered)
    sys.stdout.write(json.dumps({"summary": summary}) + "\n")
    sys.stdout.flush()
    if env.is_main_process:
        log.info("loss %.5f -> %.5f over %d steps; median step %.2f ms, %.0f samples/s on %d x %s (%s)",
                 losses[0], losses[-1], args.steps, step_s * 1e3, summary["samples_per_s"], env.world_size,
                 env.device.type, env.backend)
    del ddp  # it holds the process group; dropped first, destroy_distributed() really destroys the group
    destroy_distributed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
