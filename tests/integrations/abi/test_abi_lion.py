"""DeepSpeed's CPU Lion and FusedLion module functions on anyaccel's CPU Lion build
(``anyaccel/integrations/deepspeed/abi/lion.py``), without DeepSpeed, called as ``DeepSpeedCPULion`` and
``FusedLion`` call them (``deepspeed/ops/lion/cpu_lion.py``, ``fused_lion.py``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import anyaccel
from anyaccel.integrations.deepspeed.abi.common import TensorListsError, UnknownOptimizerIdError, fp32


@pytest.fixture(scope="module")
def op(_ops_cache_dir: str) -> Any:
    return anyaccel.get_accelerator().create_op_builder("CPULionBuilder").load()


def _tensors(n: int, seed: int, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=gen).to(dtype), torch.randn(n, generator=gen).to(dtype),
            (torch.randn(n, generator=gen) * 0.1).to(torch.float32)]


def test_lifecycle_and_update_equal_lion_step(op):
    assert {"create_lion", "lion_update", "destroy_lion", "multi_tensor_lion"} <= set(op.adapted_functions)
    assert op.create_lion(201, 1e-4, 0.9, 0.99, 0.01, False) == 0
    p, g, m = _tensors(1029, seed=0)
    twin = [t.clone() for t in (p, g, m)]
    assert op.lion_update(201, 1, 1e-4, 0.9, 0.99, 0.01, p, g, m) == 0
    op.lion_step([twin[0]], [twin[1]], [twin[2]], [], fp32(1e-4), fp32(0.9), fp32(0.99), fp32(0.01))
    assert torch.equal(p, twin[0]) and torch.equal(m, twin[2])
    assert op.destroy_lion(201) == 0 and op.destroy_lion(201) == 0
    with pytest.raises(UnknownOptimizerIdError, match="lion_update: optimizer id 201"):
        op.lion_update(201, 2, 1e-4, 0.9, 0.99, 0.01, p, g, m)


def test_multi_tensor_lion_has_fused_lions_signature(op):
    ts = [_tensors(n, seed=n, dtype=torch.bfloat16) for n in (37, 1, 1029)]
    for t in ts:
        t[2] = t[2].to(torch.bfloat16)  # FusedLion's state has the parameter dtype
    twin = [[t.clone() for t in group] for group in ts]
    lists = [[t[1] for t in ts], [t[0] for t in ts], [t[2] for t in ts]]  # [grads, params, exp_avgs]
    assert op.multi_tensor_lion(2048 * 32, torch.zeros(1, dtype=torch.int), lists, 1e-4, 0.9, 0.99, 4, 0.0) is None
    op.lion_step([t[0] for t in twin], [t[1] for t in twin], [t[2] for t in twin], [], fp32(1e-4), fp32(0.9),
                 fp32(0.99), 0.0)
    for a, b in zip(ts, twin, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[2], b[2])
    with pytest.raises(TensorListsError, match="accepted: 3 lists \\[grads, params, exp_avgs\\]"):
        op.multi_tensor_lion(1, None, lists[:2], 1e-4, 0.9, 0.99, 1, 0.0)


def test_fused_lion_resolves_on_the_cpu_accelerator_to_the_cpu_build(op):
    builder = anyaccel.get_accelerator().create_op_builder("FusedLionBuilder")
    assert type(builder).__name__ == "FusedLionBuilder" and builder.NAME == "cpu_lion"
    assert builder.load() is op
