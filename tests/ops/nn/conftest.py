"""Fixtures of the model-op tests (parametrisation in :mod:`anyaccel.testing.nn_impls`): on a machine
without a CUDA device the Triton kernels run in Triton's interpreter."""

from __future__ import annotations

import pytest
import torch

from anyaccel.testing import nn_impls

nn_impls.use_interpreter_without_gpu()


@pytest.fixture(params=nn_impls.impl_params())
def device_impl(request: pytest.FixtureRequest) -> tuple[str, str]:
    """One (device, implementation) pair."""
    return request.param


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
