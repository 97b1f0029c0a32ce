"""Out-of-range class indices raise `IndexError` in cross_entropy, fused_linear_cross_entropy and nll_loss (the
op the override mode serves ``F.nll_loss`` with) on the CPU, as torch's cross_entropy and nll_loss do, for
every implementation (on a machine without a GPU the Triton kernels run in
Triton's interpreter, so the Triton implementation's check runs here too); on a GPU the device asserts, as
torch's CUDA kernels do (in a subprocess: the assertion leaves the CUDA context unusable). Valid targets,
including ``ignore_index`` and a custom ``ignore_index`` that is negative or past V, still give torch's loss."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import anyaccel.ops
import anyaccel.ops.nn as nn
from anyaccel.ops.nn.errors import OpInputError, TargetIndexError
from anyaccel.ops.nn.implementations import ops

#: (vocabulary, the bad index, its row) with ignore_index=-100
BAD = [(10, 10, 1), (10, 11, 0), (7, -5, 2), (7, -1, 3), (4099, 4099, 4), (3, 2**40, 1)]


def _on_host(device: str) -> None:
    if device != "cpu":
        pytest.skip("on a GPU the check is a device-side assertion: test_a_bad_target_stops_the_gpu")


def _targets(vocab: int, bad: int, row: int, device: str, dtype: torch.dtype) -> torch.Tensor:
    t = torch.tensor([1, 2 % vocab, -100, 0, vocab - 1], dtype=torch.int64)
    t[row] = bad
    return t.to(device, dtype) if dtype == torch.int64 or abs(bad) < 2**31 else t.to(device)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize(("vocab", "bad", "row"), BAD, ids=str)
def test_cross_entropy_raises_index_error_like_torch(device_impl: tuple[str, str], vocab: int, bad: int, row: int,
                                                     dtype: torch.dtype) -> None:
    device, impl = device_impl
    _on_host(device)
    z = torch.randn(5, vocab, device=device)
    t = _targets(vocab, bad, row, device, dtype)
    with pytest.raises(IndexError):
        F.cross_entropy(z.cpu(), t.cpu().long())  # torch on the CPU agrees that it is out of range
    with pytest.raises(TargetIndexError, match=rf"target holds {bad} at flat position {row}; accepted: class "
                                               rf"indices in \[0, {vocab}\)"):
        nn.cross_entropy(z, t, impl=impl)
    with pytest.raises(IndexError):
        nn.cross_entropy(z.view(1, 5, vocab), t.view(1, 5), reduction="none", impl=impl)


@pytest.mark.parametrize(("vocab", "bad", "row"), BAD, ids=str)
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_fused_linear_cross_entropy_raises_index_error(device_impl: tuple[str, str], vocab: int, bad: int,
                                                       row: int, bias: bool) -> None:
    device, impl = device_impl
    _on_host(device)
    hidden = torch.randn(5, 16, device=device, requires_grad=True)
    weight = torch.randn(vocab, 16, device=device, requires_grad=True)
    b = torch.randn(vocab, device=device) if bias else None
    t = _targets(vocab, bad, row, device, torch.int64)
    with pytest.raises(TargetIndexError, match=f"fused_linear_cross_entropy: target holds {bad}"):
        nn.fused_linear_cross_entropy(hidden, weight, t, b, impl=impl)
    with torch.no_grad(), pytest.raises(IndexError):
        nn.fused_linear_cross_entropy(hidden.view(1, 5, 16), weight, t.view(1, 5), b, reduction="sum", impl=impl)
    assert hidden.grad is None and weight.grad is None


@pytest.mark.parametrize(("vocab", "bad", "row"), BAD, ids=str)
@pytest.mark.parametrize("spatial", [False, True], ids=["NC", "NCd"])
def test_nll_loss_raises_index_error_like_torch(device_impl: tuple[str, str], vocab: int, bad: int, row: int,
                                               spatial: bool) -> None:
    """Before, the Triton kernel counted such a row as ignored: a silently different loss."""
    device, impl = device_impl
    _on_host(device)
    logp = torch.randn(5, vocab, device=device).log_softmax(1)
    t = _targets(vocab, bad, row, device, torch.int64)
    if spatial:  # [N, C, d] with the bad target in the second position of the spatial dimension
        logp, t = logp.T.reshape(1, vocab, 5), t.reshape(1, 5)
    with pytest.raises(IndexError):
        F.nll_loss(logp.cpu(), t.cpu())
    with pytest.raises(TargetIndexError, match=rf"nll_loss: target holds {bad} at flat position {row}"):
        ops("cross_entropy", device, impl, "compile").nll_loss(logp, t, None, 1, -100)


def test_nll_loss_under_the_override_mode_raises_ours_on_the_cpu() -> None:
    logp = torch.randn(3, 7, dtype=torch.float16).log_softmax(1)
    with anyaccel.ops.use_ops(device="cpu", policy="always"):
        with pytest.raises(TargetIndexError, match="nll_loss: target holds 7 at flat position 1"):
            F.nll_loss(logp, torch.tensor([1, 7, -100]), reduction="sum")
        torch.testing.assert_close(F.nll_loss(logp, torch.tensor([1, 6, -100]), reduction="sum").double(),
                                   F.nll_loss(logp.double(), torch.tensor([1, 6, -100]), reduction="sum"),
                                   atol=1e-2, rtol=1e-3)


@pytest.mark.parametrize("ignore_index", [-100, -1, 0, 12], ids=str)
def test_valid_targets_and_custom_ignore_index_still_match_torch(device_impl: tuple[str, str],
                                                                 ignore_index: int) -> None:
    """An ``ignore_index`` outside ``[0, V)`` is accepted as a target (torch's rule), one inside is a class
    whose rows are ignored."""
    device, impl = device_impl
    vocab = 12
    z = torch.randn(6, vocab, dtype=torch.float64)
    t = torch.tensor([0, 11, ignore_index, 5, ignore_index, 3])
    want = F.cross_entropy(z, t, ignore_index=ignore_index)
    got = nn.cross_entropy(z.float().to(device), t.to(device), ignore_index=ignore_index, impl=impl)
    torch.testing.assert_close(got.double().cpu(), want, atol=1e-5, rtol=1e-5)
    w = torch.randn(vocab, 8, dtype=torch.float64)
    h = torch.randn(6, 8, dtype=torch.float64)
    want = F.cross_entropy(h @ w.T, t, ignore_index=ignore_index)
    got = nn.fused_linear_cross_entropy(h.float().to(device), w.float().to(device), t.to(device),
                                        ignore_index=ignore_index, impl=impl)
    torch.testing.assert_close(got.double().cpu(), want, atol=1e-5, rtol=1e-5)


def test_target_index_error_is_an_op_input_error() -> None:
    assert issubclass(TargetIndexError, IndexError) and issubclass(TargetIndexError, OpInputError)


def test_compiled_fullgraph_raises_too() -> None:
    """The check runs inside the ops (the validating fakes see no data), so a compiled graph raises as eager
    does, without a graph break."""
    ce = torch.compile(lambda z, t: nn.cross_entropy(z, t, impl="torch"), fullgraph=True)
    flce = torch.compile(lambda h, w, t: nn.fused_linear_cross_entropy(h, w, t, impl="torch"), fullgraph=True)
    z, h = torch.randn(4, 10), torch.randn(4, 8, requires_grad=True)
    w = torch.randn(10, 8, requires_grad=True)
    good, bad = torch.tensor([1, 2, -100, 9]), torch.tensor([1, 2, 10, 9])
    torch.testing.assert_close(ce(z, good), F.cross_entropy(z, good))
    torch.testing.assert_close(flce(h, w, good), F.cross_entropy(h @ w.T, good))
    with pytest.raises(TargetIndexError, match="target holds 10 at flat position 2"):
        ce(z, bad)
    with pytest.raises(TargetIndexError, match="target holds 10 at flat position 2"):
        flce(h, w, bad)


def _call(op: str, impl: str, t: torch.Tensor) -> torch.Tensor:
    """One call of ``op`` on CUDA targets ``t`` (3 rows, 7 classes): the loss."""
    if op == "cross_entropy":
        return nn.cross_entropy(torch.randn(3, 7, device="cuda"), t, impl=impl)
    if op == "fused_linear_cross_entropy":
        return nn.fused_linear_cross_entropy(torch.randn(3, 8, device="cuda"), torch.randn(7, 8, device="cuda"), t,
                                             impl=impl)
    logp = torch.randn(3, 7, device="cuda").log_softmax(1)
    return ops("cross_entropy", "cuda", impl, "compile").nll_loss(logp, t, None, 1, -100)[0]


GPU_OPS = ["cross_entropy", "fused_linear_cross_entropy", "nll_loss"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("op", GPU_OPS)
@pytest.mark.parametrize("impl", ["triton", "torch"])
def test_a_bad_target_stops_the_gpu(op: str, impl: str) -> None:
    """The device-side assertion fires and names the op (in a subprocess: it leaves the CUDA context unusable).
    Where the error surfaces, at the op's next launch or at the next synchronisation, depends on how soon the
    device has run the assertion, so it is not checked here; that the check needs no synchronisation is
    (`test_the_target_check_does_not_synchronise`)."""
    script = textwrap.dedent(f"""
        import runpy, torch
        call = runpy.run_path({__file__!r})["_call"]
        call({op!r}, {impl!r}, torch.tensor([1, 7, -100], device="cuda"))
        torch.cuda.synchronize()
        print("no assertion", flush=True)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert "no assertion" not in run.stdout, run.stdout + run.stderr
    assert run.returncode != 0 and "device-side assert" in run.stderr, run.stderr
    assert f"{op}: a target is outside [0, 7) and is not ignore_index=-100" in run.stderr, run.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("op", GPU_OPS)
@pytest.mark.parametrize("impl", ["triton", "torch"])
def test_the_target_check_does_not_synchronise(op: str, impl: str) -> None:
    """With valid targets the op runs under ``torch.cuda.set_sync_debug_mode("error")``, which raises at any
    synchronising call: the check is queued on the device (so it can be captured in a CUDA graph)."""
    t = torch.tensor([1, 6, -100], device="cuda")
    _call(op, impl, t)  # warm-up: loading and compiling the kernels may synchronise
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss = _call(op, impl, t)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(loss).all()
