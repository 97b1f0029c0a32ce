"""The optimizer front end on a CUDA GPU: device-resident plans, storage moves, capturable steps in a graph.

Run on the device machine: ``python -m pytest -m gpu tests/ops/test_optimizer_gpu.py``. Each optimizer is
compared with the same optimizer on the CPU implementation (same math, same data), over steps where the
plan is reused, rebuilt after gradients are reallocated, and rebuilt after a parameter's storage moves. The
CUDA-graph test captures forward, backward and ``FusedAdam(capturable=True).step()`` and replays it against
an eager run.
"""

from __future__ import annotations

import pytest
import torch

from anyaccel.ops.adam.fused import FusedAdam
from anyaccel.ops.lamb.fused import FusedLamb
from anyaccel.ops.lion.fused import FusedLion

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SIZES = [1, 7, 4096, 4097, 33, 100_003] + [257] * 200


def _twins(dtype: torch.dtype, seed: int) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    g = torch.Generator().manual_seed(seed)
    host = [torch.randn(n, generator=g).to(dtype) for n in SIZES]
    return ([torch.nn.Parameter(t.cuda()) for t in host], [torch.nn.Parameter(t.clone()) for t in host])


def _set_grads(gpu: list[torch.Tensor], cpu: list[torch.Tensor], seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for a, b in zip(gpu, cpu, strict=True):
        grad = torch.randn(b.shape, generator=g).to(b.dtype)
        b.grad = grad
        a.grad = grad.cuda()


@pytest.mark.parametrize("cls", [FusedAdam, FusedLion, FusedLamb])
@pytest.mark.parametrize(("dtype", "master"), [(torch.float32, False), (torch.bfloat16, False),
                                               (torch.bfloat16, True)])
def test_planned_steps_match_the_cpu_implementation(cls: type, dtype: torch.dtype, master: bool) -> None:
    gpu, cpu = _twins(dtype, seed=1)
    opt_gpu = cls(gpu, lr=1e-2, weight_decay=0.01, master_weights=master, impl="cuda")
    opt_cpu = cls(cpu, lr=1e-2, weight_decay=0.01, master_weights=master)
    for step in range(6):
        _set_grads(gpu, cpu, step)
        if step == 4:  # a parameter's storage moves (module.to() does this): the plan must follow it
            gpu[3].data = gpu[3].data.clone()
        opt_gpu.step()
        opt_cpu.step()
        if step == 0:
            assert all(b.plan is not None for b in opt_gpu._plans[0].buckets), "the CUDA plan path was not used"
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for a, b in zip(gpu, cpu, strict=True):
        torch.testing.assert_close(a.detach().cpu().float(), b.detach().float(), rtol=tol, atol=tol)
        torch.testing.assert_close(opt_gpu.state[a]["exp_avg"].cpu().float(), opt_cpu.state[b]["exp_avg"].float(),
                                   rtol=tol, atol=tol)


def test_gradients_kept_across_steps_reuse_the_plan() -> None:
    gpu, _ = _twins(torch.float32, seed=2)
    opt = FusedAdam(gpu, impl="cuda", set_grad_none=False)
    for p in gpu:
        p.grad = torch.randn_like(p)
    opt.step()
    table = opt._plans[0].buckets[0].plan
    for p in gpu:
        p.grad.normal_()
    opt.step()
    assert opt._plans[0].buckets[0].plan is table


@pytest.mark.parametrize("cls", [FusedAdam, FusedLion, FusedLamb])
def test_kept_gradients_with_new_values_and_a_swapped_storage(cls: type) -> None:
    """Gradient objects kept across steps (the steady path) with new values each step, and at step 3 one
    gradient's storage swapped in place (``g.data = x``): the device table must follow, as the CPU run does."""
    gpu, cpu = _twins(torch.float32, seed=3)
    opt_gpu, opt_cpu = cls(gpu, lr=1e-2, impl="cuda"), cls(cpu, lr=1e-2)
    for a, b in zip(gpu, cpu, strict=True):
        a.grad, b.grad = torch.zeros_like(a), torch.zeros_like(b)
    for step in range(5):
        g = torch.Generator().manual_seed(100 + step)
        for a, b in zip(gpu, cpu, strict=True):
            values = torch.randn(b.shape, generator=g)
            b.grad.copy_(values)
            if step == 3 and a is gpu[5]:
                a.grad.data = values.cuda()
            else:
                a.grad.copy_(values)
        opt_gpu.step()
        opt_cpu.step()
    for a, b in zip(gpu, cpu, strict=True):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-5, atol=1e-5)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8)).cuda()


def test_capturable_step_replays_in_a_cuda_graph_like_eager() -> None:
    x = torch.randn(32, 64, device="cuda")
    y = torch.randn(32, 8, device="cuda")
    eager, graphed = _model(), _model()
    lr_eager = torch.tensor(1e-2, device="cuda")
    lr_graph = torch.tensor(1e-2, device="cuda")
    opt_eager = FusedAdam(eager.parameters(), lr=lr_eager, capturable=True, set_grad_none=False, impl="cuda")
    opt_graph = FusedAdam(graphed.parameters(), lr=lr_graph, capturable=True, set_grad_none=False, impl="cuda")

    def train_step(model: torch.nn.Module, opt: FusedAdam) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up: state, plans and the autograd graph outside the capture
            opt_graph.zero_grad(set_to_none=False)
            train_step(graphed, opt_graph)
    torch.cuda.current_stream().wait_stream(side)
    for _ in range(3):
        opt_eager.zero_grad(set_to_none=False)
        train_step(eager, opt_eager)

    graph = torch.cuda.CUDAGraph()
    opt_graph.zero_grad(set_to_none=False)
    with torch.cuda.graph(graph):
        static_loss = train_step(graphed, opt_graph)
    for i in range(5):
        lr_graph.fill_(1e-2 / (i + 1))  # a schedule under the graph: the lr tensor is updated in place
        lr_eager.fill_(1e-2 / (i + 1))
        for p in graphed.parameters():
            p.grad.zero_()
        graph.replay()
        opt_eager.zero_grad(set_to_none=False)
        eager_loss = train_step(eager, opt_eager)
        torch.testing.assert_close(static_loss, eager_loss, rtol=1e-5, atol=1e-6)
    for a, b in zip(graphed.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    step = next(iter(opt_graph.state.values()))["step"]
    assert step.device.type == "cuda" and int(step.item()) == 3 + 5  # the capture itself runs nothing


def test_non_capturable_step_refuses_to_be_captured() -> None:
    model = _model()
    opt = FusedAdam(model.parameters(), impl="cuda", set_grad_none=False)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="capturable=True to capture steps"), torch.cuda.graph(graph):
        opt.step()
