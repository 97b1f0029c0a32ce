"""Accuracy routes are not speed routes: 16-bit nll_loss sums and means, and 16-bit cross-entropy with label
smoothing or probability targets, go to anyaccel's fp32-accumulating ops in every policy (every entry of the
shipped default policy, a measured entry that says aten is faster, ``"always"``), through the portable
implementation on the CPU (no Triton interpreter forced here); ``"never"`` leaves them to aten.

The sizes make aten's 16-bit sums overflow (a float16 sum beyond 65504 is inf); references are float64 on
the same rounded inputs, tolerances FlagGems's (:mod:`anyaccel.testing.tolerances`)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import anyaccel.ops
from anyaccel.ops.override import aten_ops, mode, policy
from anyaccel.ops.override.policy import Policy, key
from anyaccel.testing.tolerances import assert_close

HALF = [torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def portable_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """The CPU's own choice of implementation (the portable one), no tuning table, the mode off afterwards."""
    for f in ("softmax", "cross_entropy"):
        monkeypatch.delenv(f"ANYACCEL_IMPL_{f.upper()}", raising=False)
    monkeypatch.delenv("ANYACCEL_OVERRIDE_POLICY", raising=False)
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(tmp_path))
    yield
    mode.disable()


def _overflowing_logits(rows: int, classes: int, dtype: torch.dtype, shape: tuple[int, ...] = (),
                        reduction: str = "mean") -> torch.Tensor:
    """Logits whose per-row loss is about 10 for a mean (the sum of ``rows`` losses leaves float16's range), about
    2 for a sum (the true sum stays in range; a 16-bit running sum stops growing long before), with noise so rows
    differ; ``shape`` puts the classes in dimension 1 of ``(rows, classes, *shape)``."""
    z = torch.randn(rows, classes, *shape, dtype=torch.float64)
    z[:, 0] += 1.0 if reduction == "sum" else 10.0
    return z.to(dtype)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize(("rows", "classes", "spatial"), [(20000, 7, ()), (2001, 5, (3, 3))], ids=str)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_label_smoothing_is_finite_and_close_to_float64(rows: int, classes: int, spatial: tuple[int, ...],
                                                         reduction: str, weighted: bool, dtype: torch.dtype) -> None:
    z = _overflowing_logits(rows, classes, dtype, spatial, reduction).requires_grad_()
    t = torch.randint(1, classes, (rows, *spatial))
    t.view(-1)[::5] = -100
    w = (torch.rand(classes, dtype=torch.float64) + 0.5).to(dtype) if weighted else None
    kw = dict(weight=w, reduction=reduction, label_smoothing=0.1)
    with anyaccel.ops.use_ops(device="cpu") as replaced:
        loss = F.cross_entropy(z, t, **kw)
        g = torch.randn(loss.shape, dtype=torch.float64).to(dtype)
        (dz,) = torch.autograd.grad(loss, z, g)
    assert "cross_entropy_loss" in replaced
    zr = z.detach().double().requires_grad_()
    ref = F.cross_entropy(zr, t, weight=None if w is None else w.double(), reduction=reduction, label_smoothing=0.1)
    (dref,) = torch.autograd.grad(ref, zr, g.double())
    assert loss.dtype == dtype and loss.shape == ref.shape and torch.isfinite(loss).all()
    assert_close(loss, ref, t.numel() if reduction != "none" else classes, msg="loss")
    assert_close(dz, dref, classes, msg="dlogits")


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_probability_targets_are_finite_and_close_to_float64(reduction: str, smoothing: float,
                                                             dtype: torch.dtype) -> None:
    rows, classes = 9001, 13
    z = _overflowing_logits(rows, classes, dtype, reduction=reduction).requires_grad_()
    p = torch.rand(rows, classes, dtype=torch.float64).softmax(-1).to(dtype)
    with anyaccel.ops.use_ops(device="cpu"):
        loss = F.cross_entropy(z, p, reduction=reduction, label_smoothing=smoothing)
        (dz,) = torch.autograd.grad(loss, z)
    zr = z.detach().double().requires_grad_()
    ref = F.cross_entropy(zr, p.double(), reduction=reduction, label_smoothing=smoothing)
    (dref,) = torch.autograd.grad(ref, zr)
    assert torch.isfinite(loss)
    assert_close(loss, ref, rows, msg="loss")
    assert_close(dz, dref, classes, msg="dlogits")


