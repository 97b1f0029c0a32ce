"""Cross-entropy and NLL through the override mode: ``torch.nn.functional.cross_entropy`` / ``nll_loss`` run
``_log_softmax`` + ``nll_loss_forward`` and their backwards, all replaced by anyaccel's kernels (Triton
interpreter here), which sum 16-bit losses in fp32: aten's CPU kernel returns inf for a float16 mean whose
sum leaves float16's range, the mode the finite loss.

Tolerances are FlagGems's (``tests/accuracy_utils.py``: rtol = ``RESOLUTION[dtype]``, 1.3e-6 for float32,
1e-3 for float16, 0.016 for bfloat16; atol = 1e-4 x the number of summed terms; :mod:`anyaccel.testing.tolerances`)
against float64 references computed from the same rounded inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import anyaccel.ops
from anyaccel.ops.override.policy import Policy
from anyaccel.testing.tolerances import assert_close


class CountingPolicy(Policy):
    """Policy "always" recording the aten ops routed to anyaccel."""

    def __init__(self) -> None:
        super().__init__("always")
        self.ours: list[str] = []

    def use_ours(self, k: str) -> bool:
        self.ours.append(k.split("|")[0])
        return True


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize(("rows", "classes"), [(1, 3), (13, 37), (5, 1031)], ids=str)
def test_cross_entropy_routes_to_anyaccel_and_matches_float64(interpreter_impls: None, rows: int, classes: int,
                                                              weighted: bool, reduction: str,
                                                              dtype: torch.dtype) -> None:
    z = torch.randn(rows, classes, dtype=torch.float64).mul(3).to(dtype).requires_grad_()
    t = torch.randint(0, classes, (rows,))
    t[2::3] = -100
    w = (torch.rand(classes, dtype=torch.float64) + 0.5).to(dtype) if weighted else None
    pol = CountingPolicy()
    with anyaccel.ops.use_ops(include=["softmax", "cross_entropy"], policy=pol):
        loss = F.cross_entropy(z, t, weight=w, reduction=reduction)
        g = torch.randn(loss.shape, dtype=torch.float64).to(dtype)
        (dz,) = torch.autograd.grad(loss, z, g)
    assert {"_log_softmax", "nll_loss_forward", "nll_loss_backward", "_log_softmax_backward_data"} <= set(pol.ours)
    zr = z.detach().double().requires_grad_()
    ref = F.cross_entropy(zr, t, weight=None if w is None else w.double(), reduction=reduction)
    (dref,) = torch.autograd.grad(ref, zr, g.double())
    assert loss.dtype == dtype and loss.shape == ref.shape
    summed = rows if reduction != "none" else 1
    assert_close(loss, ref, summed, msg="loss")
    assert_close(dz, dref, classes, msg="dlogits")


def test_float16_cross_entropy_is_finite_through_the_mode(interpreter_impls: None) -> None:
    """20000 rows of loss 10 (the sum, 200000, is beyond float16's 65504): aten's CPU kernel returns inf, the
    mode's fp32 accumulation the mean, 10."""
    z = torch.zeros(20000, 8, dtype=torch.float16)
    z[:, 0] = 10.0
    t = torch.ones(20000, dtype=torch.long)
    pol = CountingPolicy()
    with anyaccel.ops.use_ops(include=["softmax", "cross_entropy"], policy=pol):
        loss = F.cross_entropy(z, t)
    assert "nll_loss_forward" in pol.ours
    ref = F.cross_entropy(z.double(), t)
    assert torch.isfinite(loss)
    assert_close(loss, ref, 20000)


def test_nll_loss_default_policy_routes_16_bit_only(interpreter_impls: None, tmp_path: object,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped default policy sends 16-bit nll_loss calls of every size to anyaccel and leaves float32 ones
    (and small softmaxes) to aten."""
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(tmp_path))
    from anyaccel.ops.override import mode

    pol = Policy.load("Some Accelerator", "tuned", capability=(1, 0))
    routed: list[str] = []
    base = pol.use_ours

    def spy(k: str) -> bool:
        decision = base(k)
        if decision:
            routed.append(k)
        return decision

    monkeypatch.setattr(pol, "use_ours", spy)
    with anyaccel.ops.use_ops(include=["cross_entropy"], policy=pol) as replaced:
        assert replaced == ["nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward",
                            "cross_entropy_loss"]
        for dtype in (torch.float32, torch.float16):
            F.nll_loss(torch.randn(6, 5).log_softmax(-1).to(dtype), torch.randint(0, 5, (6,)))
    assert [k.split("|")[:2] for k in routed] == [["nll_loss_forward", "float16"]]
    assert mode.replaced_ops() == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("shape", [(3, 7, 5), (2, 11, 3, 4)], ids=str)
def test_class_first_cross_entropy_routes_to_anyaccel(interpreter_impls: None, shape: tuple[int, ...],
                                                      reduction: str, dtype: torch.dtype) -> None:
    """``[N, C, d...]`` logits: log_softmax over dimension 1 (the strided-axis kernel) and nll_loss2d, forward
    and backward, all anyaccel's; against float64."""
    z = torch.randn(*shape, dtype=torch.float64).mul(3).to(dtype).requires_grad_()
    t = torch.randint(0, shape[1], (shape[0], *shape[2:]))
    t.view(-1)[::4] = -100
    pol = CountingPolicy()
    with anyaccel.ops.use_ops(include=["softmax", "cross_entropy"], policy=pol):
        loss = F.cross_entropy(z, t, reduction=reduction)
        g = torch.randn(loss.shape, dtype=torch.float64).to(dtype)
        (dz,) = torch.autograd.grad(loss, z, g)
    assert {"_log_softmax", "nll_loss2d_forward", "nll_loss2d_backward", "_log_softmax_backward_data"} \
        <= set(pol.ours)
    zr = z.detach().double().requires_grad_()
    ref = F.cross_entropy(zr, t, reduction=reduction)
    (dref,) = torch.autograd.grad(ref, zr, g.double())
    assert loss.dtype == dtype and loss.shape == ref.shape
    assert_close(loss, ref, t.numel() if reduction != "none" else 1, msg="loss")
    assert_close(dz, dref, shape[1], msg="dlogits")


def test_float16_class_first_cross_entropy_is_finite_through_the_mode(interpreter_impls: None) -> None:
    """The nll_loss2d path of the inf case: [2000, 8, 10] logits of loss 10 per position."""
    z = torch.zeros(2000, 8, 10, dtype=torch.float16)
    z[:, 0] = 10.0
    t = torch.ones(2000, 10, dtype=torch.long)
    with anyaccel.ops.use_ops(include=["softmax", "cross_entropy"], policy="always"):
        loss = F.cross_entropy(z, t)
    assert torch.isfinite(loss)
    assert_close(loss, F.cross_entropy(z.double(), t), 20000)
