"""ZenFlow's overlapped CPU Adam (``anyaccel/integrations/deepspeed/abi/zenflow.py``) driven as DeepSpeed 0.19.8
drives it: an optimizer process running ``zenflow_adam_run_worker`` on shared tensors, the training process
submitting steps through the shared control block; every step equals ``adam_update`` on a mirror, bit for bit."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
import torch

import anyaccel
from anyaccel.integrations.deepspeed.abi.common import InvalidArgumentError, UnknownOptimizerIdError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ZenFlow's control is Linux-only")


def _worker(param: torch.Tensor, grads: list, exp_avgs: list, exp_avg_sqs: list, stale: torch.Tensor,
            ctrl: torch.Tensor, ready: Any, affinity: list[int]) -> None:
    """The optimizer process (``zenflow_utils.zenflow_optimizer_process``'s calls)."""
    op = anyaccel.get_accelerator().create_op_builder("CPUAdamBuilder").load()
    op.create_adam(0, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, False)
    handle = op.zenflow_adam_create(0, affinity)
    op.zenflow_adam_register_group(handle, param, grads[0], grads[1], exp_avgs[0], exp_avgs[1], exp_avg_sqs[0],
                                   exp_avg_sqs[1], stale)
    ready.set()
    op.zenflow_adam_run_worker(handle, ctrl.data_ptr())
    op.zenflow_adam_destroy(handle)
    op.destroy_adam(0)


@pytest.mark.slow
def test_cross_process_steps_equal_adam_update_bit_for_bit(_ops_cache_dir: str):
    import torch.multiprocessing as mp

    op = anyaccel.get_accelerator().create_op_builder("CPUAdamBuilder").load()
    lr, beta1, beta2, eps, wd = 1e-3, 0.9, 0.999, 1e-8, 0.0
    n = 100003  # not a multiple of any SIMD width
    ctrl = torch.zeros(op.zenflow_adam_ctrl_size(), dtype=torch.uint8).share_memory_()
    op.zenflow_adam_ctrl_init(ctrl.data_ptr(), 1)
    torch.manual_seed(0)
    param = torch.randn(n).share_memory_()
    grads = [torch.zeros(n).share_memory_() for _ in range(2)]
    exp_avgs = [torch.zeros(n).share_memory_() for _ in range(2)]
    exp_avg_sqs = [torch.zeros(n).share_memory_() for _ in range(2)]
    stale = torch.zeros(n).share_memory_()
    op.create_adam(1, lr, beta1, beta2, eps, wd, True, False)
    mirror = param.clone()
    mirror_m = [t.clone() for t in exp_avgs]
    mirror_v = [t.clone() for t in exp_avg_sqs]
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_worker, args=(param, grads, exp_avgs, exp_avg_sqs, stale, ctrl, ready,
                                             list(range(min(2, os.cpu_count() or 1)))))
    proc.start()
    try:
        assert ready.wait(timeout=300), "the optimizer process did not start"
        assert op.zenflow_adam_wait(ctrl.data_ptr(), 0.05) is False  # nothing submitted: a bounded wait
        for step in range(1, 6):
            now = step & 1
            grad = torch.randn(n)
            grads[now].copy_(grad)
            op.zenflow_adam_submit(ctrl.data_ptr(), now, step, [lr], [beta1], [beta2], [eps], [wd], [1])
            assert op.zenflow_adam_wait(ctrl.data_ptr(), 120.0), f"step {step} timed out"
            op.adam_update(1, step, lr, beta1, beta2, eps, wd, True, mirror, grad.clone(), mirror_m[now],
                           mirror_v[now])
            assert torch.equal(param, mirror) and torch.equal(stale, mirror), step
            assert torch.equal(exp_avgs[now], mirror_m[now]) and torch.equal(exp_avg_sqs[now], mirror_v[now])
        op.zenflow_adam_ctrl_exit(ctrl.data_ptr())
        proc.join(timeout=60)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=10)
        op.destroy_adam(1)


def test_handles_and_arguments_are_checked(_ops_cache_dir: str):
    op = anyaccel.get_accelerator().create_op_builder("CPUAdamBuilder").load()
    with pytest.raises(UnknownOptimizerIdError, match="zenflow_adam_create: optimizer id 424242"):
        op.zenflow_adam_create(424242, [0])
    op.create_adam(77, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, False)
    handle = op.zenflow_adam_create(77, [0])
    with pytest.raises(InvalidArgumentError, match="param=.*accepted: a contiguous tensor"):
        t = torch.zeros(4, 4).t()
        op.zenflow_adam_register_group(handle, t, t, t, t, t, t, t, None)
    op.zenflow_adam_destroy(handle)
    with pytest.raises(InvalidArgumentError, match="handle"):
        op.zenflow_adam_register_group(handle, torch.zeros(2), *[torch.zeros(2)] * 6, None)
    ctrl = torch.zeros(op.zenflow_adam_ctrl_size(), dtype=torch.uint8)
    with pytest.raises(InvalidArgumentError, match="num_groups=1025"):
        op.zenflow_adam_ctrl_init(ctrl.data_ptr(), 1025)
    op.zenflow_adam_ctrl_init(ctrl.data_ptr(), 1)
    with pytest.raises(InvalidArgumentError, match="lists of one equal length"):
        op.zenflow_adam_submit(ctrl.data_ptr(), 0, 1, [1e-3], [0.9, 0.9], [0.999], [1e-8], [0.0], [1])
    op.destroy_adam(77)
