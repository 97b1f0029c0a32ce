"""Every optimizer of the package survives a copy of the whole object (``copy.deepcopy``, ``pickle``,
``torch.save`` / ``torch.load(weights_only=False)``, as ``Trainer`` checkpoints and ``multiprocessing`` do): the
copy steps, and its parameters and state equal those of an un-copied twin given the same gradients.

The pickled state kept only public attributes: ``CPULamb`` and ``FusedLamb`` lost their private trust-ratio
list in the copy and could not step (``AttributeError: ... '_coeffs'``).
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch

from anyaccel.ops.adagrad.cpu import CPUAdagrad
from anyaccel.ops.adam.cpu import CPUAdam
from anyaccel.ops.adam.fused import FusedAdam
from anyaccel.ops.lamb.fused import CPULamb, FusedLamb
from anyaccel.ops.lion.cpu import CPULion
from anyaccel.ops.lion.fused import FusedLion

#: every optimizer class the package exports that runs on CPU tensors
OPTIMIZERS = [CPUAdam, FusedAdam, CPUAdagrad, CPULion, FusedLion, CPULamb, FusedLamb]
#: those with fp32 master weights for 16-bit parameters (``master_weights=True``)
MASTERS = (FusedAdam, FusedLion, CPULamb, FusedLamb)


def _torch_save(opt: torch.optim.Optimizer) -> torch.optim.Optimizer:
    buffer = io.BytesIO()
    torch.save(opt, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


COPIES: dict[str, Callable[[Any], Any]] = {
    "deepcopy": copy.deepcopy,
    "pickle": lambda opt: pickle.loads(pickle.dumps(opt)),
    "torch.save": _torch_save,
}


def _params_of(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in opt.param_groups for p in group["params"]]


def _grads(params: list[torch.Tensor], seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g, dtype=torch.float32).to(p.dtype)


def _make(cls: type, dtype: torch.dtype) -> torch.optim.Optimizer:
    g = torch.Generator().manual_seed(0)
    # odd sizes (a SIMD tail), two groups with their own hyper-parameters
    first = [torch.nn.Parameter(torch.randn(n, generator=g).to(dtype)) for n in (1, 37)]
    second = [torch.nn.Parameter(torch.randn(5, 3, generator=g).to(dtype))]
    kwargs: dict[str, Any] = {"master_weights": True} if dtype != torch.float32 and cls in MASTERS else {}
    return cls([{"params": first}, {"params": second, "lr": 0.003}], lr=0.01, **kwargs)


@pytest.mark.parametrize("how", sorted(COPIES))
@pytest.mark.parametrize("stepped", [True, False], ids=["after-step", "fresh"])
@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__name__)
def test_a_copied_optimizer_steps_like_its_twin(cls: type, stepped: bool, how: str) -> None:
    twin = _make(cls, torch.float32)
    if stepped:
        _grads(_params_of(twin), seed=1)
        twin.step()
    copied = COPIES[how](twin)
    assert copied is not twin and _params_of(copied)[0] is not _params_of(twin)[0]
    for seed in (2, 3):
        for opt in (twin, copied):
            _grads(_params_of(opt), seed)
            opt.step()
    for a, b in zip(_params_of(twin), _params_of(copied), strict=True):
        assert torch.equal(a, b)
        assert twin.state[a].keys() == copied.state[b].keys()
        for key, value in twin.state[a].items():
            other = copied.state[b][key]
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(other)), key
    if isinstance(twin, FusedLamb):
        assert copied.get_lamb_coeffs() == twin.get_lamb_coeffs()


@pytest.mark.parametrize("how", sorted(COPIES))
@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__name__)
def test_a_copied_16_bit_optimizer_steps_like_its_twin(cls: type, how: str) -> None:
    twin = _make(cls, torch.bfloat16)
    _grads(_params_of(twin), seed=1)
    twin.step()
    copied = COPIES[how](twin)
    for opt in (twin, copied):
        _grads(_params_of(opt), seed=2)
        opt.step()
    for a, b in zip(_params_of(twin), _params_of(copied), strict=True):
        assert a.dtype == torch.bfloat16 and torch.equal(a, b)
        for key, value in twin.state[a].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(copied.state[b][key])), key


def test_the_last_step_trust_ratios_survive_a_copy() -> None:
    twin = _make(CPULamb, torch.float32)
    _grads(_params_of(twin), seed=1)
    twin.step()
    ratios = twin.get_lamb_coeffs()
    assert len(ratios) == 3
    for how, copy_fn in COPIES.items():
        assert copy_fn(twin).get_lamb_coeffs() == ratios, how


def test_a_pickle_without_the_trust_ratios_still_steps() -> None:
    """A pickle written before the ratios were kept (no ``_coeffs``) loads as an optimizer with no ratios yet."""
    opt = _make(CPULamb, torch.float32)
    state = opt.__getstate__()
    del state["_coeffs"], state["_grad_scales"]
    old = CPULamb.__new__(CPULamb)
    old.__setstate__(copy.deepcopy(state))
    assert old.get_lamb_coeffs() == []
    _grads(_params_of(old), seed=1)
    old.step()
    assert len(old.get_lamb_coeffs()) == 3
