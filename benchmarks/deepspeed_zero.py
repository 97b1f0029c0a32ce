"""Benchmark: DeepSpeed ZeRO training with anyaccel installed against DeepSpeed alone.

Run from the repository root, with DeepSpeed 0.19.8 installed::

    python benchmarks/deepspeed_zero.py --mode zero2-fused      # ZeRO-2, 2 GPUs, NCCL, DeepSpeed's FusedAdam
    python benchmarks/deepspeed_zero.py --mode zero-offload     # ZeRO-2 + offload_optimizer cpu, 1 GPU, CPU Adam
    python benchmarks/deepspeed_zero.py --mode zero2-fused --device cpu --quick   # dry run here (gloo, CPU)

For each stack (``deepspeed``: DeepSpeed's own accelerator and JIT-built ops; ``anyaccel``:
``anyaccel.integrations.deepspeed.install()`` before ``import deepspeed``, anyaccel's ops from its cache) it
starts the ranks twice:

* ``cold``: empty caches (a fresh ``TORCH_EXTENSIONS_DIR`` for DeepSpeed, a fresh ``ANYACCEL_CACHE_DIR`` for
  anyaccel): the first step includes building the optimizer's kernel;
* ``warm``: the same caches again: what every later launch pays.

and reports, per run: the time from process start to ``deepspeed.initialize`` returning, to the end of the
first optimizer step (the first-step latency), the median step time over the timed steps (after warm-up
steps, each step fenced with the accelerator's ``synchronize``; the slowest rank's median), the losses'
largest relative difference to DeepSpeed's own run, and what DeepSpeed JIT-built into its extensions folder
(with anyaccel: nothing). Machines are shared: the stacks alternate run by run, and only medians are shown.
``--json`` also writes every number. Nothing is asserted: the correctness checks are the GPU tests
(``python -m pytest -m gpu tests/integrations``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_T0 = time.perf_counter()  # process start, as close as Python allows (before torch and DeepSpeed imports)

REPO_ROOT = Path(__file__).resolve().parent.parent

#: mode -> (ZeRO stage, default world size, DeepSpeed optimizer type, offload device or "none")
MODES: dict[str, tuple[int, int, str, str]] = {
    "zero2-fused": (2, 2, "Adam", "none"),
    "zero-offload": (2, 1, "AdamW", "cpu"),
    "zero3-offload": (3, 1, "AdamW", "cpu"),
}


def worker(args: argparse.Namespace) -> None:
    """One rank: build the model, train, print one JSON line of timings and losses."""
    import torch

    if args.stack == "anyaccel":
        import anyaccel.integrations.deepspeed as integration

        integration.install()
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    stage, _, optimizer_type, offload = MODES[args.mode]
    acc = get_accelerator()
    torch.manual_seed(1234)
    layers: list[torch.nn.Module] = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(args.hidden, 16))
    zero: dict[str, Any] = {"stage": stage}
    if offload != "none":
        zero["offload_optimizer"] = {"device": offload}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": args.batch,
        "optimizer": {"type": optimizer_type, "params": {"lr": 1e-4, "weight_decay": 0.01}},
        "zero_optimization": zero,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if args.bf16:
        config["bf16"] = {"enabled": True}
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    t_init = time.perf_counter() - _T0
    data = torch.Generator().manual_seed(100 + engine.global_rank)
    batches = [(torch.randn(args.batch, args.hidden, generator=data), torch.randn(args.batch, 16, generator=data))
               for _ in range(4)]
    losses: list[float] = []
    step_s: list[float] = []
    t_first = 0.0
    for i in range(args.warmup + args.steps):
        x, y = (t.to(engine.device) for t in batches[i % len(batches)])
        if args.bf16:
            x = x.to(torch.bfloat16)
        acc.synchronize()
        start = time.perf_counter()
        loss = torch.nn.functional.mse_loss(engine(x).float(), y)
        engine.backward(loss)
        engine.step()
        acc.synchronize()
        if i == 0:
            t_first = time.perf_counter() - _T0
        if i >= args.warmup:
            step_s.append(time.perf_counter() - start)
        losses.append(loss.item())
    inner = getattr(optimizer, "optimizer", optimizer)
    print(json.dumps({"rank": engine.global_rank, "init_s": t_init, "first_step_s": t_first,
                      "step_ms": statistics.median(step_s) * 1e3 if step_s else None, "losses": losses,
                      "optimizer": type(inner).__name__, "accelerator": type(acc).__module__ + "." +
                      type(acc).__name__}), flush=True)
    if torch.distributed.is_initialized():  # no process group left to the interpreter's exit
        torch.distributed.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(args: argparse.Namespace, stack: str, extensions: Path, cache: Path, world_size: int) -> dict[str, Any]:
    """Start ``world_size`` ranks of :func:`worker` for ``stack``; return the run's summary."""
    port = str(_free_port())
    base = {k: v for k, v in os.environ.items() if k not in ("ANYACCEL_DEEPSPEED", "DS_ACCELERATOR",
                                                               "ANYACCEL_ACCELERATOR")}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), base.get("PYTHONPATH")]))
    base.update(TORCH_EXTENSIONS_DIR=str(extensions), ANYACCEL_CACHE_DIR=str(cache), MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port, WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size))
    if args.device == "cpu":
        base.update(DS_ACCELERATOR="cpu", ANYACCEL_ACCELERATOR="cpu", CUDA_VISIBLE_DEVICES="")
    base.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // world_size)))
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", "--stack", stack, "--mode", args.mode,
               "--hidden", str(args.hidden), "--layers", str(args.layers), "--batch", str(args.batch),
               "--steps", str(args.steps), "--warmup", str(args.warmup)] + (["--bf16"] if args.bf16 else [])
    procs = [subprocess.Popen(command, env=dict(base, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(world_size)]
    ranks = []
    for proc in procs:
        out, err = proc.communicate(timeout=args.timeout)
        if proc.returncode != 0:
            raise SystemExit(f"{stack} rank failed (exit {proc.returncode}):\n{err[-4000:]}")
        ranks.append(json.loads(out.strip().splitlines()[-1]))
    ranks.sort(key=lambda r: r["rank"])
    return {"stack": stack, "ranks": ranks, "built": sorted(p.name for p in extensions.iterdir()),
            "init_s": max(r["init_s"] for r in ranks), "first_step_s": max(r["first_step_s"] for r in ranks),
            "step_ms": max(r["step_ms"] for r in ranks), "optimizer": ranks[0]["optimizer"],
            "accelerator": ranks[0]["accelerator"]}


def main(argv: list[str] | None = None) -> int:
    """Parse arguments; run the ranks (``--worker``) or the comparison, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=sorted(MODES), default="zero2-fused")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu", help="cpu: a dry run on gloo")
    parser.add_argument("--world-size", type=int, default=None, help="ranks (default: 2 for zero2-fused, else 1)")
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps after the first")
    parser.add_argument("--bf16", action="store_true", help="DeepSpeed's bf16 mode (fp32 master weights)")
    parser.add_argument("--quick", action="store_true", help="a small model and few steps (dry runs)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stack", choices=("deepspeed", "anyaccel"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.hidden, args.layers, args.steps, args.warmup = 256, 2, 5, 2
    if args.worker:
        worker(args)
        return 0
    world_size = args.world_size or MODES[args.mode][1]
    scratch = Path(tempfile.mkdtemp(prefix="ds-zero-bench-"))
    runs: list[dict[str, Any]] = []
    try:
        for stack in ("deepspeed", "anyaccel"):
            (scratch / stack / "ext").mkdir(parents=True)
            (scratch / stack / "cache").mkdir(mode=0o700)
        for cache_state in ("cold", "warm"):  # the stacks alternate
            for stack in ("deepspeed", "anyaccel"):
                run = launch(args, stack, scratch / stack / "ext", scratch / stack / "cache", world_size)
                run["cache"] = cache_state
                runs.append(run)
                print(f"  {stack:<9} {cache_state}: first step {run['first_step_s']:.1f} s, step "
                      f"{run['step_ms']:.1f} ms", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    reference = next(r for r in runs if r["stack"] == "deepspeed" and r["cache"] == "warm")
    print(f"\nDeepSpeed {args.mode} on {world_size} {args.device.upper()} rank(s) ({reference['accelerator']} vs "
          f"{runs[-1]['accelerator']}), optimizer {reference['optimizer']} / {runs[-1]['optimizer']}, "
          f"model {args.layers}x{args.hidden}, batch {args.batch}{', bf16' if args.bf16 else ''}:")
    print(f"{'stack':<10} {'cache':<5} {'init s':>7} {'first step s':>13} {'step ms':>9} {'step vs DS':>10} "
          f"{'max rel loss diff':>18}  DeepSpeed JIT-built")
    for r in runs:
        diff = max(abs(a - b) / abs(a) for ref_rank, rank in zip(reference["ranks"], r["ranks"], strict=True)
                   for a, b in zip(ref_rank["losses"], rank["losses"], strict=True))
        r["max_rel_loss_diff"] = diff
        print(f"{r['stack']:<10} {r['cache']:<5} {r['init_s']:>7.1f} {r['first_step_s']:>13.1f} "
              f"{r['step_ms']:>9.2f} {r['step_ms'] / reference['step_ms']:>10.3f} {diff:>18.3g}  "
              f"{', '.join(r['built']) or 'nothing'}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