def test_aten_alone_overflows_where_the_mode_does_not() -> None:
    """The cases above fail without the mode (and with ``policy="never"``): aten sums in float16."""
    z = _overflowing_logits(20000, 7, torch.float16)
    t = torch.randint(1, 7, (20000,))  # class 0 holds the +10: every row's loss is about 10, the sum 2e5
    p = torch.rand(20000, 7, dtype=torch.float64).softmax(-1).half()
    for pol in (None, "never"):
        with anyaccel.ops.use_ops(device="cpu", policy="never") if pol else contextlib.nullcontext():
            assert torch.isinf(F.cross_entropy(z, t, label_smoothing=0.1))
            assert torch.isinf(F.cross_entropy(z, p, reduction="sum"))
            assert torch.isinf(F.nll_loss(z.log_softmax(1), t, reduction="sum"))
    with anyaccel.ops.use_ops(device="cpu"):
        assert torch.isfinite(F.cross_entropy(z, t, label_smoothing=0.1))


def _entries() -> list[tuple[str, tuple[int, int] | None]]:
    """(device name, capability) of every entry of the shipped default policy, and an unknown device."""
    out: list[tuple[str, tuple[int, int] | None]] = []
    for dkey in policy.read_default()["devices"]:
        name, _, cap = dkey.partition("|")
        out.append((name, tuple(int(c) for c in cap.split(".")) if cap else None))  # type: ignore[misc]
    return [*out, ("Some Accelerator", (1, 0))]


def _slower_everywhere() -> Policy:
    """A measured entry saying anyaccel's nll kernels are slower than aten's at every key of this test."""
    keys = [key(op, dt, rows, 7) for op in ("nll_loss_forward", "nll_loss_backward") for dt in HALF
            for rows in (4096, 32768)]
    return Policy("tuned", speedups=dict.fromkeys(keys, 0.5), fallbacks=dict.fromkeys(keys, 0.99),
                  source="a table measuring anyaccel slower")


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("entry", [*_entries(), "slower", "always"], ids=str)
def test_16_bit_nll_sums_take_the_fp32_path_in_every_policy_entry(
        entry: tuple[str, tuple[int, int] | None] | str, reduction: str, dtype: torch.dtype,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if entry == "slower":
        pol: Policy | str = _slower_everywhere()
    elif entry == "always":
        pol = "always"
    else:
        assert isinstance(entry, tuple)
        monkeypatch.setattr(mode, "_device_name", lambda _dt: entry[0])
        monkeypatch.setattr(mode, "_capability", lambda _dt: entry[1])
        pol = mode.load_policy("tuned")
    calls = _spy_nll(monkeypatch)
    rows = 20000
    logp = _overflowing_logits(rows, 7, torch.float64, reduction=reduction).log_softmax(1).to(dtype)
    t = torch.randint(0, 7, (rows,))
    with anyaccel.ops.use_ops(device="cpu", include=["cross_entropy"], policy=pol) as replaced:
        out = F.nll_loss(logp, t, reduction=reduction)
    assert "nll_loss_forward" in replaced
    assert calls == [f"{dtype}/{1 if reduction == 'mean' else 2}"], "the call did not take anyaccel's fp32 path"
    assert torch.isfinite(out)
    assert_close(out, F.nll_loss(logp.double(), t, reduction=reduction), rows)


def _spy_nll(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record ``"<dtype>/<reduction>"`` of every call the mode's ``nll_loss_forward`` sends to anyaccel's op."""
    calls: list[str] = []

    def spy(run: Any) -> Any:
        def wrapped(ns: Any, a: tuple[Any, ...]) -> Any:
            calls.append(f"{a[0].dtype}/{a[3]}")
            return run(ns, a)
        return wrapped

    monkeypatch.setattr(aten_ops, "OVERRIDES", tuple(
        dataclasses.replace(o, run=spy(o.run)) if o.name == "nll_loss_forward" else o for o in aten_ops.OVERRIDES))
    return calls


def test_float32_and_unreduced_calls_stay_with_aten_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The portable implementation serves the accuracy routes only: float32 losses and 16-bit ``none``
    reductions are aten's, even with ``policy="always"``."""
    calls = _spy_nll(monkeypatch)
    logp = torch.randn(6, 5).log_softmax(-1)
    t = torch.randint(0, 5, (6,))
    with anyaccel.ops.use_ops(device="cpu", policy="always"):
        F.nll_loss(logp, t)
        F.nll_loss(logp.half(), t, reduction="none")
        F.nll_loss(logp.half(), t, reduction="sum")
    assert calls == ["torch.float16/2"]
