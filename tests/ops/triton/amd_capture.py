"""Compile every Triton kernel launch of the ops for an AMD GPU, with no GPU: run as a script by test_amd_compile.py.

How: Triton's launch path (``JITFunction.run``) is used as it is, so each kernel gets exactly the signature,
specialization and constexprs a real launch would give it, and the ops are called on CPU tensors. Two public
Triton hooks make that possible without a device:

- ``triton.runtime.driver.set_active``: a driver that answers "device 0, stream 0, target ``TARGET``" (the AMD
  target, so the argument specialization is the HIP backend's);
- ``triton.knobs.runtime.jit_cache_hook``: called with the kernel and its specialization before Triton compiles
  it; here it compiles that specialization with ``triton.compile`` for ``TARGET`` and returns True, which tells
  Triton to skip its own compile and the launch (the ops' outputs stay uninitialised; nothing reads them).

Prints one JSON line per distinct specialization: the kernel (module and name), its source's called names, the
signature, and whether it compiled (with the hsaco's size) or the error.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

os.environ["ANYACCEL_TRITON_FAST_LAUNCH"] = "0"  # every launch through JITFunction.run, so the hook sees it
os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime import driver  # noqa: E402

TARGET = GPUTarget("hip", sys.argv[1] if len(sys.argv) > 1 else "gfx942", 64)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class _AMDTarget:
    """The driver Triton's launch path asks for the device, stream and target."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return TARGET

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")


_seen: set[str] = set()


def _compile_hook(*, key: Any, repr: str, fn: Any, compile: dict[str, Any], is_manual_warmup: bool,
                  already_compiled: bool) -> bool:
    seen_key = f"{fn.module}.{fn.name}:{key}"
    if seen_key in _seen:
        return True
    _seen.add(seen_key)
    jit = fn.jit_function
    record: dict[str, Any] = {"module": fn.module, "name": fn.name, "repr": repr, "src": jit.src,
                              "signature": {k: str(v) for k, v in compile["signature"].items()}}
    try:
        src = ASTSource(jit, compile["signature"], compile["constants"], compile["configs"][0])
        compiled = triton.compile(src, target=TARGET, options={"num_warps": compile["num_warps"],
                                                               "num_stages": compile["num_stages"]})
        hsaco = compiled.asm["hsaco"]
        record.update(ok=True, hsaco_bytes=len(hsaco), elf=hsaco[:4] == b"\x7fELF")
    except Exception as exc:  # reported to the test, which names the kernel
        record.update(ok=False, error=f"{type(exc).__name__}: {exc}"[-3000:])
    print(json.dumps(record), flush=True)
    return True


