"""A failed ``step()`` changes nothing, on every path: a fresh plan, a cached plan with new gradient objects, and a
cached plan with the gradients of the last step (``zero_grad(set_to_none=False)``), for every CPU front end and
the fused front ends on CPU tensors (their default host kernels and the portable "pycpu" implementation).

Each fault is made after one successful step (so the plan of every group is cached), on one of two groups,
in ways that keep the tensor objects the plan knows (in-place metadata changes: ``resize_``, ``unsqueeze_``,
``t_``, ``.data = ...``; not ``.data = v`` with ``v`` a view at the same address, a documented limit of the
cached plan, see ``anyaccel.ops.optimizer.plans.unchanged``). The step must raise a ``ValueError`` naming the
faulty group and leave both groups' parameters, state and step counts as they were; then the fault is
repaired and a step must succeed again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from anyaccel.ops.adagrad.cpu import CPUAdagrad
from anyaccel.ops.adam.cpu import CPUAdam
from anyaccel.ops.adam.fused import FusedAdam
from anyaccel.ops.lamb.fused import CPULamb, FusedLamb
from anyaccel.ops.lion.cpu import CPULion
from anyaccel.ops.lion.fused import FusedLion

FRONT_ENDS: list[tuple[type, str | None]] = [(CPUAdam, None), (CPULion, None), (CPUAdagrad, None), (CPULamb, None),
                                             (FusedAdam, None), (FusedLion, None), (FusedLamb, None),
                                             (FusedAdam, "pycpu"), (FusedLion, "pycpu")]
SHAPE = (3, 5)


def _set_grad_data(p: torch.Tensor, value: torch.Tensor) -> None:
    assert p.grad is not None
    p.grad.data = value


def _resize_(t: torch.Tensor) -> None:
    t.resize_(4)


# (name, whether the fault is on a new gradient object, the fault on (optimizer, parameter), the repair)
Fault = tuple[str, bool, Callable[[Any, torch.Tensor], None]]
FAULTS: list[Fault] = [
    ("bf16 gradient of an fp32 parameter", True,
     lambda opt, p: _set_grad_data(p, torch.ones(SHAPE, dtype=torch.bfloat16))),
    ("kept gradient turned bf16", False, lambda opt, p: _set_grad_data(p, torch.ones(SHAPE, dtype=torch.bfloat16))),
    ("resized new gradient", True, lambda opt, p: _resize_(p.grad)),
    ("kept gradient resized in place", False, lambda opt, p: _resize_(p.grad)),
    ("kept gradient unsqueezed in place", False, lambda opt, p: p.grad.unsqueeze_(0)),
    ("kept gradient transposed in place (not contiguous)", False, lambda opt, p: p.grad.t_()),
    ("state tensor resized in place", False, lambda opt, p: _resize_(opt.state[p][opt._STATE_KEYS[-1]])),
    ("first state tensor made float64 through .data", False,
     lambda opt, p: setattr(opt.state[p][opt._STATE_KEYS[0]], "data", torch.zeros(SHAPE, dtype=torch.float64))),
    ("last state tensor made bf16 through .data", False,
     lambda opt, p: setattr(opt.state[p][opt._STATE_KEYS[-1]], "data", torch.zeros(SHAPE, dtype=torch.bfloat16))),
]


def _snapshot(opt: torch.optim.Optimizer, params: list[torch.Tensor]) -> list[Any]:
    out: list[Any] = []
    for p in params:
        out.append(p.detach().clone())
        st = opt.state[p]
        out.append({k: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in st.items()})
    return out


def _assert_same(before: list[Any], after: list[Any]) -> None:
    for a, b in zip(before, after, strict=True):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)
        else:
            assert a.keys() == b.keys()
            for k in a:
                assert a[k].shape == b[k].shape and torch.equal(a[k], b[k].reshape(a[k].shape)), k


@pytest.mark.parametrize("faulty", [0, 1])
@pytest.mark.parametrize("fault", FAULTS, ids=[f[0] for f in FAULTS])
@pytest.mark.parametrize("cls,impl", FRONT_ENDS, ids=[f"{c.__name__}-{i or 'default'}" for c, i in FRONT_ENDS])
def test_a_fault_after_a_cached_step_changes_nothing(cls: type, impl: str | None, fault: Fault, faulty: int,
                                                     request: pytest.FixtureRequest) -> None:
    """``faulty``: the group with the fault (0: the first launch of the step, which its kernel validates; 1: a
    launch after the first group's, which only the optimizer's own check can stop)."""
    if impl is not None:
        request.getfixturevalue("python_impls")
    name, new_grad, make_fault = fault
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(SHAPE, generator=gen)) for _ in range(2)]
    kwargs = {"impl": impl} if impl is not None else {}
    opt = cls([{"params": [params[0]]}, {"params": [params[1]], "lr": 2e-3}], lr=1e-3, **kwargs)
    for p in params:
        p.grad = torch.randn(SHAPE, generator=gen)
    opt.step()  # both groups' plans are cached now
    if new_grad:
        for p in params:
            p.grad = torch.randn(SHAPE, generator=gen)
    bad, good = params[faulty], params[1 - faulty]
    kept = bad.grad.detach().clone()
    kept_state = {k: v.detach().clone() for k, v in opt.state[bad].items()}
    before = _snapshot(opt, [good])
    make_fault(opt, bad)
    with pytest.raises(ValueError, match=rf"param_groups\[{faulty}\]"):
        opt.step()
    _assert_same(before, _snapshot(opt, [good]))
    assert float(opt.state[bad]["step"]) == 1.0 and float(opt.state[good]["step"]) == 1.0
    # repair the fault: the next step succeeds and advances both groups once
    bad.grad = None
    bad.grad = kept
    for k, v in kept_state.items():
        if k != "step":
            opt.state[bad][k] = v
    opt.step()
    assert float(opt.state[bad]["step"]) == 2.0 and float(opt.state[good]["step"]) == 2.0, name
    assert not torch.equal(before[0], good.detach())


@pytest.mark.parametrize("cls", [CPUAdam, CPULion, CPUAdagrad, CPULamb])
def test_a_parameter_resized_through_data_is_refused_before_any_update(cls: type) -> None:
    """``p.data = x`` with another shape (the parameter's storage moves): the plan is rebuilt and refuses it."""
    a, b = (torch.nn.Parameter(torch.randn(SHAPE)) for _ in range(2))
    opt = cls([{"params": [a]}, {"params": [b]}], lr=1e-3)
    for p in (a, b):
        p.grad = torch.randn(SHAPE)
    opt.step()
    before = _snapshot(opt, [a])
    b.data = torch.randn(4)
    with pytest.raises(ValueError, match=r"param_groups\[1\]"):
        opt.step()
    _assert_same(before, _snapshot(opt, [a]))


@pytest.mark.parametrize("cls", [CPUAdam, FusedAdam])
def test_a_kept_non_contiguous_gradient_is_read_afresh_every_step(cls: type) -> None:
    """A non-contiguous gradient is copied for the kernel; when the same gradient object comes back with new
    values (``zero_grad(set_to_none=False)`` and a backward), the copy must be made again, not reused."""
    gen = torch.Generator().manual_seed(3)
    start = torch.randn(6, 6, generator=gen)
    ours, ref = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    opt = cls([ours], lr=1e-2)
    torch_opt = torch.optim.AdamW([ref], lr=1e-2, weight_decay=0.0)
    opt.param_groups[0]["weight_decay"] = 0.0
    buffer = torch.zeros(6, 6)
    ours.grad = buffer.t()  # a non-contiguous gradient, kept across steps
    for _ in range(3):
        buffer.copy_(torch.randn(6, 6, generator=gen))
        ref.grad = ours.grad.contiguous()
        opt.step()
        torch_opt.step()
    assert torch.allclose(ours.detach(), ref.detach(), rtol=1e-5, atol=1e-6)
