"""The bucketing of parameters into fused launches and its per-step cache (CPU tensors; no kernel runs)."""

from __future__ import annotations

import torch

from anyaccel.ops.fused_buckets import BucketPlanner


def _params(specs):
    out = []
    for n, dtype in specs:
        p = torch.nn.Parameter(torch.randn(n).to(dtype))
        p.grad = torch.randn(n).to(dtype)
        out.append(p)
    return out


def _planner(**kw):
    args = dict(state_names=("exp_avg", "exp_avg_sq"), master_weights=False, fp32_optimizer_states=True,
                op="FusedAdam", count_steps=True)
    args.update(kw)
    return BucketPlanner(**args)


def test_buckets_by_dtype_and_cache_between_steps():
    ps = _params([(5, torch.float32), (7, torch.bfloat16), (9, torch.float32)])
    group, state = {"params": ps}, {}
    planner = _planner()
    first = planner.buckets(0, group, state)
    keys = [k for k, _ in first]
    assert [(k[1], k[2], k[3], k[5]) for k in keys] == [(torch.float32, torch.float32, torch.float32, 1),
                                                         (torch.bfloat16, torch.bfloat16, torch.float32, 1)]
    fp32 = first[0][1]
    assert fp32.params[0] is ps[0] and fp32.params[1] is ps[2] and fp32.step == 1
    assert all(t.dtype == torch.float32 and t.shape == p.shape for t, p in zip(fp32.states["exp_avg"], fp32.params))
    # next step: new gradient tensors, same parameters -> the same bucket objects, grads refreshed, step 2
    for p in ps:
        p.grad = torch.randn_like(p)
    second = planner.buckets(0, group, state)
    assert second is first and second[0][1].grads[1] is ps[2].grad
    assert all(state[p]["step"] == 2 for p in ps) and second[1][1].step == 2


def test_replans_when_the_set_of_gradients_or_their_dtype_changes():
    ps = _params([(4, torch.float32), (6, torch.float32)])
    group, state = {"params": ps}, {}
    planner = _planner()
    planner.buckets(0, group, state)
    ps[1].grad = None
    only = planner.buckets(0, group, state)
    assert len(only) == 1 and only[0][1].params == [ps[0]] and only[0][1].step == 2
    assert state[ps[1]]["step"] == 1  # a parameter without a gradient does not advance
    ps[1].grad = torch.randn(6)
    both = planner.buckets(0, group, state)
    assert sorted(k[5] for k, _ in both) == [2, 3]  # different step counts: different launches
    ps[0].grad_dtype = None  # torch >= 2.10 refuses a gradient of another dtype unless told so
    ps[0].grad = torch.randn(4, dtype=torch.float64)
    mixed = planner.buckets(0, group, state)
    assert {k[2] for k, _ in mixed} == {torch.float64, torch.float32}


def test_non_contiguous_gradient_is_copied_every_step():
    p = torch.nn.Parameter(torch.randn(4, 6))
    p.grad = torch.randn(6, 4).t()
    group, state = {"params": [p]}, {}
    planner = _planner()
    for step in (1, 2):
        (key, b), = planner.buckets(0, group, state)
        assert b.grads[0].is_contiguous() and torch.equal(b.grads[0], p.grad) and b.step == step


def test_state_in_param_dtype_and_master_weights():
    ps = _params([(8, torch.bfloat16), (3, torch.float16), (5, torch.float32)])
    state = {}
    (_, bf), (_, hf), (_, f32) = _planner(fp32_optimizer_states=False).buckets(0, {"params": ps}, state)
    assert bf.states["exp_avg"][0].dtype == torch.bfloat16 and hf.states["exp_avg_sq"][0].dtype == torch.float16
    assert f32.states["exp_avg"][0].dtype == torch.float32
    # master weights: fp32 master updated by the kernel, fp32 state, the bf16 parameter written as the copy
    p = _params([(8, torch.bfloat16)])[0]
    state = {}
    (key, b), = _planner(master_weights=True, fp32_optimizer_states=False).buckets(0, {"params": [p]}, state)
    assert b.params[0] is state[p]["master"] and b.params[0].dtype == torch.float32
    assert torch.equal(b.params[0], p.detach().float()) and b.copies == [p]
    assert b.states["exp_avg"][0].dtype == torch.float32 and key[4] == torch.bfloat16


def test_clear_forgets_the_plan_and_lion_counts_no_steps():
    ps = _params([(4, torch.float32)])
    state = {}
    planner = _planner(state_names=("exp_avg",), count_steps=False)
    first = planner.buckets(0, {"params": ps}, state)
    assert first[0][0][5] == 0 and state[ps[0]]["step"] == 0
    planner.clear()
    state[ps[0]]["exp_avg"] = torch.randn(4)  # e.g. load_state_dict replaced it
    again = planner.buckets(0, {"params": ps}, state)
    assert again is not first and again[0][1].states["exp_avg"][0] is state[ps[0]]["exp_avg"]
