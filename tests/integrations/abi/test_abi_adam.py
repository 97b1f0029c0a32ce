"""DeepSpeed's CPU Adam and FusedAdam module functions on anyaccel's CPU Adam build
(``anyaccel/integrations/deepspeed/abi/adam.py``), without DeepSpeed: the optimizer-id lifecycle, DeepSpeed's argument
conventions and return values, and agreement with ``adam_step`` and a float64 reference.

The calls are written the way DeepSpeed 0.19.8's ``DeepSpeedCPUAdam`` and ``FusedAdam`` make them
(``deepspeed/ops/adam/cpu_adam.py``, ``fused_adam.py``).
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import torch

import anyaccel
from anyaccel.integrations.deepspeed.abi.common import (
    InvalidArgumentError,
    TensorListsError,
    UnknownOptimizerIdError,
    fp32,
)

F32 = torch.finfo(torch.float32).eps
HYPER = (1e-3, 0.9, 0.999, 1e-8)  # lr, beta1, beta2, eps as DeepSpeedCPUAdam's defaults


@pytest.fixture(scope="module")
def op(_ops_cache_dir: str) -> Any:
    """What ``DeepSpeedCPUAdam`` gets: ``CPUAdamBuilder().load()`` through the CPU accelerator."""
    return anyaccel.get_accelerator().create_op_builder("CPUAdamBuilder").load()


def _tensors(n: int, seed: int, dtype: torch.dtype = torch.float32, state: torch.dtype = torch.float32
             ) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=gen).to(dtype), torch.randn(n, generator=gen).to(dtype),
            torch.zeros(n, dtype=state), torch.zeros(n, dtype=state)]


def reference_adamw(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step: int, lr: float,
                    beta1: float, beta2: float, eps: float, wd: float) -> tuple[torch.Tensor, ...]:
    """One AdamW step in float64 (torch.optim.AdamW's documented rule)."""
    p, g, m, v = (t.double() for t in (p, g, m, v))
    p = p * (1 - lr * wd)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    p = p - lr / (1 - beta1**step) * m / (v.sqrt() / (1 - beta2**step) ** 0.5 + eps)
    return p, m, v


def test_the_module_offers_deepspeeds_functions_besides_its_own(op):
    assert callable(op.adam_step) and callable(op.adam_rollback_step)
    for name in ("create_adam", "adam_update", "adam_rollback", "destroy_adam", "multi_tensor_adam"):
        assert callable(getattr(op, name)) and name in op.adapted_functions
    assert not hasattr(op, "create_lion")
    fused = anyaccel.get_accelerator().create_op_builder("FusedAdamBuilder")
    assert type(fused).__name__ == "FusedAdamBuilder" and fused.load() is op  # the same build and library


def test_lifecycle_update_destroy_and_unknown_ids(op):
    assert op.create_adam(101, *HYPER, 0.01, True, False) == 0
    p, g, m, v = _tensors(1029, seed=0)
    twin = [t.clone() for t in (p, g, m, v)]
    assert op.adam_update(101, 1, *HYPER, 0.01, True, p, g, m, v) == 0
    op.adam_step([twin[0]], [twin[1]], [twin[2]], [twin[3]], [], 1, *(fp32(x) for x in HYPER), fp32(0.01), True,
                 True)
    for a, b in zip((p, m, v), (twin[0], twin[2], twin[3]), strict=True):
        assert torch.equal(a, b)  # the same kernel with DeepSpeed's fp32-rounded scalars: bit for bit
    assert op.destroy_adam(101) == 0
    with pytest.raises(UnknownOptimizerIdError, match=r"adam_update: optimizer id 101 does not exist") as info:
        op.adam_update(101, 2, *HYPER, 0.01, True, p, g, m, v)
    assert 101 not in info.value.known and "create_adam(" in str(info.value)
    assert op.destroy_adam(101) == 0  # unknown id: nothing to do (DeepSpeedCPUAdam.__del__ relies on it)
    assert op.destroy_adam(987654) == 0
    restored = pickle.loads(pickle.dumps(info.value))
    assert type(restored) is UnknownOptimizerIdError and str(restored) == str(info.value)


def test_a_second_create_replaces_the_mode(op):
    op.create_adam(102, *HYPER, 0.1, True, False)
    op.create_adam(102, *HYPER, 0.1, False, False)  # now Adam with L2 weight decay
    p, g, m, v = _tensors(64, seed=1)
    twin = [t.clone() for t in (p, g, m, v)]
    op.adam_update(102, 1, *HYPER, 0.1, True, p, g, m, v)
    op.adam_step([twin[0]], [twin[1]], [twin[2]], [twin[3]], [], 1, *(fp32(x) for x in HYPER), fp32(0.1), True,
                 False)
    assert torch.equal(p, twin[0])
    op.destroy_adam(102)


def test_ten_updates_match_a_float64_adamw(op):
    op.create_adam(103, *HYPER, 0.01, True, False)
    p, _, m, v = _tensors(4099, seed=2)
    ref = [p.double(), m.double(), v.double()]
    gen = torch.Generator().manual_seed(20)
    for step in range(1, 11):
        g = torch.randn(4099, generator=gen)
        op.adam_update(103, step, *HYPER, 0.01, True, p, g, m, v)
        ref = list(reference_adamw(ref[0], g, ref[1], ref[2], step, *HYPER, 0.01))
    assert ((p.double() - ref[0]).abs() <= 16 * F32 * ref[0].abs() + 1e-6).all()
    op.destroy_adam(103)


@pytest.mark.parametrize("param,state", [(torch.bfloat16, torch.float32), (torch.float16, torch.float16),
                                         (torch.bfloat16, torch.bfloat16)])
def test_16_bit_parameters_and_states(op, param, state):
    op.create_adam(104, *HYPER, 0.0, True, False)
    p, g, m, v = _tensors(100, seed=3, dtype=param, state=state)
    before = p.clone()
    assert op.adam_update(104, 1, *HYPER, 0.0, True, p, g, m, v) == 0
    assert not torch.equal(p, before) and m.dtype == state
    op.destroy_adam(104)


def test_non_contiguous_tensors_are_updated_and_shapes_may_differ(op):
    """DeepSpeed's kernel updates a .contiguous() copy of a strided tensor (the update is lost); anyaccel's
    computes on a copy and writes it back. Tensors are matched by element count, as DeepSpeed's are."""
    op.create_adam(105, *HYPER, 0.0, True, False)
    base = torch.randn(8, 16)
    p = base.t()  # non-contiguous view
    g = torch.randn(16, 8)
    m, v = torch.zeros(128), torch.zeros(16, 8)
    flat = [p.contiguous().view(-1), g.reshape(-1).clone(), m.clone(), v.reshape(-1).clone()]
    op.adam_update(105, 1, *HYPER, 0.0, True, p, g, m, v)
    op.adam_step([flat[0]], [flat[1]], [flat[2]], [flat[3]], [], 1, *(fp32(x) for x in HYPER), 0.0, True, True)
    assert torch.equal(p.contiguous().view(-1), flat[0]) and torch.equal(base.t(), p)
    op.destroy_adam(105)


def test_deepspeed_argument_types(op):
    op.create_adam(106, *HYPER, 0.0, True, False)
    p, g, m, v = _tensors(8, seed=4)
    with pytest.raises(TypeError, match="adam_update: step must be an int"):
        op.adam_update(106, 1.0, *HYPER, 0.0, True, p, g, m, v)
    with pytest.raises(TypeError, match="create_adam: optimizer_id must be an int"):
        op.create_adam(1.5, *HYPER, 0.0, True, False)
    with pytest.raises(RuntimeError, match="step=0"):  # DeepSpeed would divide by 1 - beta1**0 = 0
        op.adam_update(106, 0, *HYPER, 0.0, True, p, g, m, v)
    op.destroy_adam(106)


def test_rollback_through_the_abi_undoes_an_update(op):
    op.create_adam(107, *HYPER, 0.01, True, False)
    p, g, m, v = _tensors(1029, seed=5)
    before = [t.clone() for t in (p, m, v)]
    op.adam_update(107, 1, *HYPER, 0.01, True, p, g, m, v)
    assert op.adam_rollback(107, 1, *HYPER, 0.01, True, p, g, m, v) == 0
    assert ((p - before[0]).abs() <= 8 * F32 * (before[0].abs() + 1e-3)).all()
    assert (m - before[1]).abs().max() <= 8 * F32 * g.abs().max() and (v >= 0).all()
    with pytest.raises(UnknownOptimizerIdError):
        op.adam_rollback(999, 1, *HYPER, 0.01, True, p, g, m, v)
    op.destroy_adam(107)


@pytest.mark.parametrize("mode", [0, 1])
def test_multi_tensor_adam_is_one_adam_step_over_the_lists(op, mode):
    sizes = (37, 1, 0, 1029)
    ts = [_tensors(n, seed=10 + i) for i, n in enumerate(sizes)]
    twin = [[t.clone() for t in group] for group in ts]
    lists = [[t[0 + k] for t in ts] for k in (1, 0, 2, 3)]  # [grads, params, exp_avgs, exp_avg_sqs]
    noop = torch.zeros(1, dtype=torch.int)
    assert op.multi_tensor_adam(2048 * 32, noop, lists, 1e-3, 0.9, 0.999, 1e-8, 3, mode, 1, 0.01) is None
    op.adam_step([t[0] for t in twin], [t[1] for t in twin], [t[2] for t in twin], [t[3] for t in twin], [], 3,
                 fp32(1e-3), fp32(0.9), fp32(0.999), fp32(1e-8), fp32(0.01), True, mode == 1)
    for a, b in zip(ts, twin, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[2], b[2]) and torch.equal(a[3], b[3])


def test_multi_tensor_adam_rejects_what_deepspeed_never_passes(op):
    p, g, m, v = _tensors(8, seed=6)
    noop = torch.zeros(1, dtype=torch.int)
    with pytest.raises(InvalidArgumentError, match="mode=2 is invalid; accepted: 1 \\(AdamW\\) or 0"):
        op.multi_tensor_adam(1, noop, [[g], [p], [m], [v]], 1e-3, 0.9, 0.999, 1e-8, 1, 2, 1, 0.0)
    with pytest.raises(TensorListsError, match="3 lists of lengths \\[1, 1, 1\\]; accepted: 4 lists"):
        op.multi_tensor_adam(1, noop, [[g], [p], [m]], 1e-3, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)
    with pytest.raises(TensorListsError, match="lengths \\[1, 2, 1, 1\\]"):
        op.multi_tensor_adam(1, noop, [[g], [p, p], [m], [v]], 1e-3, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)
    op.multi_tensor_adam(1, noop, [[], [], [], []], 1e-3, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)  # nothing to do


def test_multi_tensor_adam_updates_a_non_contiguous_parameter(op):
    base = torch.randn(8, 16)
    p = base.t()  # FusedAdam never passes one; DeepSpeed's kernel would write through the strides
    g, m, v = torch.randn(16, 8), torch.zeros(16, 8), torch.zeros(16, 8)
    twin = [p.contiguous(), g.clone(), m.clone(), v.clone()]
    op.multi_tensor_adam(1, None, [[g], [p], [m], [v]], 1e-3, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)
    op.adam_step([twin[0]], [twin[1]], [twin[2]], [twin[3]], [], 1, fp32(1e-3), fp32(0.9), fp32(0.999), fp32(1e-8),
                 0.0, True, True)
    assert torch.equal(p, twin[0]) and torch.equal(base.t(), twin[0]) and torch.equal(m, twin[2])


def test_should_log_logs_the_configuration_and_simd_level(op, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="anyaccel.integrations.deepspeed.abi.adam"):
        assert op.create_adam(108, *HYPER, 0.01, True, True) == 0
    assert f"Adam optimizer #108 is created with {op.isa} arithmetic capability" in caplog.text
    op.destroy_adam(108)
