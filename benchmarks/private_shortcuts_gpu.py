"""A/B of the GPU-side private-internal shortcuts (``anyaccel/_compat``) against their public fallbacks, end to end.

A shortcut through a private torch/Triton internal is kept only where an end-to-end measurement shows at least
a 3% gain. The measure here is the patched Llama of ``benchmarks/nn_ops.py`` (Llama 3.2 1B shape, bf16, seq
4096, batch 1; forward + backward + SGD step, ``anyaccel.ops.patch``): tokens/s over the timed steps, and the
seconds from process start to the end of the first step (imports, model build, first compilation).

Each variant runs in a fresh process (some shortcuts are chosen when the ops are defined), variants
interleaved round-robin; the table gives each variant's median over the rounds and its ratio to ``all
private``:

* ``all private``: every shortcut on (the default);
* ``no wrap switch``: ``torch.library.wrap_triton`` asked on every launch (:mod:`anyaccel._compat.library`).

Two earlier variants, a fast Triton launcher and a fast ``autograd.Function.apply``, measured no gain beyond
run-to-run noise here and were removed with their private internals (``docs/nn_ops.md``).

Usage (GPU machine, from the repository root)::

    python benchmarks/private_shortcuts_gpu.py --rounds 3 --steps 8
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

_START = time.perf_counter()

VARIANTS = ("all private", "no wrap switch")


def _force_fallbacks(variant: str) -> None:
    """Patch the chosen shortcuts to their public fallbacks before anyaccel defines any op."""
    if variant == "no wrap switch":
        from anyaccel._compat import library

        library._switch = lambda: None  # type: ignore[assignment]


def child(variant: str, steps: int) -> dict[str, float]:
    """One variant in this process: tokens/s and seconds to the end of the first step."""
    _force_fallbacks(variant)
    import torch
    import transformers
    from _common import llama_1b_config

    import anyaccel.ops

    config = llama_1b_config()
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.train()
    anyaccel.ops.patch(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    ids = torch.randint(0, config.vocab_size, (1, 4096), device="cuda")

    def step() -> float:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    step()
    torch.cuda.synchronize()
    first = time.perf_counter() - _START
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return {"tokens_per_s": steps * ids.numel() / (time.perf_counter() - t0), "first_step_s": first}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per process")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--child", default=None, choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.steps)))
        return 0
    results: dict[str, list[dict[str, float]]] = {v: [] for v in args.variants}
    for r in range(args.rounds):
        for variant in args.variants:
            out = subprocess.run([sys.executable, __file__, "--child", variant, "--steps", str(args.steps)],
                                 capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                print(f"{variant}: failed\n{out.stderr[-2000:]}", file=sys.stderr)
                return 1
            results[variant].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {r} {variant}: {results[variant][-1]}", flush=True)
    base_tps = statistics.median(x["tokens_per_s"] for x in results[args.variants[0]])
    base_first = statistics.median(x["first_step_s"] for x in results[args.variants[0]])
    print(f"\nvariant | tokens/s (median of {args.rounds}) | vs {args.variants[0]} | first step s | vs")
    for variant, runs in results.items():
        tps = statistics.median(x["tokens_per_s"] for x in runs)
        first = statistics.median(x["first_step_s"] for x in runs)
        print(f"{variant} | {tps:.0f} | {tps / base_tps:.3f} | {first:.2f} | {first / base_first:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
