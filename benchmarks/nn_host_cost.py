"""Benchmark: host time per eager call of the model ops, anyaccel against Liger-Kernel, FlagGems and aten.

At small shapes a Python-launched Triton op is bound by the host: the time to validate, allocate, enter
autograd and launch exceeds the kernel's. This times that cost directly: loops of ``--calls`` back-to-back
eager calls on a 256x1024 bf16 input requiring grad (the kernels are short, so the loop runs ahead of the GPU
and measures the host), each loop device-synchronised once, the contenders taking turns loop by loop
(``_common.interleaved_times``) for ``--repeats`` rounds (the GPU hosts' timing noise moves single figures
by 1.5x). Rope is queries and keys of 8 and 2 heads of 128 over 256 positions:
anyaccel's ``rope_qk`` (one launch), two ``rope`` calls, and Liger's ``liger_rope`` (one launch). FlagGems
runs its aten overrides inside ``flag_gems.use_gems()``; peers that are not installed are skipped::

    python benchmarks/nn_host_cost.py [--modes fwd fwd+bwd] [--launch-ab] [--layers] [--profile "ours layer_norm"]

``--modes fwd+bwd`` times the forward and ``torch.autograd.grad`` of its outputs with fixed output gradients
(the backward's kernels and autograd's engine included). ``--launch-ab`` adds, per anyaccel contender, a
twin named ``... (triton launch)`` that launches its kernels through Triton's ``kernel[grid](...)`` instead
of anyaccel's fast launcher (`anyaccel._compat.triton_launch`), taking turns with it in the same loop
order. ``--layers`` adds, per anyaccel forward, the layers under its front end, each timed on its own with the
arguments the front end passed down (`layers`): ``[eager Function]``, the implementation's eager
``autograd.Function`` (what the front end calls in eager mode); ``[implementation]``, the same Python
function without autograd (checks, allocation, launches); ``[launches]``, its Triton launches alone, replayed
through the fast launcher with the arguments they had. The differences between consecutive layers are the
front end's routing, autograd's ``Function.apply`` and the implementation's own Python.

Prints microseconds of host time per call, the best and the median loop; ``--profile NAME...`` adds a
cProfile of those contenders.
Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from collections.abc import Callable
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F
from _common import backward_of, have, interleaved_times, median  # puts the repository on sys.path

import anyaccel.ops.nn as ann
from anyaccel._compat import triton_launch as fast_launch
from anyaccel.ops import dispatch
from anyaccel.ops.nn import functional as front_ends

DTYPE = torch.bfloat16


def contenders() -> tuple[dict[str, Callable[[], Any]], dict[str, Callable[[], Any]], dict[str, tuple[Any, ...]]]:
    """``(plain, under_flag_gems, inputs)``: contender name -> one eager call; op name (a contender's name
    without its first word) -> the tensors its calls differentiate against."""

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=DTYPE, requires_grad=True)

    x, w, b = r(256, 1024), r(1024), r(1024)
    a, g = r(256, 1024), r(256, 1024)
    q = torch.randn(1, 256, 8, 128, device="cuda", dtype=DTYPE).transpose(1, 2).requires_grad_()
    k = torch.randn(1, 256, 2, 128, device="cuda", dtype=DTYPE).transpose(1, 2).requires_grad_()
    cos = torch.randn(1, 256, 128, device="cuda", dtype=DTYPE)
    sin = torch.randn_like(cos)
    cu, su = cos[:, None], sin[:, None]
    plain: dict[str, Callable[[], Any]] = {
        "aten rms_norm": lambda: F.rms_norm(x, (1024,), w, 1e-6),
        "ours rms_norm": lambda: ann.rms_norm(x, w, 1e-6),
        "aten layer_norm": lambda: F.layer_norm(x, (1024,), w, b),
        "ours layer_norm": lambda: ann.layer_norm(x, 1024, w, b),
        "aten softmax": lambda: torch.softmax(x, -1),
        "ours softmax": lambda: ann.softmax(x, -1),
        "ours swiglu": lambda: ann.swiglu(a, g),
        "ours rope_qk": lambda: ann.rope_qk(q, k, cu, su),
        "ours rope x2": lambda: (ann.rope(q, cu, su), ann.rope(k, cu, su)),
    }
    if have("liger_kernel"):
        from liger_kernel.transformers import functional as lf

        plain.update({
            "liger rms_norm": lambda: lf.liger_rms_norm(x, w, 1e-6, 0.0, "llama", False),
            "liger layer_norm": lambda: lf.liger_layer_norm(x, w, b, 1e-5),
            "liger swiglu": lambda: lf.liger_swiglu(a, g),
            "liger rope": lambda: lf.liger_rope(q, k, cos, sin),
        })
    gems: dict[str, Callable[[], Any]] = {}
    if have("flag_gems"):
        gems = {"flag_gems rms_norm": lambda: F.rms_norm(x, (1024,), w, 1e-6),
                "flag_gems layer_norm": lambda: F.layer_norm(x, (1024,), w, b)}
    inputs = {"rms_norm": (x, w), "layer_norm": (x, w, b), "softmax": (x,), "swiglu": (a, g), "rope_qk": (q, k),
              "rope x2": (q, k), "rope": (q, k)}
    return plain, gems, inputs


def without_fast_launch(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` with anyaccel's Triton fast launcher switched off for the call."""

    def run() -> Any:
        fast_launch.set_enabled(False)
        try:
            return fn()
        finally:
            fast_launch.set_enabled(True)

    return run


