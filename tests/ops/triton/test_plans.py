"""Plans of the Triton multi-tensor optimizers (``<family>_plan`` / ``<family>_step_planned`` in
anyaccel/ops/{adam,lion,lamb}/triton.py, machinery in anyaccel/ops/triton/multi_tensor.py), on the CPU through
Triton's interpreter (``TRITON_INTERPRET=1``; it reads CPU tensors' memory directly, so the pointer tables work
as on a GPU).

A planned step must equal the unplanned one bit for bit (same kernels, same arguments), validate nothing per
step, refuse stale or foreign plans, and be what the optimizer front ends (``ListOptimizer``) use when the
implementation offers it.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import re
import weakref
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch

HAS_TRITON = importlib.util.find_spec("triton") is not None
if HAS_TRITON and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytestmark = pytest.mark.skipif(not (HAS_TRITON and os.environ.get("TRITON_INTERPRET") == "1"
                                     and not torch.cuda.is_available()),
                                reason="needs triton and TRITON_INTERPRET=1 on a machine without a GPU")

#: Odd sizes, an empty tensor (not in the plan, but in the lists), one spanning two programs (BLOCK 4096).
SIZES = [37, 1, 0, 4099, 8]
ADAM_ARGS = (3, 1e-3, 0.9, 0.999, 1e-8, 0.01, True, True)
LION_ARGS = (1e-2, 0.9, 0.99, 0.1)
LAMB_ARGS = (3, 1e-2, 0.9, 0.999, 1e-6, 0.01, 2.0, 10.0, 0.01, True, False)


def _module(family: str) -> Any:
    return importlib.import_module(f"anyaccel.ops.{family}.triton")


def _lists(family: str, dtype: torch.dtype = torch.float32, copies: bool = False, seed: int = 0
           ) -> list[list[torch.Tensor]]:
    """params, grads, states..., model copies for ``family`` (fp32 masters when ``copies``)."""
    gen = torch.Generator().manual_seed(seed)
    pdt = torch.float32 if copies else dtype
    ps = [torch.randn(n, generator=gen).to(pdt) for n in SIZES]
    gs = [torch.randn(n, generator=gen).to(dtype if copies else pdt) for n in SIZES]
    states = [[(torch.randn(n, generator=gen) * 0.1).to(pdt) for n in SIZES]]
    if family != "lion":
        states.append([(torch.rand(n, generator=gen) * 0.1).to(pdt) for n in SIZES])
    cs = [p.to(dtype) for p in ps] if copies else []
    return [ps, gs, *states, cs]


def _clone(lists: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
    return [[t.clone() for t in lst] for lst in lists]


def _step(family: str, lists: list[list[torch.Tensor]], coeffs: torch.Tensor | None = None) -> None:
    mod = _module(family)
    if family == "adam":
        mod.adam_step(*lists, *ADAM_ARGS)
    elif family == "lion":
        mod.lion_step(*lists, *LION_ARGS)
    else:
        mod.lamb_step(*lists, coeffs, *LAMB_ARGS)


def _planned(family: str, plan: torch.Tensor, coeffs: torch.Tensor | None = None, header: Any = None) -> None:
    mod = _module(family)
    h = plan[:4].tolist() if header is None else header
    args = {"adam": ADAM_ARGS, "lion": LION_ARGS, "lamb": LAMB_ARGS}[family]
    pre = (coeffs,) if family == "lamb" else ()
    getattr(mod, f"{family}_step_planned")(plan, h[1], h[2], h[3], *pre, *args)


@pytest.mark.parametrize(("family", "dtype", "copies"), [
    ("adam", torch.float32, False), ("adam", torch.bfloat16, False), ("adam", torch.bfloat16, True),
    ("lion", torch.float32, False), ("lion", torch.float16, True),
    ("lamb", torch.float32, False), ("lamb", torch.bfloat16, True),
], ids=str)
def test_a_planned_step_equals_the_unplanned_one_bit_for_bit(family: str, dtype: torch.dtype, copies: bool) -> None:
    want = _lists(family, dtype, copies)
    got = _clone(want)
    want_c = torch.full((len(SIZES),), -5.0) if family == "lamb" else None
    got_c = torch.full((len(SIZES),), -5.0) if family == "lamb" else None
    plan = getattr(_module(family), f"{family}_plan")(*got)
    for _ in range(2):
        _step(family, want, want_c)
        _planned(family, plan, got_c)
    for w_list, g_list in zip(want, got, strict=True):
        for w, g in zip(w_list, g_list, strict=True):
            assert torch.equal(w, g)
    if family == "lamb":
        assert want_c is not None and got_c is not None
        assert torch.equal(want_c, got_c) and got_c[2] == 1.0  # the empty tensor keeps coefficient 1
        assert not torch.equal(got_c, torch.ones_like(got_c))


@pytest.mark.parametrize("family", ["adam", "lion", "lamb"])
def test_the_plan_header_and_size_are_the_cuda_plans_and_its_fakes(family: str) -> None:
    from anyaccel.ops.plan_fakes import plan_size
    from anyaccel.ops.triton.multi_tensor import PLAN_MAGIC
    from anyaccel.spec import op_spec as family_spec

    mod = _module(family)
    lists = _lists(family, torch.bfloat16, copies=True)
    plan = getattr(mod, f"{family}_plan")(*lists)
    spec = family_spec(family)
    combo = [c.as_tuple() for c in spec.dtypes].index(("float32", "bfloat16", "float32", "bfloat16"))
    chunks = sum(-(-n // mod.BLOCK) for n in SIZES)
    assert plan.dtype == torch.int64 and plan.is_contiguous()
    assert plan[:4].tolist() == [PLAN_MAGIC, combo, len(SIZES) - 1, chunks]
    fake = spec.function(f"{family}_plan").load_fake()
    assert fake("cpu", *lists).shape == plan.shape == (plan_size(len(SIZES) - 1),)
    # rows (deltas, numel), the tensors' places in the lists, their chunk counts and first chunks
    count = len(SIZES) - 1
    body = plan[4:].tolist()
    assert body[5:6 * count:6] == [n for n in SIZES if n]
    assert body[6 * count:7 * count] == [0, 1, 3, 4]
    assert body[7 * count:8 * count] == [1, 1, 2, 1] and body[8 * count:] == [0, 1, 2, 4]


def _message(fn: Callable[[], Any]) -> str:
    with pytest.raises(RuntimeError) as info:
        fn()
    return str(info.value)


@pytest.mark.parametrize("family", ["adam", "lion", "lamb"])
def test_the_plan_validates_as_the_step_does(family: str) -> None:
    mod = _module(family)
    make = getattr(mod, f"{family}_plan")
    coeffs = torch.empty(len(SIZES))
    lists = _lists(family)
    lists[1][3] = torch.randn(5)  # a gradient of the wrong shape
    step_msg = _message(lambda: _step(family, lists, coeffs))
    assert step_msg.startswith(f"{family}_step: grads[3] has shape [5]")
    assert _message(lambda: make(*lists)) == step_msg.replace(f"{family}_step", f"{family}_plan")
    empty = [[] for _ in lists]
    assert _message(lambda: make(*empty)) == f"{family}_plan: params is empty; pass at least one tensor"
    # more than one dtype combination: the plan fake's words
    mixed = _lists(family)
    mixed[0][0], mixed[1][0] = mixed[0][0].to(torch.bfloat16), mixed[1][0].to(torch.bfloat16)
    fake = getattr(importlib.import_module(f"anyaccel.ops.{family}.spec"), f"{family}_plan_fake")
    want = _message(lambda: fake("cpu", *mixed))
    assert "one dtype combination" in want and _message(lambda: make(*mixed)) == want


@pytest.mark.parametrize("family", ["adam", "lion", "lamb"])
def test_stale_or_foreign_plans_raise_instead_of_launching(family: str) -> None:
    from anyaccel.ops.triton import multi_tensor

    mod = _module(family)
    lists = _lists(family)
    coeffs = torch.empty(len(SIZES))
    plan = getattr(mod, f"{family}_plan")(*lists)
    header = plan[:4].tolist()
    before = _clone(lists)
    not_live = re.escape(f"{family}_step_planned: plan is not a live plan of the Triton {family} implementation")
    # a copy of the plan, and a plan of another family
    with pytest.raises(RuntimeError, match=not_live):
        _planned(family, plan.clone(), coeffs, header)
    other = "lion" if family != "lion" else "adam"
    other_plan = getattr(_module(other), f"{other}_plan")(*_lists(other))
    with pytest.raises(RuntimeError, match=not_live):
        _planned(family, other_plan, coeffs, header)
    # header words that are not the plan's
    with pytest.raises(RuntimeError, match=r"plan, combo, count and chunks must be those of one plan"):
        _planned(family, plan, coeffs, [header[0], header[1], header[2], header[3] + 1])
    # a list's first tensor whose storage was replaced after planning
    lists[2][0].data = torch.zeros(SIZES[0])
    with pytest.raises(RuntimeError, match=r"a tensor of the plan moved since"):
        _planned(family, plan, coeffs)
    for w_list, g_list in zip(before, lists, strict=True):  # nothing was launched
        for w, g in zip(w_list[1:], g_list[1:], strict=True):
            assert torch.equal(w, g)
    # a freed plan: its record goes with it (and the tensors it held)
    key = multi_tensor._plan_key(plan)
    base = weakref.ref(lists[0][0])
    assert key in multi_tensor._plans
    words = plan.clone()
    del plan, lists
    gc.collect()
    assert key not in multi_tensor._plans and base() is None
    with pytest.raises(RuntimeError, match=not_live):
        _planned(family, words, coeffs, header)


def test_the_plan_holds_its_tensors_memory_so_a_launch_never_touches_freed_memory() -> None:
    """The caller drops every list but the params and re-points a parameter's storage: the plan's record
    still holds all the storages, so the planned step writes memory that is still allocated."""
    from anyaccel.ops.adam.triton import adam_plan

    lists = _lists("adam")
    plan = adam_plan(*lists)
    grads = weakref.ref(lists[1][3])
    params = lists[0]
    old = params[3].untyped_storage()
    del lists
    gc.collect()
    assert grads() is None  # the tensor object is gone, its storage is not
    params[3].data = torch.zeros(SIZES[3])  # not a list's first tensor: not detected, its old storage updated
    before = old.tolist()
    _planned("adam", plan)
    assert old.tolist() != before and torch.equal(params[3], torch.zeros(SIZES[3]))


def test_lamb_planned_checks_lamb_coeffs() -> None:
    from anyaccel.ops.lamb.triton import lamb_plan

    plan = lamb_plan(*_lists("lamb"))
    with pytest.raises(RuntimeError, match=r"lamb_step_planned: lamb_coeffs must be a contiguous float32 tensor on "
                                           r"cpu with one entry per tensor of the plan's lists \(5\); got float32 "
                                           r"with 4 elements"):
        _planned("lamb", plan, torch.empty(4))
    with pytest.raises(RuntimeError, match=r"lamb_step: min_coeff=2.0 is larger than max_coeff=1.0"):
        h = plan[:4].tolist()
        _module("lamb").lamb_step_planned(plan, h[1], h[2], h[3], torch.empty(5), 1, 1e-3, 0.9, 0.999, 1e-6, 0.0,
                                          1.0, 1.0, 2.0, True, False)


def test_a_planned_step_checks_the_scalar_ranges() -> None:
    from anyaccel.ops.adam.triton import adam_plan, adam_step_planned

    plan = adam_plan(*_lists("adam"))
    h = plan[:4].tolist()
    with pytest.raises(RuntimeError, match=r"^adam_step_planned: step=0 is invalid"):
        adam_step_planned(plan, h[1], h[2], h[3], 0, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)


@pytest.mark.parametrize("family", ["adam", "lion", "lamb"])
def test_load_registers_the_plan_functions(family: str) -> None:
    ns = _module(family).load()
    assert all(hasattr(ns, f"{family}_{s}") for s in ("step", "plan", "step_planned"))
    assert not hasattr(ns, f"{family}_step_planned_capturable")


# ---- the optimizer front ends --------------------------------------------------------------------------


def _counting(family: str, planned: bool, calls: dict[str, int]) -> SimpleNamespace:
    """The Triton module's functions as an implementation namespace, counting calls (without the plan functions
    when not ``planned``)."""
    mod = _module(family)
    names = ["step", "plan", "step_planned"] if planned else ["step"]

    def counted(name: str) -> Callable[..., Any]:
        fn = getattr(mod, f"{family}_{name}")

        def call(*args: Any) -> Any:
            calls[name] = calls.get(name, 0) + 1
            return fn(*args)

        return call

    return SimpleNamespace(impl_name="triton", **{f"{family}_{n}": counted(n) for n in names})


@pytest.mark.parametrize("family", ["adam", "lion", "lamb"])
def test_the_fused_optimizers_take_the_planned_path_with_the_same_results(
        family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from anyaccel.ops import dispatch
    from anyaccel.ops.adam.fused import FusedAdam
    from anyaccel.ops.lamb.fused import FusedLamb
    from anyaccel.ops.lion.fused import FusedLion

    cls = {"adam": FusedAdam, "lion": FusedLion, "lamb": FusedLamb}[family]
    results = []
    for planned in (False, True):
        calls: dict[str, int] = {}
        ns = _counting(family, planned, calls)
        monkeypatch.setattr(dispatch, "load", lambda op, device_type, name=None, ns=ns: ns)
        gen = torch.Generator().manual_seed(1)
        ps = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in (37, 1, 4099, 8)]
        opt = cls(ps, lr=1e-2, weight_decay=0.01)
        for _ in range(3):
            for p in ps:
                p.grad = torch.randn(p.shape, generator=gen)  # new gradients: the plan follows their storage
            opt.step()
        if planned:
            assert calls.get("step", 0) == 0 and calls["step_planned"] == 3 and 1 <= calls["plan"] <= 3
        else:
            assert calls == {"step": 3}
        state = [opt.state[p][k].clone() for p in ps for k in opt._STATE_KEYS]
        coeffs = list(opt.get_lamb_coeffs()) if family == "lamb" else []
        results.append(([p.detach().clone() for p in ps], state, coeffs))
    (p0, s0, c0), (p1, s1, c1) = results
    assert all(torch.equal(a, b) for a, b in zip(p0 + s0, p1 + s1, strict=True)) and c0 == c1


def test_the_optimizer_keeps_its_plan_while_the_tensors_stay() -> None:
    """Gradients kept in place (zero_grad(set_to_none=False)): one plan, then planned steps only."""
    from anyaccel.ops import dispatch
    from anyaccel.ops.adam.fused import FusedAdam

    calls: dict[str, int] = {}
    ns = _counting("adam", True, calls)
    mp = pytest.MonkeyPatch()
    mp.setattr(dispatch, "load", lambda op, device_type, name=None: ns)
    try:
        ps = [torch.nn.Parameter(torch.randn(n)) for n in (37, 8, 100)]
        opt = FusedAdam(ps, lr=1e-3)
        for p in ps:
            p.grad = torch.randn(p.shape)
        for _ in range(4):
            for p in ps:
                assert p.grad is not None
                p.grad.copy_(torch.randn(p.shape))
            opt.step()
        assert calls == {"plan": 1, "step_planned": 4}
    finally:
        mp.undo()
