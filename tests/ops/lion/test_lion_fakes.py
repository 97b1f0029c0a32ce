"""The validating fake of ``lion_step`` (anyaccel/ops/lion/fakes.py) against the CPU kernel: the same bad
call fails with the same words in both, a valid call passes, and the fake is what the op runs for meta
tensors."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from anyaccel.ops.lion import fakes

ARG_ORDER = ("params", "grads", "exp_avgs", "model_copies", "lr", "beta1", "beta2", "weight_decay")


def _args(n: int = 3, size: int = 10) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(22)
    return {
        "params": [torch.randn(size, generator=gen) for _ in range(n)],
        "grads": [torch.randn(size, generator=gen) for _ in range(n)],
        "exp_avgs": [torch.randn(size, generator=gen) for _ in range(n)],
        "model_copies": [],
        "lr": 1e-3, "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.0,
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
        module.lion_step(*_positional(args))
    with pytest.raises(RuntimeError) as fake:
        fakes.lion_step("cpu", *_positional(args))
    return str(kernel.value), str(fake.value)


SAME_WORDS = {
    "non-contiguous grad": ("grads", 1, torch.randn(20)[::2]),
    "non-contiguous state": ("exp_avgs", 0, torch.randn(20)[::2]),
    "grad dtype": ("grads", 0, torch.randn(10, dtype=torch.float16)),
    "state shape": ("exp_avgs", 2, torch.randn(11)),
    "2-d shape": ("grads", 1, torch.randn(2, 5)),
    "16-bit state of fp32 params": ("exp_avgs", 1, torch.zeros(10, dtype=torch.bfloat16)),
    "short list": ("grads", -1, [torch.zeros(10)] * 2),
    "copies of the wrong length": ("model_copies", -1, [torch.zeros(10, dtype=torch.float16)] * 4),
    "fp32 copies": ("model_copies", -1, [torch.zeros(10)] * 3),
    "negative lr": ("lr", -1, -1e-3),
    "float32 overflow": ("weight_decay", -1, 1e39),
    "nan": ("beta2", -1, float("nan")),
    "inf": ("lr", -1, float("inf")),
    "beta1 above 1": ("beta1", -1, 1.5),
    "integral beta1": ("beta1", -1, 2.0),  # Python writes 2.0: so must the kernel
    "negative beta2": ("beta2", -1, -0.25),
    "integral lr": ("lr", -1, -3.0),
}


@pytest.mark.parametrize("case", sorted(SAME_WORDS))
def test_fake_and_kernel_say_the_same_words(cpu_lion_module: Any, case: str) -> None:
    kernel, fake = _messages(cpu_lion_module, _set(*SAME_WORDS[case]))
    assert kernel == fake
    assert kernel.startswith("lion_step: ")


def test_sparse_gradients_are_reported_alike(cpu_lion_module: Any) -> None:
    kernel, fake = _messages(cpu_lion_module, _set("grads", 0, torch.randn(10).to_sparse()))
    assert kernel == fake


def test_boundary_betas_are_valid_for_both(cpu_lion_module: Any) -> None:
    for beta1, beta2 in ((0.0, 1.0), (1.0, 0.0)):
        args = _args()
        args["beta1"], args["beta2"] = beta1, beta2
        assert fakes.lion_step("cpu", *_positional(args)) is None
        cpu_lion_module.lion_step(*_positional(args))


def test_the_fake_accepts_a_valid_call_with_copies_and_computes_nothing() -> None:
    args = _args()
    args["grads"] = [g.to(torch.float16) for g in args["grads"]]
    args["model_copies"] = [torch.zeros(10, dtype=torch.float16) for _ in range(3)]
    before = [t.clone() for t in args["params"] + args["exp_avgs"]]
    assert fakes.lion_step("cpu", *_positional(args)) is None
    assert all(torch.equal(a, b) for a, b in zip(args["params"] + args["exp_avgs"], before, strict=True))


def test_the_fake_checks_the_device_type_it_is_bound_to() -> None:
    with pytest.raises(RuntimeError) as err:
        fakes.lion_step("npu", *_positional(_args()))
    assert str(err.value) == "lion_step: params[0] is on device cpu; this kernel takes npu tensors"


def test_meta_tensors_run_the_registered_fake(cpu_lion_module: Any) -> None:
    args = _args(n=2)
    for key in ("params", "grads", "exp_avgs"):
        args[key] = [torch.empty(10, device="meta") for _ in range(2)]
    with pytest.raises(RuntimeError) as direct:
        fakes.lion_step("cpu", *_positional(args))
    with pytest.raises(RuntimeError) as through_the_op:
        cpu_lion_module.lion_step(*_positional(args))
    assert str(through_the_op.value) == str(direct.value) == (
        "lion_step: params[0] is on device meta; the CPU kernel takes CPU tensors (use FusedLion for accelerator "
        "tensors, or move the tensor to the CPU)")
