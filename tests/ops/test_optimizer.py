"""The shared optimizer front end (anyaccel/ops/optimizer/), on CPU tensors for every family.

Each test states the guarantee it checks: validation before mutation (a failed step changes nothing),
aliasing refused, version counters bumped, inference tensors refused, hyper-parameters checked against the
spec ranges with the user's names, load_state_dict validated whole, cached plans noticing replaced state,
and the numerics against torch.optim (Adam/AdamW) or a float64 reference (Lion, LAMB).
"""

from __future__ import annotations

import copy
import io
import math
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch

from anyaccel.op_builder.core.loaded_ops import LOADED_OPS
from anyaccel.ops.adam.cpu import CPUAdam
from anyaccel.ops.adam.fused import FusedAdam
from anyaccel.ops.lamb.fused import CPULamb, FusedLamb
from anyaccel.ops.lion.cpu import CPULion
from anyaccel.ops.lion.fused import FusedLion

ALL = [CPUAdam, FusedAdam, CPULion, FusedLion, FusedLamb, CPULamb]


def _params(*sizes: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(n, generator=g).to(dtype)) for n in sizes]


def _grads(params: list[torch.Tensor], seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(p.dtype)


def _snapshot(opt: torch.optim.Optimizer, params: list[torch.Tensor]) -> tuple[Any, ...]:
    state = {i: {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in st.items()}
             for i, st in enumerate(opt.state[p] for p in params)}
    return [p.detach().clone() for p in params], state, copy.deepcopy(opt.param_groups)


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    pa, sa, ga = a
    pb, sb, gb = b
    if not all(torch.equal(x, y) for x, y in zip(pa, pb, strict=True)):
        return False
    if sa.keys() != sb.keys():
        return False
    for i in sa:
        if sa[i].keys() != sb[i].keys():
            return False
        for k in sa[i]:
            x, y = sa[i][k], sb[i][k]
            if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
                return False
            if isinstance(x, torch.Tensor) and not torch.equal(x, y):
                return False
    strip = [{k: v for k, v in g.items() if k != "params"} for g in ga]
    return strip == [{k: v for k, v in g.items() if k != "params"} for g in gb]


# ---- numerics -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [CPUAdam, FusedAdam])
@pytest.mark.parametrize("adamw", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adam_matches_torch(cls: type, adamw: bool, dtype: torch.dtype) -> None:
    """fp32 state of fp32/bf16 parameters: the update equals torch's Adam/AdamW computed in fp32."""
    sizes = (1, 7, 33, 1000)
    ps = _params(*sizes, dtype=dtype, seed=1)
    ref = [torch.nn.Parameter(p.detach().float().clone()) for p in ps]
    mode = {"adamw_mode": adamw} if cls is CPUAdam else {"adam_w_mode": adamw}
    opt = cls(ps, lr=1e-2, weight_decay=0.1, **mode)
    torch_cls = torch.optim.AdamW if adamw else torch.optim.Adam
    ref_opt = torch_cls(ref, lr=1e-2, weight_decay=0.1)
    for step in range(4):
        _grads(ps, step)
        for p, r in zip(ps, ref, strict=True):
            r.grad = p.grad.float()
        opt.step()
        ref_opt.step()
        for r, p in zip(ref, ps, strict=True):
            # bf16 parameters are the fp32 result rounded once; restart the reference from them
            rtol = 1e-6 if dtype == torch.float32 else 2**-8
            torch.testing.assert_close(p.detach().float(), r.detach(), rtol=rtol, atol=1e-6)
            r.data.copy_(p.detach().float())
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    for st in (opt.state[p] for p in ps):
        assert int(st["step"]) == 4
        assert st["exp_avg"].dtype == torch.float32
    for p, r in zip(ps, ref, strict=True):
        ref_state = ref_opt.state[r]
        torch.testing.assert_close(opt.state[p]["exp_avg"], ref_state["exp_avg"], rtol=tol, atol=tol)


def _lion_reference(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, lr: float, b1: float, b2: float,
                    wd: float) -> None:
    c = b1 * m + (1 - b1) * g
    p.mul_(1 - lr * wd).sub_(lr * torch.sign(c))
    m.mul_(b2).add_((1 - b2) * g)


@pytest.mark.parametrize("cls", [CPULion, FusedLion])
def test_lion_matches_float64_reference(cls: type) -> None:
    ps = _params(5, 64, 257, seed=2)
    ref = [p.detach().double().clone() for p in ps]
    moments = [torch.zeros_like(r) for r in ref]
    opt = cls(ps, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.01)
    for step in range(3):
        _grads(ps, 10 + step)
        opt.step()
        for r, m, p in zip(ref, moments, ps, strict=True):
            _lion_reference(r, p.grad.double(), m, 1e-3, 0.9, 0.99, 0.01)
    for p, r in zip(ps, ref, strict=True):
        torch.testing.assert_close(p.detach().double(), r, rtol=1e-6, atol=1e-6)


def _lamb_reference(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step: int, lr: float,
                    b1: float, b2: float, eps: float, wd: float, max_coeff: float, min_coeff: float) -> float:
    m.mul_(b1).add_((1 - b1) * g)
    v.mul_(b2).add_((1 - b2) * g * g)
    u = m / (v.sqrt() + eps) + wd * p
    pn, un = float(p.norm()), float(u.norm())
    coeff = 1.0 if pn == 0 or un == 0 else min(max(pn / un, min_coeff), max_coeff)
    step_size = lr * math.sqrt(1 - b2**step) / (1 - b1**step)
    p.sub_(step_size * coeff * u)
    return coeff


@pytest.mark.parametrize("cls", [CPULamb, FusedLamb])
def test_lamb_matches_float64_reference_and_reports_coefficients(cls: type) -> None:
    ps = _params(3, 100, 513, seed=3)
    ref = [p.detach().double().clone() for p in ps]
    ms = [torch.zeros_like(r) for r in ref]
    vs = [torch.zeros_like(r) for r in ref]
    opt = cls(ps, lr=1e-2, weight_decay=0.01, max_coeff=10.0, min_coeff=0.01)
    for step in range(1, 4):
        _grads(ps, 20 + step)
        opt.step()
        coeffs = [_lamb_reference(r, p.grad.double(), m, v, step, 1e-2, 0.9, 0.999, 1e-8, 0.01, 10.0, 0.01)
                  for r, p, m, v in zip(ref, ps, ms, vs, strict=True)]
    torch.testing.assert_close(torch.tensor(opt.get_lamb_coeffs(), dtype=torch.float64),
                               torch.tensor(coeffs, dtype=torch.float64), rtol=1e-5, atol=1e-6)
    for p, r in zip(ps, ref, strict=True):
        torch.testing.assert_close(p.detach().double(), r, rtol=1e-5, atol=1e-6)


def test_non_contiguous_gradient_is_used_as_its_contiguous_copy() -> None:
    """torch.optim accepts strided gradients; so do we (the kernel reads a contiguous copy)."""
    a, b = _params(12, 12, seed=4)
    b.data.copy_(a.data)
    grad = torch.randn(4, 3).t()  # 3x4 view, not contiguous
    a.data = a.data.view(3, 4)
    b.data = b.data.view(3, 4)
    a.grad = grad
    b.grad = grad.contiguous()
    CPUAdam([a], lr=0.1).step()
    CPUAdam([b], lr=0.1).step()
    assert torch.equal(a, b)


# ---- a failed step changes nothing ---------------------------------------------------------------------


@pytest.mark.parametrize("cls", ALL)
def test_failed_step_changes_nothing(cls: type) -> None:
    """Group 0 is valid; group 1's gradient is sparse: the step raises before touching group 0."""
    good, bad = _params(8, seed=5), _params(6, seed=6)
    opt = cls([{"params": good}, {"params": bad}], lr=1e-2)
    _grads(good, 1)
    _grads(bad, 1)
    opt.step()
    before = _snapshot(opt, good + bad)
    _grads(good, 2)
    bad[0].grad = torch.randn(6).to_sparse()
    with pytest.raises(ValueError, match=r"param_groups\[1\]\['params'\]\[0\] has layout torch.sparse_coo"):
        opt.step()
    assert _same(before, _snapshot(opt, good + bad))


@pytest.mark.parametrize("cls", [CPUAdam, FusedLion])
def test_failed_first_step_creates_no_state(cls: type) -> None:
    good, bad = _params(8, seed=7), _params(6, seed=8)
    opt = cls([{"params": good}, {"params": bad}])
    _grads(good + bad, 1)
    opt.param_groups[1]["lr"] = float("nan")
    with pytest.raises(ValueError, match=r"param_groups\[1\]\['lr'\]=nan is invalid"):
        opt.step()
    assert len(opt.state) == 0 or all(len(v) == 0 for v in opt.state.values())
    assert opt.state_dict()["state"] == {}


def test_parameter_changed_to_float64_after_construction_is_refused_without_changes() -> None:
    ps = _params(4, 4, seed=9)
    opt = CPUAdam(ps)
    _grads(ps, 1)
    opt.step()
    before = _snapshot(opt, ps)
    ps[1].data = ps[1].data.double()
    ps[1].grad = torch.randn(4, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['params'\]\[1\] has dtype torch.float64"):
        opt.step()
    ps[1].data = ps[1].data.float()
    ps[1].grad = None
    after = _snapshot(opt, ps)
    assert torch.equal(before[0][0], after[0][0])
    assert int(opt.state[ps[0]]["step"]) == 1


# ---- aliasing, autograd, inference ----------------------------------------------------------------------


@pytest.mark.parametrize("cls", ALL)
def test_same_parameter_twice_is_refused(cls: type) -> None:
    (p,) = _params(8)
    with pytest.raises(ValueError, match="lists a parameter more than once"):
        cls([p, p])


@pytest.mark.parametrize("cls", [CPUAdam, CPULion, FusedLamb])
def test_overlapping_views_and_gradient_aliasing_are_refused(cls: type) -> None:
    base = torch.zeros(20)
    a = torch.nn.Parameter(base[:12])
    b = torch.nn.Parameter(base[8:])
    opt = cls([a, b])
    a.grad, b.grad = torch.randn(12), torch.randn(12)
    with pytest.raises(ValueError, match="share memory"):
        opt.step()
    assert torch.equal(base, torch.zeros(20))
    (p,) = _params(5)
    p.grad = p.detach()
    with pytest.raises(ValueError, match=r"the gradient of param_groups\[0\]\['params'\]\[0\].*share memory|"
                                         r"param_groups\[0\]\['params'\]\[0\] and the gradient"):
        cls([p]).step()


def test_gradients_may_share_memory_with_each_other() -> None:
    """Gradients are only read: one tensor as the gradient of two parameters is fine (torch allows it)."""
    a, b = _params(6, 6, seed=11)
    shared = torch.randn(6)
    a.grad, b.grad = shared, shared
    CPUAdam([a, b]).step()


@pytest.mark.parametrize("cls", ALL)
def test_step_bumps_version_so_stale_backward_raises(cls: type) -> None:
    (w,) = _params(4, seed=12)
    x = torch.randn(4)
    loss = (w * w * x).sum()
    opt = cls([w])
    w.grad = torch.randn(4)
    version = w._version
    opt.step()
    assert w._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("cls", [CPUAdam, FusedAdam])
def test_inference_tensors_are_refused(cls: type) -> None:
    with torch.inference_mode():
        p = torch.randn(4)
    with pytest.raises(ValueError, match="inference tensor"):
        cls([p])


def test_wrong_device_kind_names_the_alternative() -> None:
    p = torch.nn.Parameter(torch.randn(4, device="meta"))
    with pytest.raises(ValueError, match=r"params'\]\[0\] is on meta; CPUAdam updates CPU tensors only.*FusedAdam"):
        CPUAdam([p])


# ---- hyper-parameters --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "error", "pattern"), [
    ({"lr": 1e39}, ValueError, r"CPUAdam: lr=1e\+39 is invalid; accepted: a finite lr >= 0 representable in float32"),
    ({"weight_decay": 1e39}, ValueError, r"weight_decay=1e\+39 is invalid"),
    ({"lr": -1.0}, ValueError, r"lr=-1.0 is invalid"),
    ({"betas": (1.0, 0.999)}, ValueError, r"betas\[0\]=1.0 is invalid; accepted: a finite 0 <= betas\[0\] < 1"),
    ({"betas": (0.9,)}, TypeError, r"betas=\(0.9,\) is invalid; accepted: a pair"),
    ({"eps": 0.0}, ValueError, r"eps=0.0 is invalid; accepted: a finite eps > 0"),
    ({"lr": "0.1"}, TypeError, r"lr='0.1' is invalid; accepted: a Python float"),
    ({"betas": (torch.tensor(0.9), 0.99)}, TypeError, r"betas\[0\]=tensor\(0.9000\) is invalid"),
    ({"bias_correction": "yes"}, TypeError, r"bias_correction='yes' is invalid; accepted: True or False"),
    ({"amsgrad": True}, NotImplementedError, r"amsgrad=True is not implemented"),
])
def test_constructor_messages_name_the_argument(kwargs: dict[str, Any], error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        CPUAdam(_params(3), **kwargs)


def test_step_messages_name_the_group_entry() -> None:
    ps = _params(3)
    opt = FusedAdam(ps)
    _grads(ps, 0)
    opt.param_groups[0]["betas"] = (0.9, 1.5)
    with pytest.raises(ValueError, match=r"FusedAdam: param_groups\[0\]\['betas'\]\[1\]=1.5 is invalid"):
        opt.step()
    opt.param_groups[0]["betas"] = (0.9, 0.999)
    opt.step()


def test_lamb_coefficient_clamp_must_be_ordered() -> None:
    with pytest.raises(ValueError, match=r"min_coeff=5.0 is greater than max_coeff=1.0"):
        FusedLamb(_params(3), min_coeff=5.0, max_coeff=1.0)


def test_tensor_learning_rate_is_read() -> None:
    a, b = _params(5, 5, seed=13)
    b.data.copy_(a.data)
    _grads([a, b], 1)
    b.grad = a.grad.clone()
    CPUAdam([a], lr=torch.tensor(0.05)).step()
    CPUAdam([b], lr=0.05).step()
    assert torch.equal(a, b)


# ---- cached plans --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kept_grads", [False, True], ids=["new_grads", "kept_grads"])
def test_replaced_state_entry_is_used_by_the_next_step(kept_grads: bool) -> None:
    """Assigning a state entry invalidates the cached plan (DeepSpeed assigns exp_avg when it loads), also when
    the gradient objects are kept across steps (the steady path)."""
    a, b = _params(6, 6, seed=14)
    b.data.copy_(a.data)
    opt_a, opt_b = CPUAdam([a]), CPUAdam([b])
    for opt, p in ((opt_a, a), (opt_b, b)):
        p.grad = torch.ones(6)
        opt.step()
    opt_a.state[a]["exp_avg"] = torch.full((6,), 0.5)
    opt_b.state[b]["exp_avg"].fill_(0.5)
    for opt, p in ((opt_a, a), (opt_b, b)):
        if not kept_grads:
            p.grad = torch.ones(6)
        opt.step()
    assert torch.equal(a, b)
    assert torch.equal(opt_a.state[a]["exp_avg"], opt_b.state[b]["exp_avg"])


def test_parameter_storage_swap_is_noticed() -> None:
    """``p.data = ...`` (as module.to() does) moves the storage: the next step updates the new one."""
    (p,) = _params(6, seed=15)
    opt = CPULion([p], lr=0.1)
    p.grad = torch.ones(6)
    opt.step()
    p.data = torch.zeros(6)
    p.grad = torch.ones(6)
    opt.step()
    assert torch.all(p.detach() != 0)


def test_kept_gradient_objects_follow_torch_adamw() -> None:
    """Gradients kept across steps (``zero_grad(set_to_none=False)``, filled in place) take the steady path,
    which skips re-reading them; each step must still use their new values, as torch's AdamW does."""
    ps = _params(5, 3, 7, seed=40)
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    opt, torch_opt = FusedAdam(ps, lr=1e-2, weight_decay=0.1), torch.optim.AdamW(ref, lr=1e-2, weight_decay=0.1)
    for p, r in zip(ps, ref, strict=True):
        p.grad, r.grad = torch.zeros_like(p), torch.zeros_like(r)
    for s in range(4):
        gen = torch.Generator().manual_seed(s)
        for p, r in zip(ps, ref, strict=True):
            values = torch.randn(p.shape, generator=gen)
            p.grad.copy_(values)
            r.grad.copy_(values)
        opt.step()
        torch_opt.step()
    for p, r in zip(ps, ref, strict=True):
        torch.testing.assert_close(p.detach(), r.detach(), rtol=1e-6, atol=1e-6)


def test_kept_gradients_with_a_storage_swap_update_the_new_storage() -> None:
    """With the same gradient objects, ``p.data = x`` between steps is still noticed (the steady path checks
    storage)."""
    (p,) = _params(6, seed=41)
    opt = CPULion([p], lr=0.1)
    p.grad = torch.ones(6)
    opt.step()
    p.data = torch.zeros(6)
    opt.step()
    assert torch.all(p.detach() != 0)


def test_kept_gradients_with_a_parameter_replaced_in_the_list() -> None:
    """A parameter replaced in ``param_groups[0]['params']`` in place, its gradient object reused: the new
    parameter is the one updated, and the old one is left alone."""
    a, b = _params(4, 4, seed=42)
    opt = CPUAdam([a], lr=0.1)
    a.grad = torch.ones(4)
    opt.step()
    before = a.detach().clone()
    b.grad = a.grad
    a.grad = None
    opt.param_groups[0]["params"][0] = b
    b_before = b.detach().clone()
    opt.step()
    assert torch.equal(a.detach(), before)
    assert not torch.equal(b.detach(), b_before)


def test_parameters_without_gradient_keep_their_step_count() -> None:
    a, b = _params(3, 3, seed=16)
    opt = CPUAdam([a, b])
    _grads([a, b], 1)
    opt.step()
    b.grad = None
    opt.step()
    opt.step()
    _grads([a, b], 2)
    opt.step()
    assert (int(opt.state[a]["step"]), int(opt.state[b]["step"])) == (4, 2)


# ---- checkpoints -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", ALL)
def test_state_dict_round_trip_continues_identically(cls: type) -> None:
    ps = _params(4, 9, dtype=torch.bfloat16, seed=17)
    twin = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    opt = cls(ps, lr=1e-2)
    for s in range(2):
        _grads(ps, s)
        opt.step()
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    for t, p in zip(twin, ps, strict=True):
        t.data.copy_(p.data)
    loaded = cls(twin, lr=1e-2)
    loaded.load_state_dict(torch.load(buffer, weights_only=True))
    assert loaded.state[twin[0]]["exp_avg"].dtype == torch.float32  # fp32 state of bf16 params kept
    _grads(ps, 5)
    _grads(twin, 5)
    opt.step()
    loaded.step()
    for a, b in zip(ps, twin, strict=True):
        assert torch.equal(a, b)


def test_torch_adam_checkpoint_keeps_coupled_decay() -> None:
    ps = _params(4, seed=18)
    torch_opt = torch.optim.Adam(ps, weight_decay=0.1)
    _grads(ps, 1)
    torch_opt.step()
    opt = CPUAdam(ps, adamw_mode=True)
    opt.load_state_dict(torch_opt.state_dict())
    assert opt.param_groups[0]["adamw_mode"] is False
    fused = FusedAdam(ps)
    fused.load_state_dict(torch.optim.AdamW(ps).state_dict())
    assert fused.param_groups[0]["adam_w_mode"] is True


def _bad_state_dicts() -> list[tuple[str, Callable[[dict[str, Any]], None], type[Exception], str]]:
    def set_state(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
        return lambda sd: sd["state"][0].__setitem__(key, value)

    return [
        ("maximize", lambda sd: sd["param_groups"][0].__setitem__("maximize", True), ValueError, "maximize=True"),
        ("amsgrad", lambda sd: sd["param_groups"][0].__setitem__("amsgrad", True), ValueError, "amsgrad=True"),
        ("missing key", lambda sd: sd["state"][0].pop("exp_avg_sq"), ValueError, r"lacks \['exp_avg_sq'\]"),
        ("list for tensor", set_state("exp_avg", [0.0] * 4), TypeError, "'exp_avg' is a list"),
        ("complex", set_state("exp_avg", torch.zeros(4, dtype=torch.complex64)), ValueError, "complex64"),
        ("shape", set_state("exp_avg", torch.zeros(5)), ValueError, r"has shape \[5\], the parameter \[4\]"),
        ("unknown key", set_state("max_exp_avg_sq", torch.zeros(4)), ValueError, "max_exp_avg_sq"),
        ("bad step", set_state("step", -1), ValueError, "'step'=-1 is invalid"),
        ("bad lr", lambda sd: sd["param_groups"][0].__setitem__("lr", float("inf")), ValueError,
         r"param_groups\[0\]\['lr'\]=inf"),
        ("group count", lambda sd: sd["param_groups"].append(dict(sd["param_groups"][0])), ValueError,
         "2 parameter groups"),
        ("not a dict", lambda sd: sd.pop("state"), TypeError, "expected a dict with 'state'"),
    ]


@pytest.mark.parametrize(("case", "edit", "error", "pattern"), _bad_state_dicts(),
                         ids=[c[0] for c in _bad_state_dicts()])
def test_bad_state_dict_is_refused_and_changes_nothing(case: str, edit: Callable[[dict[str, Any]], None],
                                                      error: type[Exception], pattern: str) -> None:
    ps = _params(4, 6, seed=19)
    opt = CPUAdam(ps)
    _grads(ps, 1)
    opt.step()
    sd = copy.deepcopy(opt.state_dict())
    edit(sd)
    before = _snapshot(opt, ps)
    with pytest.raises(error, match=pattern):
        opt.load_state_dict(sd)
    assert _same(before, _snapshot(opt, ps))
    _grads(ps, 2)
    opt.step()  # still usable


def test_master_weights_state_round_trip_and_refusal() -> None:
    ps = _params(8, dtype=torch.bfloat16, seed=20)
    opt = FusedAdam(ps, master_weights=True)
    _grads(ps, 1)
    opt.step()
    sd = opt.state_dict()
    assert sd["state"][0]["master"].dtype == torch.float32
    with pytest.raises(ValueError, match="'master' needs master_weights=True"):
        FusedAdam(ps).load_state_dict(sd)
    again = FusedAdam(ps, master_weights=True)
    again.load_state_dict(sd)
    assert torch.equal(again.state[ps[0]]["master"], opt.state[ps[0]]["master"])


@pytest.mark.parametrize("cls", [CPUAdam, FusedLamb])
def test_pickle_and_deepcopy_keep_options_and_state(cls: type) -> None:
    ps = _params(5, seed=21)
    opt = cls(ps, lr=0.02)
    _grads(ps, 1)
    opt.step()
    clone = pickle.loads(pickle.dumps(opt))
    assert clone.param_groups[0]["lr"] == 0.02
    assert clone.fp32_optimizer_states is True
    assert torch.equal(next(iter(clone.state.values()))["exp_avg"], opt.state[ps[0]]["exp_avg"])
    deep = copy.deepcopy(opt)
    assert int(next(iter(deep.state.values()))["step"]) == 1


def test_capturable_needs_an_implementation_with_device_scalars() -> None:
    """On the CPU no implementation has planned capturable steps: a clear error, before any change."""
    ps = _params(4)
    opt = FusedAdam(ps, capturable=True)
    _grads(ps, 1)
    with pytest.raises(RuntimeError, match=r"capturable=True\) needs an implementation with adam_step_planned_capt"):
        opt.step()
    assert not any(len(v) for v in opt.state.values())


# ---- implementation choice ---------------------------------------------------------------------------------


def test_each_optimizer_class_names_its_own_family_and_state() -> None:
    assert (CPUAdam._FAMILY, CPULion._FAMILY, FusedLamb._FAMILY) == ("adam", "lion", "lamb")
    assert CPUAdam._STATE_KEYS == ("exp_avg", "exp_avg_sq") and CPULion._STATE_KEYS == ("exp_avg",)

    class MyAdam(CPUAdam):  # a user subclass that does not set _FAMILY shares its parent's op
        pass

    assert MyAdam._FAMILY == "adam" and MyAdam._NAME == "CPUAdam"


@pytest.mark.parametrize(("cls", "variable"), [(CPUAdam, "ANYACCEL_IMPL_ADAM"), (CPULion, "ANYACCEL_IMPL_LION"),
                                               (FusedAdam, "ANYACCEL_IMPL_ADAM")])
def test_forcing_the_accelerator_implementation_leaves_cpu_tensors_alone(cls: type, variable: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """ANYACCEL_IMPL_ADAM=triton chooses FusedAdam's GPU kernel; it does not apply to the CPU device type."""
    LOADED_OPS.clear()
    monkeypatch.setenv(variable, "triton")
    (p,) = _params(9)
    p.grad = torch.randn(9)
    before = p.detach().clone()
    cls([p], lr=1e-2).step()
    assert not torch.equal(p.detach(), before)


def test_an_explicit_implementation_for_the_wrong_device_type_is_an_error() -> None:
    from anyaccel.ops import dispatch

    (p,) = _params(4)
    p.grad = torch.randn(4)
    with pytest.raises(dispatch.NoImplementationError, match="'triton' of op 'adam' is unavailable on cpu"):
        FusedAdam([p], impl="triton").step()
    assert len(FusedAdam([p]).state) == 0