def _model_ops() -> list[Callable[[], Any]]:
    from anyaccel.ops import dispatch

    def plain(family: str) -> Any:
        return dispatch.load(family, "cuda", "triton").plain

    sm, rms, ln, sw, rope, ce = (plain(f) for f in ("softmax", "rms_norm", "layer_norm", "swiglu", "rope",
                                                     "cross_entropy"))
    calls: list[Callable[[], Any]] = []
    for dt in DTYPES:
        def r(*shape: int, dt: torch.dtype = dt) -> torch.Tensor:
            return torch.randn(*shape, dtype=dt)

        x, w = r(6, 67), r(67)
        x3 = r(5, 9, 3)  # a reduction over an inner (not last) dimension
        cos, sin = r(7, 1, 8), r(7, 1, 8)  # per position, broadcast over heads; one value per pair of a head of 16
        q, k = r(2, 7, 3, 16), r(2, 7, 1, 16)
        logits, target = r(6, 67), torch.randint(0, 67, (6,))
        rstd, mean = torch.rand(6), torch.rand(6)
        calls += [
            lambda x=x, x3=x3: (sm.softmax(x, -1), sm.log_softmax(x, -1), sm.softmax(x3, 1), sm.log_softmax(x3, 1)),
            lambda x=x, x3=x3: (sm.softmax_backward(x, x, -1), sm.log_softmax_backward(x, x, -1),
                                sm.softmax_backward(x3, x3, 1), sm.log_softmax_backward(x3, x3, 1)),
            lambda x=x, w=w: (rms.rms_norm(x, w, 1e-6, "torch"), rms.rms_norm(x, None, 1e-6, "llama"),
                              rms.fused_add_rms_norm(x, x.clone(), w, 1e-6, "torch")),
            lambda x=x, w=w, rstd=rstd: (rms.rms_norm_backward(x, x, w, rstd, None, "torch", True),
                                         rms.rms_norm_backward(x, x, None, rstd, x, "llama", False)),
            lambda x=x, w=w: (ln.layer_norm(x, w, w, 1e-5), ln.layer_norm(x, None, None, 1e-5)),
            lambda x=x, w=w, mean=mean, rstd=rstd: (ln.layer_norm_backward(x, x, w, mean, rstd, True, True),
                                                    ln.layer_norm_backward(x, x, None, mean, rstd, False, False)),
            lambda x=x: (sw.silu(x), sw.silu_backward(x, x), sw.swiglu(x, x), sw.swiglu_backward(x, x, x),
                         sw.swiglu_backward_recompute(x, x, x)),
            lambda q=q, k=k, cos=cos, sin=sin: tuple(
                out for il in (False, True) for out in (
                    rope.rope(q, cos, sin, il), rope.rope_backward(q, cos, sin, il), rope.rope_qk(q, k, cos, sin, il),
                    rope.rope_qk_backward(q, k, cos, sin, il))),
            lambda logits=logits, target=target: (
                ce.cross_entropy(logits, target, -100, 0.0), ce.cross_entropy(logits, target, 3, 0.1),
                ce.cross_entropy_backward(torch.ones(6), logits, target, torch.zeros(6), -100, 0.1),
                ce.nll_loss(logits, target, None, 1, -100), ce.nll_loss(logits, target, torch.rand(67), 0, -100),
                ce.nll_loss_backward(torch.ones(()), logits, target, None, 1, -100, torch.ones(())),
                ce.nll_loss_backward(torch.ones(6), logits, target, torch.rand(67), 0, -100, torch.ones(())),
                ce.scale_in_place(logits, torch.ones(()))),
            lambda x=x, logits=logits, target=target: ce.fused_linear_cross_entropy(
                x, torch.randn(67, 67, dtype=x.dtype), target, None, -100, 0.0, "mean", True, torch.float32),
        ]
    return calls


def _optimizers() -> list[Callable[[], Any]]:
    from anyaccel.ops.adam.triton import adam_step
    from anyaccel.ops.lamb.triton import lamb_step
    from anyaccel.ops.lion.triton import lion_step

    sizes = (37, 1, 4099)
    calls: list[Callable[[], Any]] = []
    for dt in (torch.float32, torch.bfloat16):
        def ts(dt: torch.dtype = dt) -> list[torch.Tensor]:
            return [torch.randn(n, dtype=dt) for n in sizes]

        copies = [torch.empty(n, dtype=torch.bfloat16) for n in sizes] if dt == torch.float32 else []
        for mc in ([], copies):
            calls += [
                lambda mc=mc, ts=ts: adam_step(ts(), ts(), ts(), ts(), mc, 2, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, True),
                lambda mc=mc, ts=ts: lion_step(ts(), ts(), ts(), mc, 1e-4, 0.9, 0.99, 0.01),
                lambda mc=mc, ts=ts: lamb_step(ts(), ts(), ts(), ts(), mc, torch.empty(len(sizes)), 2, 1e-3, 0.9,
                                               0.999, 1e-8, 0.01, 1.0, 10.0, 0.01, True, False),
            ]
    return calls


def main() -> int:
    driver.set_active(_AMDTarget())
    triton.knobs.runtime.jit_cache_hook = _compile_hook
    failed = 0
    for call in _model_ops() + _optimizers():
        try:
            call()
        except Exception as exc:  # a call the driver got wrong: reported, the others still run
            failed += 1
            print(json.dumps({"call_error": f"{type(exc).__name__}: {exc}"[-2000:]}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