def layers(name: str, front_end: Callable[[], Any]) -> dict[str, Callable[[], Any]]:
    """The layers under one anyaccel front-end call (see the module docstring): ``name [eager Function]``,
    ``name [implementation]`` and ``name [launches]``, each a zero-argument call repeating what that layer did
    in one call of ``front_end``.

    Raises:
        RuntimeError: ``front_end`` called no implementation function (not an anyaccel front end).
    """
    recorders: list[tuple[str, mock.Mock]] = []
    routed = front_ends.ops

    def recorded(family: str, device_type: str, impl: str | None = None) -> mock.Mock:
        recorders.append((family, mock.Mock(wraps=routed(family, device_type, impl))))
        return recorders[-1][1]

    with mock.patch.object(front_ends, "ops", recorded):
        front_end()
    calls = [(family, call) for family, recorder in recorders for call in recorder.mock_calls]
    if not calls:
        raise RuntimeError(f"{name}: the call reached no implementation function")
    family, (fn_name, args, _) = calls[0]
    loaded = dispatch.load(family, "cuda")
    eager, implementation = getattr(loaded.eager, fn_name), getattr(loaded.plain, fn_name)
    with mock.patch.object(fast_launch.FastLaunch, "launch", autospec=True,
                           side_effect=fast_launch.FastLaunch.launch) as launch:
        implementation(*args)
    launches = [(c.args[0], c.args[1], c.args[2:], c.kwargs) for c in launch.call_args_list]

    def replay() -> None:
        for launcher, grid, a, k in launches:
            launcher.launch(grid, *a, **k)

    return {f"{name} [eager Function]": lambda: eager(*args), f"{name} [implementation]": lambda: implementation(*args),
            f"{name} [launches]": replay}


def loops(fns: dict[str, Callable[[], Any]], calls: int) -> dict[str, Callable[[], None]]:
    """Each contender as one timed unit: ``calls`` back-to-back calls, then a device synchronisation."""

    def loop(fn: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()

        return run

    return {name: loop(fn) for name, fn in fns.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per timed loop (default 300)")
    parser.add_argument("--repeats", type=int, default=14, help="timed rounds, contenders in turn (default 14)")
    parser.add_argument("--profile", nargs="*", default=[], help="cProfile these contenders (names as printed)")
    parser.add_argument("--modes", nargs="*", default=["fwd"], choices=["fwd", "fwd+bwd"],
                        help="forward calls, and/or forward + torch.autograd.grad (default: fwd)")
    parser.add_argument("--layers", action="store_true",
                        help="add the layers under each anyaccel forward: its eager Function, implementation and "
                             "launches (see layers())")
    parser.add_argument("--launch-ab", action="store_true",
                        help="add a twin of each anyaccel contender launching through Triton's kernel[grid]")
    args = parser.parse_args()
    if args.layers and "fwd" not in args.modes:
        parser.error(f"--layers times forward calls; add fwd to --modes (got --modes {' '.join(args.modes)})")
    if not torch.cuda.is_available():
        print("nn_host_cost benchmark: needs a CUDA GPU", file=sys.stderr)
        return 2
    base, base_gems, inputs = contenders()
    plain: dict[str, Callable[[], Any]] = {}
    gems: dict[str, Callable[[], Any]] = {}
    for mode in args.modes:
        suffix = "" if mode == "fwd" else " fwd+bwd"
        for name, fn in base.items():
            fn = fn if mode == "fwd" else backward_of(fn, inputs[name.split(" ", 1)[1]])
            plain[name + suffix] = fn
            if args.launch_ab and name.startswith("ours "):
                plain[name + suffix + " (triton launch)"] = without_fast_launch(fn)
        if args.layers and mode == "fwd":
            for name, fn in base.items():
                if name.startswith("ours ") and name != "ours rope x2":
                    plain.update(layers(name, fn))
        for name, fn in base_gems.items():
            gems[name + suffix] = fn if mode == "fwd" else backward_of(fn, inputs[name.split(" ", 1)[1]])
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; liger_kernel "
          f"{'yes' if have('liger_kernel') else 'not installed'}; flag_gems {'yes' if gems else 'not installed'}")
    seconds = interleaved_times(loops(plain, args.calls), args.repeats, warmup=2)
    if gems:
        import flag_gems

        with flag_gems.use_gems():  # entered once: entering registers every FlagGems op
            seconds.update(interleaved_times(loops(gems, args.calls), args.repeats, warmup=2))
    print("contender | host us per call: best loop | median loop")
    for name in sorted(seconds, key=lambda n: (n.split(" ", 1)[1], n)):
        per_call = [1e6 * t / args.calls for t in seconds[name]]
        print(f"{name} | {min(per_call):.1f} | {median(per_call):.1f}")
    for name in args.profile:
        fn = {**plain, **gems}[name]
        print(f"\n### cProfile of {name!r}, {args.calls} calls")
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.calls):
            fn()
        torch.cuda.synchronize()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
