"""The validating fake of ``adam_step`` (anyaccel/ops/adam/fakes.py) against the CPU kernel: the same bad
call fails with the same words in both (the kernels' checks and the fakes share one vocabulary,
anyaccel/ops/validation.py and csrc/includes/stable/checks.h), a valid call passes, and the fake is what
the op runs for meta tensors."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from anyaccel.ops.adam import fakes

ARG_ORDER = ("params", "grads", "exp_avgs", "exp_avg_sqs", "model_copies", "step", "lr", "beta1", "beta2", "eps",
             "weight_decay", "bias_correction", "adamw_mode")


def _args(n: int = 3, size: int = 10) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(21)
    return {
        "params": [torch.randn(size, generator=gen) for _ in range(n)],
        "grads": [torch.randn(size, generator=gen) for _ in range(n)],
        "exp_avgs": [torch.rand(size, generator=gen) for _ in range(n)],
        "exp_avg_sqs": [torch.rand(size, generator=gen) for _ in range(n)],
        "model_copies": [],
        "step": 1, "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0,
        "bias_correction": True, "adamw_mode": True,
    }


def _positional(args: dict[str, Any]) -> list[Any]:
    return [args[k] for k in ARG_ORDER]


def _set(key: str, index: int, value: Any) -> dict[str, Any]:
    args = _args()
    if index < 0:
        args[key] = value
    else:
        args[key][index] = value
    return args


def _messages(module: Any, args: dict[str, Any]) -> tuple[str, str]:
    """(the CPU kernel's message, the fake's message) for one bad call."""
    with pytest.raises(RuntimeError) as kernel:
        module.adam_step(*_positional(args))
    with pytest.raises(RuntimeError) as fake:
        fakes.adam_step("cpu", *_positional(args))
    return str(kernel.value), str(fake.value)


SAME_WORDS = {
    "non-contiguous grad": ("grads", 1, torch.randn(20)[::2]),
    "non-contiguous param": ("params", 2, torch.randn(10, 2)[:, 0]),
    "grad dtype": ("grads", 0, torch.randn(10, dtype=torch.bfloat16)),
    "state shape": ("exp_avgs", 2, torch.randn(11)),
    "2-d shape": ("exp_avg_sqs", 1, torch.randn(2, 5)),
    "state dtypes differ": ("exp_avg_sqs", 0, torch.rand(10, dtype=torch.float64)),
    "16-bit state of fp32 params": ("exp_avgs", 0, torch.zeros(10, dtype=torch.bfloat16)),
    "short list": ("exp_avgs", -1, [torch.zeros(10)] * 2),
    "copies of the wrong length": ("model_copies", -1, [torch.zeros(10, dtype=torch.bfloat16)]),
    "fp32 copies": ("model_copies", -1, [torch.zeros(10)] * 3),
    "negative lr": ("lr", -1, -1e-3),
    "float32 overflow": ("lr", -1, 1e39),
    "nan": ("beta2", -1, float("nan")),
    "-inf": ("weight_decay", -1, float("-inf")),
    "inf eps": ("eps", -1, float("inf")),
    "fractional beta1": ("beta1", -1, 1.5),
    "integral beta1": ("beta1", -1, 1.0),  # Python writes 1.0: so must the kernel
    "zero eps": ("eps", -1, 0.0),
    "integral lr": ("lr", -1, -2.0),
    "tiny lr": ("lr", -1, -1e-05),
    "large weight decay": ("weight_decay", -1, -1e16),
}


@pytest.mark.parametrize("case", sorted(SAME_WORDS))
def test_fake_and_kernel_say_the_same_words(cpu_adam_module: Any, case: str) -> None:
    kernel, fake = _messages(cpu_adam_module, _set(*SAME_WORDS[case]))
    assert kernel == fake
    assert kernel.startswith("adam_step: ")


@pytest.mark.parametrize("step", [0, -5])
def test_int_arguments_are_written_alike(cpu_adam_module: Any, step: int) -> None:
    kernel, fake = _messages(cpu_adam_module, _set("step", -1, step))
    assert fake == f"adam_step: step={step} is invalid; accepted: a finite step >= 1"
    assert kernel == fake


def test_sparse_gradients_are_reported_alike(cpu_adam_module: Any) -> None:
    kernel, fake = _messages(cpu_adam_module, _set("grads", 2, torch.randn(10).to_sparse()))
    assert kernel == fake


@pytest.mark.parametrize("combo", [("float32", "float32", "float32", "none"),
                                   ("float32", "bfloat16", "float32", "bfloat16")])
def test_the_fake_accepts_a_valid_call_and_computes_nothing(combo: tuple[str, ...]) -> None:
    args = _args()
    dt = {k: getattr(torch, v) for k, v in zip(("param", "grad", "state", "copy"), combo, strict=True)
          if v != "none"}
    args["grads"] = [g.to(dt["grad"]) for g in args["grads"]]
    if "copy" in dt:
        args["model_copies"] = [torch.zeros(10, dtype=dt["copy"]) for _ in range(3)]
    before = [t.clone() for t in args["params"]]
    assert fakes.adam_step("cpu", *_positional(args)) is None
    assert all(torch.equal(a, b) for a, b in zip(args["params"], before, strict=True))


def test_the_fake_checks_the_device_type_it_is_bound_to() -> None:
    args = _args()
    with pytest.raises(RuntimeError) as err:
        fakes.adam_step("cuda", *_positional(args))
    assert str(err.value) == "adam_step: params[0] is on device cpu; this kernel takes cuda tensors"
    with pytest.raises(RuntimeError, match=r"params\[0\] is on device cpu; this kernel takes cuda or xpu tensors"):
        fakes.adam_step(("cuda", "xpu"), *_positional(args))


def test_meta_tensors_run_the_registered_fake(cpu_adam_module: Any) -> None:
    """The CPU build registers the fake bound to "cpu": an all-meta call raises what the fake says."""
    args = _args(n=2)
    for key in ("params", "grads", "exp_avgs", "exp_avg_sqs"):
        args[key] = [torch.empty(10, device="meta") for _ in range(2)]
    with pytest.raises(RuntimeError) as direct:
        fakes.adam_step("cpu", *_positional(args))
    with pytest.raises(RuntimeError) as through_the_op:
        cpu_adam_module.adam_step(*_positional(args))
    assert str(through_the_op.value) == str(direct.value) == (
        "adam_step: params[0] is on device meta; the CPU kernel takes CPU tensors (use FusedAdam for accelerator "
        "tensors, or move the tensor to the CPU)")
    args["step"] = 0  # scalars are checked first, as the kernel's generated wrapper does
    with pytest.raises(RuntimeError, match=r"^adam_step: step=0 is invalid"):
        cpu_adam_module.adam_step(*_positional(args))


def test_under_fake_tensors_a_bad_call_fails_while_tracing(cpu_adam_module: Any) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    args = _set("exp_avgs", 2, torch.randn(11))
    kernel, _ = _messages(cpu_adam_module, args)
    with FakeTensorMode() as mode:
        fake_args = [[mode.from_tensor(t) for t in a] if isinstance(a, list) else a for a in _positional(args)]
        with pytest.raises(RuntimeError) as traced:
            cpu_adam_module.adam_step(*fake_args)
    assert str(traced.value) == kernel
