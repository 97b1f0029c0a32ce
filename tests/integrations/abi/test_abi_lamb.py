"""DeepSpeed's FusedLamb module function ``lamb(...)`` on anyaccel's CPU LAMB build
(``anyaccel/integrations/deepspeed/abi/lamb.py``), called as DeepSpeed's ``FusedLamb.step`` calls it
(``deepspeed/ops/lamb/fused_lamb.py``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import anyaccel
from anyaccel.integrations.deepspeed.abi.common import InvalidArgumentError, fp32


@pytest.fixture(scope="module")
def op(_ops_cache_dir: str) -> Any:
    builder = anyaccel.get_accelerator().create_op_builder("FusedLambBuilder")
    assert type(builder).__name__ == "FusedLambBuilder" and builder.NAME == "cpu_lamb"
    return builder.load()


def _tensors(n: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=gen), torch.zeros(n), torch.zeros(n), torch.randn(n, generator=gen)]


@pytest.mark.parametrize("eps_mode", [0, 1])
def test_lamb_is_lamb_step_and_returns_the_trust_ratio(op, eps_mode):
    p, m, v, g = _tensors(1029, seed=eps_mode)
    twin = [t.clone() for t in (p, m, v, g)]
    coeff = op.lamb(p, torch.tensor([], dtype=torch.float), m, v, g, 1e-3, 0.9, 0.999, 10.0, 0.01, 1e-6, 1.0, 1,
                    eps_mode, 1, 0.01)
    ref = torch.zeros(1)
    op.lamb_step([twin[0]], [twin[3]], [twin[1]], [twin[2]], [], ref, 1, fp32(1e-3), fp32(0.9), fp32(0.999),
                 fp32(1e-6), fp32(0.01), 1.0, 10.0, fp32(0.01), True, eps_mode == 0)
    assert coeff.shape == (1,) and coeff.dtype == torch.float32 and torch.equal(coeff, ref)
    assert torch.equal(p, twin[0]) and torch.equal(m, twin[1]) and torch.equal(v, twin[2])
    assert 0.01 <= coeff.item() <= 10.0


def test_lamb_writes_the_16_bit_copy(op):
    p, m, v, _ = _tensors(100, seed=3)
    g = torch.randn(100).to(torch.float16)
    copy = p.to(torch.float16)
    op.lamb(p, copy, m, v, g, 1e-3, 0.9, 0.999, 10.0, 0.01, 1e-8, 1.0, 1, 1, 1, 0.0)
    assert torch.equal(copy, p.to(torch.float16))


def test_lamb_rejects_an_unknown_eps_mode(op):
    p, m, v, g = _tensors(4, seed=4)
    with pytest.raises(InvalidArgumentError, match="lamb: eps_mode=2 is invalid"):
        op.lamb(p, torch.tensor([]), m, v, g, 1e-3, 0.9, 0.999, 10.0, 0.01, 1e-8, 1.0, 1, 2, 1, 0.0)
