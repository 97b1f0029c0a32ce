"""DeepSpeed's CPU Adagrad module functions on anyaccel's CPU Adagrad build
(``anyaccel/integrations/deepspeed/abi/adagrad.py``), called as ``DeepSpeedCPUAdagrad`` calls them
(``deepspeed/ops/adagrad/cpu_adagrad.py``), dense and sparse."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import anyaccel
from anyaccel.integrations.deepspeed.abi.common import UnknownOptimizerIdError, fp32


@pytest.fixture(scope="module")
def op(_ops_cache_dir: str) -> Any:
    return anyaccel.get_accelerator().create_op_builder("CPUAdagradBuilder").load()


def test_lifecycle_and_update_equal_adagrad_step(op):
    assert op.adapted_functions == ("create_adagrad", "adagrad_update", "destroy_adagrad")
    assert op.create_adagrad(301, 1e-2, 1e-10, 0.01, False) == 0
    gen = torch.Generator().manual_seed(0)
    p, g, v = torch.randn(1029, generator=gen), torch.randn(1029, generator=gen), torch.zeros(1029)
    twin = [t.clone() for t in (p, g, v)]
    assert op.adagrad_update(301, 1, 1e-2, 1e-10, 0.01, p, g, v) == 0
    op.adagrad_step([twin[0]], [twin[1]], [twin[2]], [], fp32(1e-2), fp32(1e-10), fp32(0.01))
    assert torch.equal(p, twin[0]) and torch.equal(v, twin[2]) and torch.equal(g, twin[1])  # g is not written
    assert op.destroy_adagrad(301) == 0 and op.destroy_adagrad(301) == 0
    with pytest.raises(UnknownOptimizerIdError, match="create_adagrad\\(optimizer_id, lr, eps, weight_decay"):
        op.adagrad_update(301, 2, 1e-2, 1e-10, 0.0, p, g, v)


@pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")  # inside torch.optim
def test_deepspeeds_sparse_path_matches_torch_adagrad(op):
    """DeepSpeedCPUAdagrad.step with a sparse gradient: adagrad_update on the values of sparse_mask, then
    scatter back, as its source does; torch.optim.Adagrad's sparse update is the reference."""
    op.create_adagrad(302, 1e-2, 1e-10, 0.0, False)
    gen = torch.Generator().manual_seed(1)
    param = torch.randn(64 * 16, generator=gen)
    ref = torch.nn.Parameter(param.clone())
    ref_opt = torch.optim.Adagrad([ref], lr=1e-2, eps=1e-10)
    exp_avg_sq = torch.zeros_like(param)
    for step in range(1, 6):
        idx = torch.randint(0, 64 * 16, (40,), generator=gen).unique()
        grad = torch.sparse_coo_tensor(idx.unsqueeze(0), torch.randn(idx.numel(), generator=gen), (64 * 16,),
                                       check_invariants=True).coalesce()
        sparse_param = param.sparse_mask(grad)
        sparse_sq = exp_avg_sq.sparse_mask(grad)
        values, sq_values = sparse_param.values(), sparse_sq.values()
        op.adagrad_update(302, step, 1e-2, 1e-10, 0.0, values, grad.values(), sq_values)
        param[sparse_param.indices()] = values
        exp_avg_sq[sparse_sq.indices()] = sq_values
        ref.grad = grad
        ref_opt.step()
    torch.testing.assert_close(param, ref.detach(), rtol=1e-6, atol=1e-7)
    op.destroy_adagrad(302)
