"""The one validation vocabulary of the ops (anyaccel/ops/validation.py): intervals, scalar checks and the
optimizer tensor-list rules, each with its message. Pure Python: no kernel is built here (the kernels'
agreement with these messages is tested beside each family's CPU op)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from anyaccel.ops import validation as v
from anyaccel.ops.adam.spec import SPEC as ADAM
from anyaccel.ops.lion.spec import SPEC as LION
from anyaccel.ops.validation import FLOAT32_MAX, Interval

ACCEPTED = [c.as_tuple() for c in ADAM.dtypes]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# --------------------------------------------------------------------------------------------------------
# Interval
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("[0, 1)", Interval(0.0, 1.0, True, False)),
    ("[0, 1]", Interval(0.0, 1.0, True, True)),
    ("(0, inf)", Interval(0.0, math.inf, False, False)),
    ("[1, inf)", Interval(1.0, math.inf, True, False)),
    ("(-inf, 5]", Interval(-math.inf, 5.0, False, True)),
    ("  [ -2.5e-3 ,+1E2 )  ", Interval(-2.5e-3, 100.0, True, False)),
])
def test_interval_parse(text: str, expected: Interval) -> None:
    assert Interval.parse(text) == expected


@pytest.mark.parametrize("text", ["", "0, 1", "[0; 1)", "{0, 1}", "[0, 1", "0 <= x < 1", "[x, 1)", "[0, 1, 2]"])
def test_interval_parse_rejects_non_intervals(text: str) -> None:
    with pytest.raises(ValueError, match="is not an interval such as"):
        Interval.parse(text)


@pytest.mark.parametrize("text,inside,outside", [
    ("[0, 1)", [0.0, 0.5, math.nextafter(1.0, 0.0)], [-1e-300, 1.0, 2.0, math.nan, math.inf, -math.inf]),
    ("[0, 1]", [0.0, 1.0], [math.nextafter(1.0, 2.0), -0.1, math.nan]),
    ("(0, inf)", [5e-324, 1.0, 1e300], [0.0, -0.0, -1.0, math.inf, math.nan]),
    ("[1, inf)", [1, 2, 10**30], [0, -1, math.inf]),
    ("(-inf, inf)", [-1e300, 0.0, 1e300], [math.nan, math.inf, -math.inf]),
])
def test_interval_contains_respects_open_and_closed_ends(text: str, inside: list[float], outside: list[float]) -> None:
    iv = Interval.parse(text)
    assert all(iv.contains(x) for x in inside), [x for x in inside if not iv.contains(x)]
    assert not any(iv.contains(x) for x in outside), [x for x in outside if iv.contains(x)]


@pytest.mark.parametrize("text,name,words", [
    ("[0, 1)", "beta1", "0 <= beta1 < 1"),
    ("[0, 1]", "beta2", "0 <= beta2 <= 1"),
    ("(0, 1)", "x", "0 < x < 1"),
    ("(0, inf)", "eps", "eps > 0"),
    ("[1, inf)", "step", "step >= 1"),
    ("[0, inf)", "lr", "lr >= 0"),
    ("(-inf, 5]", "x", "x <= 5"),
    ("(-inf, 5)", "x", "x < 5"),
    ("(-inf, inf)", "x", "x"),
    ("[0.5, 2.25)", "x", "0.5 <= x < 2.25"),
])
def test_interval_describe(text: str, name: str, words: str) -> None:
    assert Interval.parse(text).describe(name) == words


def test_every_spec_range_parses_and_is_not_empty() -> None:
    for spec in (ADAM, LION):
        for fn in spec.functions:
            for name, text in fn.ranges:
                iv = Interval.parse(text)
                assert iv.low < iv.high, (spec.family, fn.name, name, text)


# --------------------------------------------------------------------------------------------------------
# Scalars
# --------------------------------------------------------------------------------------------------------


def test_float32_max_is_torchs() -> None:
    assert FLOAT32_MAX == torch.finfo(torch.float32).max


@pytest.mark.parametrize("value", [0.0, 0.5, 0, 1e-45, math.nextafter(1.0, 0.0)])
def test_scalar_problem_accepts_values_in_range(value: float) -> None:
    assert v.scalar_problem("beta1", value, Interval.parse("[0, 1)")) is None


@pytest.mark.parametrize("value,kind,extra", [
    (1.0, "float", ""),
    (-0.1, "float", ""),
    (math.nan, "float", ""),
    (math.inf, "float", ""),
    (-math.inf, "float", ""),
    (True, "float", " (a Python float, got bool)"),
    ("0.5", "float", " (a Python float, got str)"),
    (None, "float", " (a Python float, got NoneType)"),
    (torch.tensor(0.5), "float", " (a Python float, got Tensor)"),
])
def test_scalar_problem_names_the_rule(value: Any, kind: str, extra: str) -> None:
    problem = v.scalar_problem("beta1", value, Interval.parse("[0, 1)"), kind)
    assert problem == "accepted: a finite 0 <= beta1 < 1 representable in float32" + extra


def test_int_kind_has_no_float32_clause() -> None:
    step = Interval.parse("[1, inf)")
    assert v.scalar_problem("step", 0, step, "int") == "accepted: a finite step >= 1"
    assert v.scalar_problem("step", 10**40, step, "int") is None  # an int step is not a float32
    assert v.scalar_problem("step", False, step, "int") == "accepted: a finite step >= 1 (a Python int, got bool)"


@pytest.mark.parametrize("value,ok", [
    (FLOAT32_MAX, True),
    (-FLOAT32_MAX, False),  # out of range anyway
    (math.nextafter(FLOAT32_MAX, math.inf), False),
    (1e39, False),
    (1e308, False),
    (3e38, True),
])
def test_floats_must_be_representable_in_float32(value: float, ok: bool) -> None:
    problem = v.scalar_problem("lr", value, Interval.parse("[0, inf)"))
    assert (problem is None) == ok
    if not ok:
        assert problem == "accepted: a finite lr >= 0 representable in float32"


def test_check_scalar_message_and_error_class() -> None:
    with pytest.raises(ValueError) as err:
        v.check_scalar("adam_step", "beta1", 1.0, "[0, 1)")
    assert str(err.value) == ("adam_step: beta1=1.0 is invalid; accepted: a finite 0 <= beta1 < 1 representable in "
                              "float32")
    with pytest.raises(RuntimeError, match=r"^lion_step: lr=1e\+39 is invalid; accepted: a finite lr >= 0 "
                                           r"representable in float32$"):
        v.check_scalar("lion_step", "lr", 1e39, Interval.parse("[0, inf)"), error=RuntimeError)
    with pytest.raises(ValueError, match=r"^CPUAdam: step=0 is invalid; accepted: a finite step >= 1$"):
        v.check_scalar("CPUAdam", "step", 0, "[1, inf)", kind="int")
    v.check_scalar("x", "eps", 1e-8, "(0, inf)")  # accepted: no error


@pytest.mark.parametrize("betas", [(0.9, 0.999), [0.5, 0.5]])
def test_check_beta_pair_accepts_pairs(betas: Any) -> None:
    v.check_beta_pair("CPUAdam", betas)


@pytest.mark.parametrize("betas", [(0.9,), (0.9, 0.99, 0.999), 0.9, "ab", None])
def test_check_beta_pair_rejects_others(betas: Any) -> None:
    with pytest.raises(ValueError, match=r"^CPUAdam: betas=.* is invalid; accepted: a pair \(beta1, beta2\)"):
        v.check_beta_pair("CPUAdam", betas)


GOOD_ADAM = dict(step=1, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0)


def test_check_scalars_accepts_a_good_call_and_reports_the_first_bad_value_in_argument_order() -> None:
    fn = ADAM.function("adam_step")
    v.check_scalars(fn, GOOD_ADAM)
    with pytest.raises(RuntimeError, match=r"^adam_step: lr=-1\.0 is invalid"):
        v.check_scalars(fn, {**GOOD_ADAM, "eps": 0.0, "lr": -1.0})  # lr comes before eps in the schema
    with pytest.raises(RuntimeError, match=r"^adam_step: step=0 is invalid; accepted: a finite step >= 1$"):
        v.check_scalars(fn, {**GOOD_ADAM, "step": 0, "lr": -1.0})
    with pytest.raises(ValueError, match=r"eps=0\.0 is invalid; accepted: a finite eps > 0 representable"):
        v.check_scalars(fn, {**GOOD_ADAM, "eps": 0.0}, error=ValueError)


@pytest.mark.parametrize("name,value,words", [
    ("lr", -1e-3, "lr >= 0"), ("lr", 1e39, "lr >= 0"), ("beta1", 1.5, "0 <= beta1 <= 1"),
    ("beta2", -0.1, "0 <= beta2 <= 1"), ("beta2", math.nan, "0 <= beta2 <= 1"),
    ("weight_decay", math.inf, "weight_decay >= 0"),
])
def test_check_scalars_lion_ranges(name: str, value: float, words: str) -> None:
    good = dict(lr=1e-3, beta1=0.9, beta2=0.99, weight_decay=0.0)
    v.check_scalars(LION.function("lion_step"), good)
    v.check_scalars(LION.function("lion_step"), {**good, "beta1": 1.0, "beta2": 0.0})  # Lion's betas are closed
    with pytest.raises(RuntimeError, match=rf"^lion_step: {name}=.* is invalid; accepted: a finite {words} "
                                           r"representable in float32$"):
        v.check_scalars(LION.function("lion_step"), {**good, name: value})


# --------------------------------------------------------------------------------------------------------
# Optimizer tensor lists
# --------------------------------------------------------------------------------------------------------


def _lists(n: int = 3, size: int = 10, combo: tuple[str, str, str, str] = ACCEPTED[0]) -> dict[str, Any]:
    param, grad, state, copy = combo
    return {
        "params": [torch.randn(size).to(DTYPES[param]) for _ in range(n)],
        "grads": [torch.randn(size).to(DTYPES[grad]) for _ in range(n)],
        "states": {"exp_avgs": [torch.zeros(size, dtype=DTYPES[state]) for _ in range(n)],
                   "exp_avg_sqs": [torch.zeros(size, dtype=DTYPES[state]) for _ in range(n)]},
        "model_copies": [] if copy == "none" else [torch.zeros(size, dtype=DTYPES[copy]) for _ in range(n)],
    }


def _check(lists: dict[str, Any], device_type: Any = "cpu", op: str = "adam_step", accepted: Any = ACCEPTED,
           error: type[Exception] = RuntimeError) -> None:
    v.check_optimizer_lists(op, lists["params"], lists["grads"], lists["states"], lists["model_copies"], accepted,
                            device_type, error)


@pytest.mark.parametrize("combo", ACCEPTED, ids=lambda c: "-".join(c))
def test_every_spec_combination_is_accepted(combo: tuple[str, str, str, str]) -> None:
    _check(_lists(combo=combo))


def test_one_call_may_mix_combinations_and_empty_lists_pass() -> None:
    a, b = _lists(1, 7, ACCEPTED[0]), _lists(1, 5, ("bfloat16", "bfloat16", "bfloat16", "none"))
    mixed = {"params": a["params"] + b["params"], "grads": a["grads"] + b["grads"],
             "states": {k: a["states"][k] + b["states"][k] for k in a["states"]}, "model_copies": []}
    _check(mixed)
    _check({"params": [], "grads": [], "states": {"exp_avgs": [], "exp_avg_sqs": []}, "model_copies": []})


@pytest.mark.parametrize("shorten,counts", [
    ("grads", "3 params, 2 grads, 3 exp_avgs, 3 exp_avg_sqs and 0 model_copies"),
    ("exp_avgs", "3 params, 3 grads, 2 exp_avgs, 3 exp_avg_sqs and 0 model_copies"),
    ("exp_avg_sqs", "3 params, 3 grads, 3 exp_avgs, 2 exp_avg_sqs and 0 model_copies"),
])
def test_list_lengths(shorten: str, counts: str) -> None:
    lists = _lists()
    if shorten == "grads":
        lists["grads"] = lists["grads"][:2]
    else:
        lists["states"][shorten] = lists["states"][shorten][:2]
    with pytest.raises(RuntimeError) as err:
        _check(lists)
    assert str(err.value) == (f"adam_step: got {counts}; grads and every state list need one entry per parameter, "
                              "model_copies none or one per parameter")


def test_model_copies_none_or_one_per_parameter() -> None:
    lists = _lists(combo=ACCEPTED[5])
    lists["model_copies"] = lists["model_copies"][:2]
    with pytest.raises(RuntimeError, match=r"got 3 params, 3 grads, 3 exp_avgs, 3 exp_avg_sqs and 2 model_copies"):
        _check(lists)


def test_host_device_rule_names_the_accelerator_optimizer() -> None:
    for op, alternative in (("adam_step", "FusedAdam"), ("lion_step", "FusedLion"), ("my_step", "the fused optimizer")):
        lists = _lists()
        lists["states"]["exp_avg_sqs"][1] = torch.zeros(10, device="meta")
        with pytest.raises(RuntimeError) as err:
            _check(lists, op=op)
        assert str(err.value) == (f"{op}: exp_avg_sqs[1] is on device meta; the CPU kernel takes CPU tensors (use "
                                  f"{alternative} for accelerator tensors, or move the tensor to the CPU)")


@dataclass
class FakeTensor:
    """Just what check_optimizer_lists reads of a tensor, to name devices this machine does not have."""

    device: torch.device
    shape: torch.Size = torch.Size([4])
    dtype: torch.dtype = torch.float32
    layout: torch.layout = torch.strided

    def is_contiguous(self) -> bool:
        return True

    def stride(self) -> tuple[int, ...]:
        return (1,)


def _fake_lists(devices: list[str], state_names: tuple[str, ...] = ("exp_avgs", "exp_avg_sqs")) -> dict[str, Any]:
    """One parameter; ``devices`` for params, grads and each state, in that order."""
    ts = [[FakeTensor(torch.device(d))] for d in devices]
    return {"params": ts[0], "grads": ts[1], "states": dict(zip(state_names, ts[2:], strict=True)),
            "model_copies": []}


def test_accelerator_device_rules() -> None:
    _check(_fake_lists(["cuda:1", "cuda:1", "cuda:1", "cuda:1"]), device_type="cuda")
    _check(_fake_lists(["xpu:0", "xpu:0", "xpu:0", "xpu:0"]), device_type=("cuda", "xpu"))
    with pytest.raises(RuntimeError) as err:
        _check(_fake_lists(["cuda:0", "cuda:0", "cuda:1", "cuda:0"]), device_type="cuda")
    assert str(err.value) == ("adam_step: exp_avgs[0] is on device cuda:1; every tensor of one call must be on "
                              "cuda:0 (params[0]'s device)")
    with pytest.raises(RuntimeError) as err:
        _check(_fake_lists(["cuda:0", "cpu", "cuda:0", "cuda:0"]), device_type="cuda")
    assert str(err.value) == "adam_step: grads[0] is on device cpu; this kernel takes cuda tensors"
    with pytest.raises(RuntimeError, match=r"params\[0\] is on device cpu; this kernel takes cuda or xpu tensors"):
        _check(_fake_lists(["cpu", "cpu", "cpu", "cpu"]), device_type=("cuda", "xpu"))


def test_layout_rule() -> None:
    lists = _lists()
    lists["grads"][2] = torch.randn(10).to_sparse()
    with pytest.raises(RuntimeError) as err:
        _check(lists)
    assert str(err.value) == ("adam_step: grads[2] has layout torch.sparse_coo; only dense (strided) tensors are "
                              "accepted, sparse gradients are not supported")


def test_contiguity_rule() -> None:
    lists = _lists()
    lists["params"][1] = torch.randn(10, 2)[:, 0]
    lists["grads"][1] = torch.randn(10, 2)[:, 0]
    with pytest.raises(RuntimeError) as err:
        _check(lists)
    assert str(err.value) == ("adam_step: params[1] is not contiguous (sizes [10], strides [2]); pass contiguous "
                              "tensors (the kernel updates tensors in place, so a .contiguous() copy would not be "
                              "updated)")


@pytest.mark.parametrize("where,value,shape", [("exp_avgs", torch.zeros(11), "[11]"),
                                                ("grads", torch.zeros(2, 5), "[2, 5]")])
def test_shape_rule(where: str, value: torch.Tensor, shape: str) -> None:
    lists = _lists()
    (lists["grads"] if where == "grads" else lists["states"][where])[2] = value
    with pytest.raises(RuntimeError) as err:
        _check(lists)
    assert str(err.value) == (f"adam_step: {where}[2] has shape {shape} but params[2] has shape [10]; they must "
                              "have the same shape")


def test_states_share_one_dtype() -> None:
    lists = _lists()
    lists["states"]["exp_avg_sqs"][0] = torch.zeros(10, dtype=torch.float64)
    with pytest.raises(RuntimeError) as err:
        _check(lists)
    assert str(err.value) == ("adam_step: the optimizer states of params[0] have different dtypes (exp_avgs[0] "
                              "float32, exp_avg_sqs[0] float64); every state list must share one dtype")


@pytest.mark.parametrize("combo", [
    ("float32", "bfloat16", "float32", "none"),  # 16-bit grads need fp32 masters with model copies
    ("float32", "float32", "bfloat16", "none"),  # 16-bit state of fp32 params
    ("bfloat16", "bfloat16", "float32", "bfloat16"),  # model copies of 16-bit params
    ("float32", "float32", "float32", "float32"),  # an fp32 "copy"
    ("float32", "bfloat16", "float32", "float16"),  # grads and copies of different 16-bit dtypes
])
def test_dtype_combination_rule_lists_every_accepted_one(combo: tuple[str, str, str, str]) -> None:
    lists = _lists(n=2, combo=ACCEPTED[0])
    param, grad, state, copy = (DTYPES[d] if d != "none" else None for d in combo)
    lists["params"][1] = lists["params"][1].to(param)
    lists["grads"][1] = lists["grads"][1].to(grad)
    lists["states"] = {k: [s[0], s[1].to(state)] for k, s in lists["states"].items()}
    if copy is not None:
        lists["params"][0] = lists["params"][0].float()
        lists["model_copies"] = [torch.zeros(10, dtype=torch.bfloat16), torch.zeros(10, dtype=copy)]
        lists["grads"][0] = lists["grads"][0].float()
        lists["states"] = {k: [s[0].float(), s[1]] for k, s in lists["states"].items()}
    with pytest.raises(RuntimeError) as err:
        _check(lists)
    accepted = ", ".join("(" + ", ".join(c) + ")" for c in ACCEPTED)
    assert str(err.value) == (f"adam_step: params[1] has the dtype combination (param, grad, state, model_copy) = "
                              f"({', '.join(combo)}), which is not supported; accepted: {accepted}")
    assert accepted == ADAM.accepted_dtypes_text()


def test_ops_without_state_lists_use_none_as_their_state_dtype() -> None:
    lists = _lists()
    lists["states"] = {}
    _check(lists, accepted=[("float32", "float32", "none", "none")])
    with pytest.raises(RuntimeError, match=r"= \(float32, float32, none, none\), which is not supported"):
        _check(lists)


def test_rules_run_per_parameter_in_list_order_and_per_tensor_in_rule_order() -> None:
    lists = _lists()
    lists["grads"][0] = torch.randn(20)[::2]  # a later list of an earlier parameter wins over...
    lists["params"][1] = torch.zeros(10, device="meta")  # ...an earlier list of a later parameter
    with pytest.raises(RuntimeError, match=r"^adam_step: grads\[0\] is not contiguous"):
        _check(lists)
    lists = _lists()
    lists["grads"][0] = torch.zeros(20, device="meta")[::2]  # device before contiguity
    with pytest.raises(RuntimeError, match=r"^adam_step: grads\[0\] is on device meta"):
        _check(lists)
    lists = _lists()
    lists["grads"][0] = torch.zeros(11, dtype=torch.float64)  # shape before dtypes
    with pytest.raises(RuntimeError, match=r"^adam_step: grads\[0\] has shape \[11\]"):
        _check(lists)


def test_error_class_is_the_callers() -> None:
    lists = _lists()
    lists["grads"] = lists["grads"][:1]
    with pytest.raises(ValueError, match="got 3 params, 1 grads"):
        _check(lists, error=ValueError)
