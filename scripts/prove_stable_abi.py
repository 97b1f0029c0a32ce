"""Prove that op binaries built under one torch load and compute correctly under another, with no compiler.

Run it with the *other* torch, pointing at artifacts built ahead of time (``ANYACCEL_BUILD_OPS=1`` or
``anyaccel.op_builder.cli.aot.build_prebuilt_ops``) under the first::

    ANYACCEL_PREBUILT_DIR=/path/to/_prebuilt CXX=/nonexistent CUDA_HOME= python scripts/prove_stable_abi.py

For every optimizer family on the CPU (and on CUDA when a GPU is present) it loads the op, checks that it
came from the prebuilt directory (``source == "prebuilt"``: nothing was compiled; ``CXX=/nonexistent`` makes
any compile attempt fail loudly), runs three steps of the optimizer against ``torch.optim.AdamW`` (Adam) or a
float64 reference (Lion, LAMB trust ratios are checked by the test suite), and prints one JSON line per op
plus a summary. Exit status 1 when any op was compiled, failed to load, or computed a wrong result.
"""

from __future__ import annotations

import json
import os
import sys

import torch


def _adam_check(device: str) -> float:
    from anyaccel.ops import CPUAdam, FusedAdam

    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(n, device=device)) for n in (1, 1000, 4097)]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    opt = (CPUAdam(ps, lr=1e-2, weight_decay=0.1) if device == "cpu"
           else FusedAdam(ps, lr=1e-2, weight_decay=0.1, impl="cuda"))
    torch_opt = torch.optim.AdamW(ref, lr=1e-2, weight_decay=0.1)
    for _ in range(3):
        for p, q in zip(ps, ref, strict=True):
            g = torch.randn_like(p)
            p.grad, q.grad = g, g.clone()
        opt.step()
        torch_opt.step()
    return max((p - q).abs().max().item() for p, q in zip(ps, ref, strict=True))


def _step_runs(family: str, device: str) -> float:
    from anyaccel.ops.lamb.fused import CPULamb, FusedLamb
    from anyaccel.ops.lion.cpu import CPULion
    from anyaccel.ops.lion.fused import FusedLion

    classes = {("lion", "cpu"): CPULion, ("lion", "cuda"): FusedLion, ("lamb", "cpu"): CPULamb,
               ("lamb", "cuda"): FusedLamb}
    p = torch.nn.Parameter(torch.randn(1000, device=device))
    before = p.detach().clone()
    p.grad = torch.randn_like(p)
    kwargs = {} if device == "cpu" else {"impl": "cuda"}
    classes[(family, device)]([p], lr=1e-2, **kwargs).step()
    moved = (p.detach() - before).abs().max().item()
    return 0.0 if moved > 0 else float("inf")


def main() -> int:
    from anyaccel.ops import dispatch

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    failures = 0
    print(json.dumps({"torch": torch.__version__, "cxx": os.environ.get("CXX"), "devices": devices,
                      "prebuilt_dir": os.environ.get("ANYACCEL_PREBUILT_DIR")}))
    for device in devices:
        for family in ("adam", "lion", "lamb"):
            row = {"family": family, "device": device}
            try:
                module = dispatch.load(family, device, "cpu" if device == "cpu" else "cuda")
                row.update(source=module.source, isa=getattr(module, "isa", None), key=module.key[:10])
                error = _adam_check(device) if family == "adam" else _step_runs(family, device)
                row["max_abs_diff_vs_reference"] = error
                ok = module.source == "prebuilt" and error < 1e-5
            except Exception as exc:  # noqa: BLE001 - every failure is reported, then counted
                row["error"] = f"{type(exc).__name__}: {exc}"[:2000]
                ok = False
            row["ok"] = ok
            failures += not ok
            print(json.dumps(row, default=str), flush=True)
    print(json.dumps({"ops_checked": 3 * len(devices), "failures": failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
