"""A step interrupted by an exception (in a step pre-hook, in the closure, in a post-hook, or a fault found by
validation) leaves nothing half-done: no parameter, state or step count changed, the step lock released, the
hooks run once on the next step, and what the last successful step left (FusedLamb's trust ratios) kept.
"""

from __future__ import annotations

import threading

import pytest
import torch

from anyaccel.ops.adagrad.cpu import CPUAdagrad
from anyaccel.ops.adam.cpu import CPUAdam
from anyaccel.ops.adam.fused import FusedAdam
from anyaccel.ops.lamb.fused import CPULamb
from anyaccel.ops.lion.cpu import CPULion

CLASSES = [CPUAdam, FusedAdam, CPULion, CPULamb, CPUAdagrad]


class Boom(Exception):
    pass


def _setup(cls: type) -> tuple[torch.optim.Optimizer, list[torch.nn.Parameter]]:
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in (5, 33)]
    opt = cls([{"params": params[:1]}, {"params": params[1:]}], lr=1e-2)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    opt.step()
    return opt, params


def _state(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    out = [p.detach().clone() for p in params]
    for p in params:
        out.extend(v.detach().clone() for v in opt.state[p].values())
    return out


def _assert_unchanged(before: list[torch.Tensor], after: list[torch.Tensor]) -> None:
    assert len(before) == len(after)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def _lock_is_free(opt: torch.optim.Optimizer) -> bool:
    """Whether another thread can take the optimizer's step lock (a step that raised must have released it)."""
    free: list[bool] = []
    thread = threading.Thread(target=lambda: free.append(opt.state_dict() is not None), daemon=True)
    thread.start()
    thread.join(60)
    return free == [True]


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("where", ["pre-hook", "closure"])
def test_an_exception_before_the_update_changes_nothing(cls: type, where: str) -> None:
    opt, params = _setup(cls)
    before = _state(opt, params)
    calls = []

    def pre_hook(*_: object) -> None:
        calls.append(1)
        if where == "pre-hook" and len(calls) == 1:
            raise Boom

    def closure() -> float:
        raise Boom

    opt.register_step_pre_hook(pre_hook)
    with pytest.raises(Boom):
        opt.step(closure if where == "closure" else None)
    _assert_unchanged(before, _state(opt, params))
    assert _lock_is_free(opt)
    opt.step()  # the next step runs whole: hooks once, every count advanced once
    assert len(calls) == 2
    assert all(float(opt.state[p]["step"]) == 2 for p in params)


@pytest.mark.parametrize("cls", CLASSES)
def test_an_exception_in_a_post_hook_leaves_one_whole_step(cls: type) -> None:
    """The post-hooks run after the update (torch.optim's order): the step is complete, counted once."""
    opt, params = _setup(cls)
    handle = opt.register_step_post_hook(lambda *_: (_ for _ in ()).throw(Boom()))
    with pytest.raises(Boom):
        opt.step()
    assert all(float(opt.state[p]["step"]) == 2 for p in params)
    handle.remove()
    assert _lock_is_free(opt)
    opt.step()
    assert all(float(opt.state[p]["step"]) == 3 for p in params)


def test_a_refused_lamb_step_keeps_the_last_trust_ratios() -> None:
    opt, params = _setup(CPULamb)
    coeffs = opt.get_lamb_coeffs()
    assert len(coeffs) == 2
    params[1].grad.data = torch.ones(33, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"param_groups\[1\]"):
        opt.step()
    assert opt.get_lamb_coeffs() == coeffs


def test_a_sparse_gradient_with_broken_state_is_refused_before_the_dense_update() -> None:
    """CPUAdagrad steps dense gradients first, then sparse ones: a sparse one whose state no longer fits must be
    refused before the dense update."""
    dense = torch.nn.Parameter(torch.randn(6))
    emb = torch.nn.Parameter(torch.randn(10, 4))
    opt = CPUAdagrad([{"params": [dense]}, {"params": [emb]}], lr=1e-2)
    dense.grad = torch.randn(6)
    emb.grad = torch.sparse_coo_tensor(torch.tensor([[1, 3]]), torch.randn(2, 4), (10, 4), check_invariants=True)
    opt.step()
    opt.state[emb]["exp_avg_sq"].resize_(5, 4)
    before = _state(opt, [dense])
    with pytest.raises(ValueError, match=r"param_groups\[1\]\['params'\]\[0\]"):
        opt.step()
    _assert_unchanged(before, _state(opt, [dense]))


def test_a_sparse_step_advances_only_its_own_parameter_count() -> None:
    """A parameter stepped densely shares its bucket's step counter; when it later gets a sparse gradient, its
    sparse step must not advance the counter of the parameters it shared it with."""
    a = torch.nn.Parameter(torch.randn(10, 4))
    b = torch.nn.Parameter(torch.randn(10, 4))
    opt = CPUAdagrad([a, b], lr=1e-2)
    a.grad, b.grad = torch.randn(10, 4), torch.randn(10, 4)
    opt.step()  # one bucket: a and b share one step counter
    a.grad = None
    b.grad = torch.sparse_coo_tensor(torch.tensor([[2]]), torch.randn(1, 4), (10, 4), check_invariants=True)
    opt.step()
    assert float(opt.state[a]["step"]) == 1 and float(opt.state[b]["step"]) == 2
