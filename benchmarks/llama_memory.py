"""Where a patched Llama's training memory goes: anyaccel against eager and Liger-Kernel, component by component.

The model is the Llama 3.2 1B shape (16 layers, hidden 2048, intermediate 8192, vocab 128256, tied embeddings:
1.24B parameters) in bf16, sequence 4096, batch 1, trained with ``torch.optim.AdamW``: by default as constructed
with no options (the ``foreach`` implementation on CUDA), or with ``--optimizer fused``, ``AdamW(fused=True)``,
the optimizer Hugging Face's ``Trainer`` uses by default with torch 2.8 and later (``TrainingArguments.optim``
``"adamw_torch_fused"``). Each variant runs in a
fresh process (Liger patches transformers' classes process-wide, and the caching allocator's history would
otherwise carry over), and prints one JSON line:

* ``tokens_per_s`` over the timed steps and ``peak_gib`` (``torch.cuda.max_memory_allocated`` over them);
  ``reserved_gib`` (``torch.cuda.max_memory_reserved`` over them): a CUDA graph's private memory pool is
  allocated at capture, in the warm-up, so its replays add nothing to ``peak_gib``; the pools stay reserved,
  so the reserved figure includes them;
* ``activations_gib``: memory allocated by one forward (what the backward keeps, by whatever means);
* ``saved_by_module``: bytes of the tensors saved for backward through autograd (``save_for_backward`` and
  autograd's own saves; ``torch.autograd.graph.saved_tensors_hooks``), by the class of the innermost module
  running when they were saved, each storage counted once and parameters left out. Tensors a custom
  ``autograd.Function`` keeps as plain ``ctx`` attributes are not seen there, only in ``activations_gib``.

Variants: ``eager``, ``anyaccel`` (every patch), ``anyaccel -X`` (every patch but X: ``rms_norm``, ``swiglu``,
``rope``, ``loss``), ``liger`` (``apply_liger_kernel_to_llama`` defaults) and ``liger -X`` likewise
(``rms_norm``, ``swiglu``, ``rope``, ``loss`` = its fused linear cross-entropy); and under ``torch.compile``:
``compiled eager`` (``torch.compile(model)``), ``compiled anyaccel`` (``anyaccel.ops.patch(model,
mode="compile")``, then ``torch.compile(model)``) and ``cudagraph anyaccel`` (the same patch, the model compiled
with ``mode="reduce-overhead"``, so Inductor's CUDA graph trees capture its forward and backward, and
``AdamW(capturable=True)``, whose step is compiled with ``mode="reduce-overhead"`` too: the whole step in CUDA
graphs, with ``torch.compiler.cudagraph_mark_step_begin()`` before each); ``cudagraph eager`` is the same
unpatched. The compiled variants compile during the warm-up steps (not timed); their ``activations_gib`` and
``saved_by_module`` are not measured (module hooks and saved-tensor hooks would change what is compiled).
Liger variants report "not installed" where ``liger_kernel`` is not installed. The default variants compare
eager, patched and compiled training: ``eager``, ``anyaccel``, ``liger``, ``compiled eager``,
``compiled anyaccel``, ``cudagraph anyaccel``.

Usage (GPU machine, repository root)::

    python benchmarks/llama_memory.py [--steps 4] [--warmup 3] [--rounds 1] [--variants eager anyaccel liger]
    python benchmarks/llama_memory.py --layers 4 --steps 3 --variants "compiled anyaccel"   # a quicker look
    python benchmarks/llama_memory.py --paired 8 --steps 5 [--optimizer fused]

``--rounds`` repeats every variant that many times, the variants interleaved (each round starting one
variant later), and the table gives each variant's median tokens/s and range: one run of a variant can differ
from the next by several per cent, more than the gaps between some variants.

``--paired N`` instead compares anyaccel with eager in one process, N pairs of blocks of ``--steps`` steps,
patching and unpatching one model (`paired`): the comparison least moved by the host's speed, which the
patched step depends on and eager's does not.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from typing import Any

COMPONENTS = ("rms_norm", "swiglu", "rope", "loss")
#: variant -> how the model is compiled: ``torch.compile``'s ``mode`` (None: not compiled)
COMPILED = {"compiled eager": "default", "compiled anyaccel": "default", "cudagraph anyaccel": "reduce-overhead",
            "cudagraph eager": "reduce-overhead"}
VARIANTS = ("eager", "anyaccel", *(f"anyaccel -{c}" for c in COMPONENTS), "liger",
            *(f"liger -{c}" for c in COMPONENTS), *COMPILED)
#: the variants run when ``--variants`` is not given: eager, patched, Liger, compiled and in CUDA graphs
DEFAULT_VARIANTS = ("eager", "anyaccel", "liger", "compiled eager", "compiled anyaccel", "cudagraph anyaccel")
#: ``--optimizer`` choice -> ``torch.optim.AdamW`` keyword arguments besides the learning rate.
OPTIMIZERS: dict[str, dict[str, Any]] = {"foreach": {}, "fused": {"fused": True}}


def _patch(variant: str, model: Any) -> None:
    if variant in ("eager", "compiled eager", "cudagraph eager"):
        return
    if variant in COMPILED:
        import anyaccel.ops

        anyaccel.ops.patch(model, mode="compile")
        return
    base, _, minus = variant.partition(" -")
    flags = {c: c != minus for c in COMPONENTS}
    if base == "anyaccel":
        import anyaccel.ops

        anyaccel.ops.patch(model, **flags)
    else:
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama(rope=flags["rope"], rms_norm=flags["rms_norm"], swiglu=flags["swiglu"],
                                    cross_entropy=False, fused_linear_cross_entropy=flags["loss"], model=model)


def _saved_by_module(model: Any, step_forward: Any) -> dict[str, int]:
    import torch

    stack: list[str] = []
    params = {p.data_ptr() for p in model.parameters()}
    seen: set[int] = set()
    by_module: dict[str, int] = {}

    def pre(module: Any, _args: Any) -> None:
        stack.append(type(module).__name__)

    def post(_module: Any, _args: Any, _out: Any) -> None:
        stack.pop()

    def pack(t: torch.Tensor) -> torch.Tensor:
        try:
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key not in params and key not in seen and storage.nbytes():
                seen.add(key)
                name = stack[-1] if stack else "(outside modules)"
                by_module[name] = by_module.get(name, 0) + storage.nbytes()
        except (RuntimeError, NotImplementedError):
            pass  # a tensor without storage (a subclass): not counted
        return t

    handles = [m.register_forward_pre_hook(pre) for m in model.modules()]
    handles += [m.register_forward_hook(post) for m in model.modules()]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = step_forward()
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    return dict(sorted(by_module.items(), key=lambda kv: -kv[1]))


def _training(variant: str, optimizer: str = "foreach", layers: int | None = None
              ) -> tuple[Any, Any, Any, Any, Any]:
    """The model (patched as ``variant`` says, with ``layers`` decoder layers when given), its optimizer
    (``OPTIMIZERS[optimizer]``; capturable for the CUDA-graph variant), the input ids, a forward returning the
    loss, and a training step returning the loss as a float (which waits for the GPU, as a loop that logs it
    does)."""
    import torch
    import transformers
    from _common import llama_1b_config

    config = llama_1b_config()
    if layers is not None:
        config.num_hidden_layers = layers
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.train()
    _patch(variant, model)
    compile_mode = COMPILED.get(variant)
    graphs = compile_mode == "reduce-overhead"
    options = {**OPTIMIZERS[optimizer], **({"capturable": True} if graphs else {})}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, **options)
    run = model if compile_mode is None else torch.compile(model, mode=compile_mode)
    opt_step = torch.compile(opt.step, mode="reduce-overhead") if graphs else opt.step
    ids = torch.randint(0, config.vocab_size, (1, 4096), device="cuda")

    def forward() -> Any:
        return run(input_ids=ids, labels=ids).loss

    def step() -> float:
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        loss = forward()
        loss.backward()
        opt_step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    return model, opt, ids, forward, step


def child(variant: str, steps: int, warmup: int = 3, optimizer: str = "foreach", layers: int | None = None
          ) -> dict[str, Any]:
    """One variant in this process: ``warmup`` untimed training steps (at least one: the optimizer's state is
    created by the first; compiled variants compile there), the memory measurements (eager variants), then
    ``steps`` timed steps."""
    import torch

    model, opt, ids, forward, step = _training(variant, optimizer, layers)
    t0 = time.perf_counter()
    for _ in range(max(1, warmup)):
        step()
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - t0
    activations: int | None = None
    saved: dict[str, int] = {}
    if variant not in COMPILED:
        before = torch.cuda.memory_allocated()
        loss = forward()
        torch.cuda.synchronize()
        activations = torch.cuda.memory_allocated() - before
        loss.backward()
        opt.zero_grad(set_to_none=True)
        del loss
        saved = _saved_by_module(model, forward)
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    last = 0.0
    for _ in range(steps):
        last = step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    gib = 2**30
    return {"variant": variant, "optimizer": optimizer, "layers": model.config.num_hidden_layers,
            "tokens_per_s": round(steps * ids.numel() / dt), "warmup_s": round(warmup_s, 1),
            "peak_gib": round(torch.cuda.max_memory_allocated() / gib, 3),
            "reserved_gib": round(torch.cuda.max_memory_reserved() / gib, 3),
            "activations_gib": None if activations is None else round(activations / gib, 3), "loss": round(last, 5),
            "saved_by_module": {k: round(v / gib, 3) for k, v in saved.items()}}


def paired(rounds: int, steps: int, optimizer: str = "foreach") -> dict[str, Any]:
    """anyaccel against eager in one process: blocks of ``steps`` training steps of one model, alternately
    patched (`anyaccel.ops.patch`) and unpatched (`anyaccel.ops.nn.hf_patch.unpatch`), ``rounds`` pairs, each
    pair starting with the other variant than the last.

    The patched step is bound by the host on the machines measured (``docs/nn_ops.md``), and the host's speed
    varies between processes and within one over seconds; eager's step is bound by the GPU and hardly moves.
    Pairs of blocks a few seconds apart in one process see the same host, so the median of their ratios is
    the comparison least moved by it. Liger-Kernel patches transformers' classes for the whole process and
    has no unpatch, so it is not paired.

    Returns:
        ``{"anyaccel": [tokens/s per block], "eager": [...], "ratios": [anyaccel / eager per pair]}``.
    """
    import torch

    import anyaccel.ops
    from anyaccel.ops.nn.hf_patch import unpatch

    model, _opt, ids, _forward, step = _training("anyaccel", optimizer)

    def block() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        return steps * ids.numel() / (time.perf_counter() - t0)

    def use(variant: str) -> None:
        if variant == "anyaccel":
            anyaccel.ops.patch(model)
        else:
            unpatch(model)
        step()  # the first step after a switch is not timed

    for variant in ("anyaccel", "eager"):
        use(variant)
        step()
    out: dict[str, list[float]] = {"anyaccel": [], "eager": [], "ratios": []}
    for r in range(rounds):
        for variant in ("anyaccel", "eager") if r % 2 == 0 else ("eager", "anyaccel"):
            use(variant)
            out[variant].append(round(block()))
        out["ratios"].append(round(out["anyaccel"][-1] / out["eager"][-1], 4))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="timed steps per variant (default 4)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed training steps before the measurements (default 3; at least 1)")
    parser.add_argument("--variants", nargs="*", default=list(DEFAULT_VARIANTS), choices=VARIANTS,
                        help=f"default: {', '.join(DEFAULT_VARIANTS)}")
    parser.add_argument("--layers", type=int, default=None,
                        help="decoder layers (default: the Llama 3.2 1B shape's 16); fewer for a quicker look")
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs of every variant, interleaved (default 1); the table gives medians")
    parser.add_argument("--paired", type=int, default=0, metavar="N",
                        help="instead: N pairs of anyaccel and eager blocks of --steps steps in one process "
                             "(see paired())")
    parser.add_argument("--optimizer", default="foreach", choices=sorted(OPTIMIZERS),
                        help="torch.optim.AdamW as constructed with no options (foreach, the default) or with "
                             "fused=True (Hugging Face Trainer's default)")
    parser.add_argument("--child", default=None, choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.paired < 0 or args.steps < 1 or (args.layers is not None and args.layers < 1):
        parser.error(f"--paired {args.paired} --steps {args.steps} --layers {args.layers}: accepted --paired >= 0, "
                     "--steps >= 1 and --layers >= 1")
    if args.paired:
        result = paired(args.paired, args.steps, args.optimizer)
        print(json.dumps(result))
        for variant in ("anyaccel", "eager"):
            print(f"{variant}: median {statistics.median(result[variant]):.0f} tokens/s "
                  f"({min(result[variant])}-{max(result[variant])})")
        print(f"anyaccel / eager, median of {args.paired} pairs: {statistics.median(result['ratios']):.3f} "
              f"(range {min(result['ratios'])}-{max(result['ratios'])})")
        return 0
    if args.child is not None:
        print(json.dumps(child(args.child, args.steps, args.warmup, args.optimizer, args.layers)))
        return 0
    has_liger = importlib.util.find_spec("liger_kernel") is not None
    variants = [v for v in args.variants if has_liger or not v.startswith("liger")]
    missing = [v for v in args.variants if v not in variants]
    for v in missing:
        print(f"{v}: not installed (liger_kernel)")
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for r in range(args.rounds):
        # each round starts one variant later, so no variant always runs first (warmest or coldest machine)
        for variant in variants[r % len(variants):] + variants[:r % len(variants)]:
            out = subprocess.run([sys.executable, __file__, "--child", variant, "--steps", str(args.steps),
                                  "--warmup", str(args.warmup), "--optimizer", args.optimizer,
                                  *(["--layers", str(args.layers)] if args.layers is not None else [])],
                                 capture_output=True, text=True, timeout=900)
            if out.returncode != 0:
                print(f"{variant}: failed\n{out.stderr[-3000:]}", file=sys.stderr)
                continue
            row = json.loads(out.stdout.strip().splitlines()[-1])
            row["round"] = r
            rows[variant].append(row)
            print(json.dumps(row), flush=True)
    print(table(rows, missing))
    return 0


def table(rows: dict[str, list[dict[str, Any]]], missing: list[str] | None = None) -> str:
    """The summary table: per variant, the median tokens/s over its rounds and their range, the ratio of that
    median to eager's, the median of the per-round ratios to eager (rounds where both ran), and the largest
    peak and activation memory (the same every round: the step is deterministic in its allocations). Variants
    in ``missing`` get a "not installed" row; a variant whose every run failed, a "failed" row."""
    eager = rows.get("eager", [])
    lines = ["\nvariant | rounds | tokens/s median | min-max | x eager (medians) | x eager (median of rounds) | "
             "peak GiB | reserved GiB | activations GiB | loss"]
    for variant in missing or ():
        lines.append(f"{variant} | not installed (liger_kernel) | - | - | - | - | - | - | - | -")
    for variant, runs in rows.items():
        if not runs:
            lines.append(f"{variant} | failed (see stderr) | - | - | - | - | - | - | - | -")
            continue
        tps = [r["tokens_per_s"] for r in runs]
        med = statistics.median(tps)
        ratio = f"{med / statistics.median(e['tokens_per_s'] for e in eager):.3f}" if eager else "-"
        eager_by_round = {e["round"]: e["tokens_per_s"] for e in eager}
        paired = [r["tokens_per_s"] / eager_by_round[r["round"]] for r in runs if r["round"] in eager_by_round]
        per_round = f"{statistics.median(paired):.3f}" if paired else "-"
        lines.append(f"{variant} | {len(runs)} | {med:.0f} | {min(tps)}-{max(tps)} | {ratio} | {per_round} | "
                     f"{max(r['peak_gib'] for r in runs)} | {max(r.get('reserved_gib', 0) for r in runs)} | "
                     f"{runs[0]['activations_gib']} | "
                     f"{runs[0]['loss']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
