"""Correctness of the cpu_adagrad kernel and of ``anyaccel.ops.CPUAdagrad``.

References: a float64 Adagrad step (Duchi et al. 2011, torch's order) that rounds to the storage dtypes where
the kernel does, and ``torch.optim.Adagrad`` itself (fp32, dense and sparse gradients), which the float64
reference is checked against.
"""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
import torch

from anyaccel.ops import CPUAdagrad

F32 = torch.finfo(torch.float32).eps
SIZES = [0, 1, 7, 15, 17, 33, 1000, 4099]
COMBOS = [  # (param, state, model copy)
    (torch.float32, torch.float32, None),
    (torch.bfloat16, torch.float32, None),
    (torch.float16, torch.float32, None),
    (torch.bfloat16, torch.bfloat16, None),
    (torch.float16, torch.float16, None),
    (torch.float32, torch.float32, torch.bfloat16),
    (torch.float32, torch.float32, torch.float16),
]


@pytest.fixture(scope="module")
def adagrad(_ops_cache_dir: str) -> Any:
    from anyaccel.op_builder.classes import builder_class

    return builder_class("adagrad", "cpu_adagrad")().load()


def reference_step(p: torch.Tensor, g: torch.Tensor, v: torch.Tensor, lr: float, eps: float, weight_decay: float
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """One Adagrad step in float64; returns the unrounded ``(p, v)``."""
    p, g, v = (t.to(torch.float64) for t in (p, g, v))
    if weight_decay:
        g = g + weight_decay * p
    v = v + g * g
    return p - lr * g / (v.sqrt() + eps), v


def test_reference_matches_torch_in_float64():
    gen = torch.Generator().manual_seed(0)
    p = torch.randn(100, dtype=torch.float64, generator=gen)
    ours = p.clone()
    v = torch.zeros_like(p)
    param = torch.nn.Parameter(p.clone())
    opt = torch.optim.Adagrad([param], lr=0.1, eps=1e-10, weight_decay=0.01)
    for _ in range(5):
        g = torch.randn(100, dtype=torch.float64, generator=gen)
        param.grad = g.clone()
        opt.step()
        ours, v = reference_step(ours, g, v, 0.1, 1e-10, 0.01)
    torch.testing.assert_close(ours, param.detach(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("param,state,copy_dtype", COMBOS)
@pytest.mark.parametrize("n", SIZES)
def test_kernel_matches_float64_reference(adagrad, n, param, state, copy_dtype):
    gen = torch.Generator().manual_seed(n)
    p = torch.randn(n, generator=gen).to(param)
    g = torch.randn(n, generator=gen).to(param if copy_dtype is None else param)
    v = (torch.rand(n, generator=gen) * 0.5).to(state)
    copies = [p.to(copy_dtype)] if copy_dtype is not None else []
    for wd in (0.0, 0.01):
        ref_p, ref_v = reference_step(p, g, v, 0.05, 1e-10, wd)
        adagrad.adagrad_step([p], [g], [v], copies, 0.05, 1e-10, wd)
        # one fp32 computation, one rounding on store: within 2 ulps of the storage dtype of the rounded reference
        for got, want in ((p, ref_p), (v, ref_v)):
            tol = 2 * torch.finfo(got.dtype).eps
            want = want.to(torch.float32).to(got.dtype).to(torch.float64)
            assert ((got.double() - want).abs() <= tol * want.abs() + 2 * F32 * 0.05).all()
        if copies:
            assert torch.equal(copies[0], p.to(copy_dtype))


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_cpu_adagrad_matches_torch_adagrad(weight_decay):
    gen = torch.Generator().manual_seed(1)
    shapes = [(37,), (4, 33), (1,), (1029,)]
    ours = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    opt = CPUAdagrad(ours, lr=0.05, weight_decay=weight_decay)
    ref_opt = torch.optim.Adagrad(ref, lr=0.05, eps=1e-10, weight_decay=weight_decay)
    for _ in range(10):
        for a, b in zip(ours, ref, strict=True):
            a.grad = torch.randn(a.shape, generator=gen)
            b.grad = a.grad.clone()
        opt.step()
        ref_opt.step()
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=8 * F32, atol=1e-6)
        torch.testing.assert_close(opt.state[a]["exp_avg_sq"], ref_opt.state[b]["sum"], rtol=8 * F32, atol=1e-6)
        assert opt.state[a]["step"] == 10


def _sparse_grad(rows: torch.Tensor, vocab: int, dim: int, gen: torch.Generator) -> torch.Tensor:
    values = torch.randn(rows.numel(), dim, generator=gen)
    return torch.sparse_coo_tensor(rows.unsqueeze(0), values, (vocab, dim), check_invariants=True)


@pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")  # inside torch.optim
def test_sparse_gradients_update_only_their_rows_like_torch():
    gen = torch.Generator().manual_seed(2)
    emb = torch.nn.Parameter(torch.randn(64, 16, generator=gen))
    ref = torch.nn.Parameter(emb.detach().clone())
    opt = CPUAdagrad([emb], lr=0.1)
    ref_opt = torch.optim.Adagrad([ref], lr=0.1, eps=1e-10)
    for _ in range(6):
        rows = torch.randint(0, 64, (10,), generator=gen)  # repeated rows are summed by coalesce
        emb.grad = _sparse_grad(rows, 64, 16, gen)
        ref.grad = emb.grad.clone()
        untouched = torch.ones(64, dtype=torch.bool)
        untouched[rows] = False
        before = emb.detach()[untouched].clone()
        opt.step()
        ref_opt.step()
        assert torch.equal(emb.detach()[untouched], before)
    torch.testing.assert_close(emb.detach(), ref.detach(), rtol=8 * F32, atol=1e-6)


def test_sparse_gradients_with_weight_decay_decay_only_their_rows():
    """DeepSpeed's DeepSpeedCPUAdagrad applies weight decay to the gradient's entries (torch refuses it)."""
    gen = torch.Generator().manual_seed(3)
    emb = torch.nn.Parameter(torch.randn(8, 4, generator=gen))
    start = emb.detach().clone()
    opt = CPUAdagrad([emb], lr=0.1, weight_decay=0.5)
    rows = torch.tensor([1, 5])
    emb.grad = _sparse_grad(rows, 8, 4, gen)
    opt.step()
    ref_p, ref_v = reference_step(start[rows], emb.grad.coalesce().values(), torch.zeros(2, 4), 0.1, 1e-10, 0.5)
    torch.testing.assert_close(emb.detach()[rows].double(), ref_p, rtol=4 * F32, atol=1e-7)
    torch.testing.assert_close(opt.state[emb]["exp_avg_sq"][rows].double(), ref_v, rtol=4 * F32, atol=1e-7)
    others = torch.tensor([0, 2, 3, 4, 6, 7])
    assert torch.equal(emb.detach()[others], start[others])


@pytest.mark.parametrize("fp32_states", [True, False])
def test_16_bit_parameters_keep_their_state_dtype(fp32_states):
    p = torch.nn.Parameter(torch.randn(100).to(torch.bfloat16))
    opt = CPUAdagrad([p], fp32_optimizer_states=fp32_states)
    p.grad = torch.randn(100).to(torch.bfloat16)
    opt.step()
    assert opt.state[p]["exp_avg_sq"].dtype == (torch.float32 if fp32_states else torch.bfloat16)


def test_state_dict_round_trip_continues_identically():
    gen = torch.Generator().manual_seed(4)
    p = torch.nn.Parameter(torch.randn(65, generator=gen).to(torch.bfloat16))
    opt = CPUAdagrad([p], lr=0.02)
    grads = [torch.randn(65, generator=gen).to(torch.bfloat16) for _ in range(4)]
    p.grad = grads[0]
    opt.step()
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    twin = torch.nn.Parameter(p.detach().clone())
    twin_opt = CPUAdagrad([twin], lr=0.02)
    buf.seek(0)
    twin_opt.load_state_dict(torch.load(buf))
    assert twin_opt.state[twin]["exp_avg_sq"].dtype == torch.float32
    for g in grads[1:]:
        p.grad, twin.grad = g, copy.deepcopy(g)
        opt.step()
        twin_opt.step()
    assert torch.equal(p.detach(), twin.detach())


@pytest.mark.parametrize("kwargs,error,words", [
    ({"lr": -1.0}, ValueError, "CPUAdagrad: lr=-1.0 is invalid"),
    ({"eps": 0.0}, ValueError, "CPUAdagrad: eps=0.0 is invalid"),
    ({"weight_decay": float("nan")}, ValueError, "CPUAdagrad: weight_decay=nan is invalid"),
    ({"lr": torch.tensor([1.0, 2.0])}, TypeError, "CPUAdagrad: lr is a torch.float32 tensor of shape"),
    ({"amsgrad": True}, NotImplementedError, "CPUAdagrad: amsgrad=True is not implemented"),
])
def test_bad_hyper_parameters_name_the_value(kwargs, error, words):
    with pytest.raises(error, match=words):
        CPUAdagrad([torch.nn.Parameter(torch.zeros(2))], **kwargs)


def test_a_step_that_raises_changes_nothing_sparse_gradients_included():
    dense = torch.nn.Parameter(torch.zeros(4))
    emb = torch.nn.Parameter(torch.zeros(4, 2))
    opt = CPUAdagrad([{"params": [dense]}, {"params": [emb]}])
    dense.grad = torch.ones(4)
    emb.grad = torch.sparse_coo_tensor(torch.tensor([[0]]), torch.ones(1, 2), (4, 2), check_invariants=True)
    opt.param_groups[1]["lr"] = -1.0
    with pytest.raises(ValueError, match=r"CPUAdagrad: param_groups\[1\]\['lr'\]=-1.0 is invalid"):
        opt.step()
    assert (dense == 0).all() and (emb == 0).all() and len(opt.state) == 0
    opt.param_groups[1]["lr"] = 0.1
    opt.step()
    assert (dense != 0).all() and (emb[0] != 0).all() and (emb[1:] == 0).all()


def test_deepspeed_defaults():
    opt = CPUAdagrad([torch.nn.Parameter(torch.zeros(2))])
    assert opt.defaults == {"lr": 1e-2, "eps": 1e-10, "weight_decay": 0.0, "amsgrad": False}
