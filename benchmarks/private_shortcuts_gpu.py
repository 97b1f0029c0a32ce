"""A/B of the GPU-side private-internal shortcuts (``anyaccel/_compat``) against their public fallbacks, end to end.

A shortcut through a private torch/Triton internal is kept only where an end-to-end measurement shows at least
a 3% gain. The measure here is the patched Llama of ``benchmarks/nn_ops.py`` (Llama 3.2 1B shape, bf16, seq
4096, batch 1; forward + backward + SGD step, ``anyaccel.ops.patch``): tokens/s over the timed steps, and the
seconds from process start to the end of the first step (imports, model build, first compilation).

Each variant runs in a fresh process (some shortcuts are chosen when the ops are defined), variants
interleaved round-robin; the table gives each variant's median over the rounds and its ratio to ``all
private``:

* ``all private``: every shortcut on (the default);
* ``no wrap switch``: ``torch.library.wrap_triton`` asked on every launch (`anyaccel._compat.library`);
* ``no fast launch``: Triton's own ``kernel[grid](...)`` (``ANYACCEL_TRITON_FAST_LAUNCH=0``,
  `anyaccel._compat.triton_launch`);
* ``no combined form``: every eager model-op forward through torch's ``setup_context`` form of
  ``autograd.Function`` (the fallback of `anyaccel._compat.functorch`).

The host's speed varies between processes by more than these shortcuts are worth on a step bound by the
GPU, so ``--paired N`` compares the two run-time switchable ones (fast launch and the combined form; both,
or one with ``--toggle launch|combined``, on against off) inside one process instead: N pairs of blocks of
``--steps`` AdamW training steps (``benchmarks/llama_memory.py``'s model and step), alternating, and the
median of the pair ratios; it also prints the forward's host time (the span until the forward returns, from
an idle GPU) per switch setting.

Usage (GPU machine, from the repository root)::

    python benchmarks/private_shortcuts_gpu.py --rounds 3 --steps 8
    python benchmarks/private_shortcuts_gpu.py --paired 12 --steps 5 [--toggle both|launch|combined]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

_START = time.perf_counter()

#: the query `anyaccel._compat.functorch.transforms_active` had before `_set_switches` replaced it
_TRANSFORMS_ACTIVE: Any = None

VARIANTS = ("all private", "no wrap switch", "no fast launch", "no combined form")


def _force_fallbacks(variant: str) -> None:
    """Patch the chosen shortcuts to their public fallbacks before anyaccel defines any op."""
    if variant == "no wrap switch":
        from anyaccel._compat import library

        library._switch = lambda: None  # type: ignore[assignment]
    if variant == "no fast launch":
        from anyaccel._compat import triton_launch

        triton_launch.set_enabled(False)
    if variant == "no combined form":
        _set_switches(launch=True, combined=False)


def _set_switches(*, launch: bool, combined: bool) -> None:
    """Turn the run-time switchable shortcuts on or off: the Triton fast launch, and the eager Functions'
    combined form (off: `anyaccel._compat.functorch.transforms_active` answers True, as its fallback does)."""
    global _TRANSFORMS_ACTIVE
    from anyaccel._compat import functorch, triton_launch

    triton_launch.set_enabled(launch)
    if _TRANSFORMS_ACTIVE is None:
        _TRANSFORMS_ACTIVE = functorch.transforms_active
    functorch.transforms_active = _TRANSFORMS_ACTIVE if combined else (lambda: True)


def paired(pairs: int, steps: int, toggle: str = "both") -> dict[str, object]:
    """In one process (see the module docstring): the shortcuts named by ``toggle`` (``"both"``, ``"launch"``
    or ``"combined"``) on against off, the other one on throughout."""
    import torch
    from llama_memory import _training

    settings = {"both on": (True, True), "launch only": (True, False), "combined only": (False, True),
                "both off": (False, False)}
    model, opt, ids, forward, step = _training("anyaccel")
    for _ in range(3):
        step()
    forward_ms: dict[str, list[float]] = {name: [] for name in settings}
    for r in range(6):
        for name in (list(settings) if r % 2 == 0 else list(settings)[::-1]):
            launch, combined = settings[name]
            _set_switches(launch=launch, combined=combined)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = forward()
            forward_ms[name].append((time.perf_counter() - t0) * 1e3)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            float(loss)
    off = {"both": (False, False), "launch": (False, True), "combined": (True, False)}[toggle]
    ratios: list[float] = []
    blocks: dict[str, list[float]] = {"on": [], "off": []}
    for r in range(pairs):
        times = {}
        for name in (("on", "off") if r % 2 == 0 else ("off", "on")):
            launch, combined = (True, True) if name == "on" else off
            _set_switches(launch=launch, combined=combined)
            step()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            torch.cuda.synchronize()
            times[name] = (time.perf_counter() - t0) / steps * 1e3
            blocks[name].append(round(times[name], 1))
        ratios.append(times["off"] / times["on"])
    _set_switches(launch=True, combined=True)
    return {"device": torch.cuda.get_device_name(), "toggled": toggle,
            "forward_host_ms_median": {k: round(statistics.median(v), 2) for k, v in forward_ms.items()},
            "step_ms_blocks": blocks, "median_pair_speedup_on_over_off": round(statistics.median(ratios), 3),
            "pairs_faster_on": f"{sum(x > 1 for x in ratios)}/{len(ratios)}"}


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
    parser.add_argument("--paired", type=int, default=0, metavar="N",
                        help="instead: N pairs of blocks of --steps steps in one process, fast paths on/off")
    parser.add_argument("--toggle", default="both", choices=("both", "launch", "combined"),
                        help="with --paired: which run-time shortcut(s) the pairs switch (default: both)")
    args = parser.parse_args()
    if args.paired < 0 or args.steps < 1 or args.rounds < 1:
        parser.error(f"--paired {args.paired}, --steps {args.steps}, --rounds {args.rounds}: --paired must be "
                     ">= 0 (0: the per-process table), --steps and --rounds >= 1")
    import torch

    if not torch.cuda.is_available():
        print("private_shortcuts_gpu benchmark: needs a CUDA GPU (the patched Llama trains on it)", file=sys.stderr)
        return 2
    if args.paired:
        print(json.dumps(paired(args.paired, args.steps, args.toggle)))
        return 0
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
