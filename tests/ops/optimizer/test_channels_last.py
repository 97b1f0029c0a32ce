"""Channels-last parameters (``memory_format=torch.channels_last`` / ``channels_last_3d``, as a convolutional
model after ``model.to(memory_format=...)`` has them) are updated like torch.optim updates them.

The optimizers used to refuse them as "not contiguous" while torch.optim accepts them. The kernels update
elements by position, so each channels-last parameter, its gradient (converted when it comes in another
format) and its state tensors (made in the parameter's format, as torch's ``zeros_like``) are passed as
contiguous views in memory order.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from anyaccel.ops.adagrad.cpu import CPUAdagrad
from anyaccel.ops.adam.cpu import CPUAdam
from anyaccel.ops.adam.fused import FusedAdam
from anyaccel.ops.lamb.fused import CPULamb, FusedLamb
from anyaccel.ops.lion.cpu import CPULion
from anyaccel.ops.lion.fused import FusedLion

FORMATS = {4: torch.channels_last, 5: torch.channels_last_3d}
SHAPES = [(2, 3, 5, 7), (1, 1, 1, 1), (3, 17, 2, 9), (2, 3, 4, 5, 3)]


def _grads(shape: tuple[int, ...], steps: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(steps)]


def _layout(t: torch.Tensor, step: int) -> torch.Tensor:
    """Gradients alternate between the channels-last and the contiguous format (autograd may give either)."""
    return t.contiguous(memory_format=FORMATS[t.dim()]) if step % 2 == 0 else t.contiguous()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize(("cls", "reference", "kwargs"), [
    (CPUAdam, torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}),
    (CPUAdam, torch.optim.Adam, {"lr": 0.01, "weight_decay": 0.1, "adamw_mode": False}),
    (FusedAdam, torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}),
    (CPUAdagrad, torch.optim.Adagrad, {"lr": 0.05, "weight_decay": 0.01}),
], ids=["CPUAdam-AdamW", "CPUAdam-Adam", "FusedAdam-AdamW", "CPUAdagrad"])
def test_a_channels_last_parameter_is_updated_as_torch_optim_does(cls: type, reference: type,
                                                                  kwargs: dict[str, Any], shape: tuple[int, ...]
                                                                  ) -> None:
    g = torch.Generator().manual_seed(0)
    start = torch.randn(shape, generator=g, dtype=torch.float64)
    ours = torch.nn.Parameter(start.float().contiguous(memory_format=FORMATS[len(shape)]))
    theirs = torch.nn.Parameter(start.clone())
    opt = cls([ours], **kwargs)
    ref_kwargs = {k: v for k, v in kwargs.items() if k != "adamw_mode"}
    ref = reference([theirs], **ref_kwargs)
    for step, grad in enumerate(_grads(shape, 4, seed=1)):
        ours.grad = _layout(grad.float(), step)
        theirs.grad = grad.clone()
        opt.step()
        ref.step()
    assert ours.is_contiguous(memory_format=FORMATS[len(shape)])  # updated in place, format kept
    torch.testing.assert_close(ours.detach().double(), theirs.detach(), rtol=1e-5, atol=1e-6)
    for key, value in opt.state[ours].items():
        if key != "step":
            assert value.is_contiguous(memory_format=FORMATS[len(shape)]), key
            ref_key = "sum" if reference is torch.optim.Adagrad else key  # torch's name of Adagrad's accumulator
            torch.testing.assert_close(value.double(), ref.state[theirs][ref_key], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cls", [CPULion, FusedLion, CPULamb, FusedLamb, CPUAdam], ids=lambda c: c.__name__)
def test_a_channels_last_parameter_steps_like_its_contiguous_twin(cls: type, dtype: torch.dtype) -> None:
    """Families torch.optim lacks (Lion, LAMB): the channels-last parameter ends equal to a contiguous twin."""
    shape = (3, 5, 4, 6)
    g = torch.Generator().manual_seed(2)
    start = torch.randn(shape, generator=g).to(dtype)
    last = torch.nn.Parameter(start.contiguous(memory_format=torch.channels_last))
    flat = torch.nn.Parameter(start.clone())
    kwargs: dict[str, Any] = {"master_weights": True} if dtype != torch.float32 and cls in (FusedLion, FusedLamb,
                                                                                             CPULamb) else {}
    opts = [cls([last], lr=0.01, **kwargs), cls([flat], lr=0.01, **kwargs)]
    for step, grad in enumerate(_grads(shape, 3, seed=3)):
        last.grad = _layout(grad.to(dtype), step)
        flat.grad = grad.to(dtype)
        for opt in opts:
            opt.step()
    torch.testing.assert_close(last.detach().float(), flat.detach().float(), rtol=1e-6, atol=1e-6)
    assert last.is_contiguous(memory_format=torch.channels_last)


def test_a_torch_state_dict_of_a_channels_last_parameter_loads_and_continues() -> None:
    shape = (2, 4, 3, 3)
    g = torch.Generator().manual_seed(4)
    start = torch.randn(shape, generator=g)
    theirs = torch.nn.Parameter(start.clone().contiguous(memory_format=torch.channels_last))
    ref = torch.optim.AdamW([theirs], lr=0.01)
    grads = _grads(shape, 4, seed=5)
    theirs.grad = grads[0].float().contiguous(memory_format=torch.channels_last)
    ref.step()
    ours = torch.nn.Parameter(theirs.detach().clone())
    opt = CPUAdam([ours], lr=0.01)
    opt.load_state_dict(ref.state_dict())
    assert opt.state[ours]["exp_avg"].is_contiguous(memory_format=torch.channels_last)
    for grad in grads[1:]:
        theirs.grad = grad.float().contiguous(memory_format=torch.channels_last)
        ours.grad = grad.float()
        ref.step()
        opt.step()
    torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=1e-5, atol=1e-6)


def test_a_strided_view_is_still_refused() -> None:
    p = torch.nn.Parameter(torch.randn(6, 4).t())
    with pytest.raises(ValueError, match="is not contiguous nor channels-last"):
        CPUAdam([p])
