"""registration: the library check, the fakes (registered without a sys.modules scan) and the fallback kernel."""

from __future__ import annotations

import inspect
import os
import sys
import types
import uuid

import pytest
import torch

from anyaccel.op_builder import CPUAdamBuilder
from anyaccel.op_builder.core import registration
from anyaccel.spec import Function


def _fake_scale(device_type: str, x: torch.Tensor) -> torch.Tensor:
    assert device_type == "cpu"
    return torch.empty_like(x)


@pytest.fixture
def namespace():
    """A fresh op namespace defining ``scale(Tensor x) -> Tensor`` (no kernel)."""
    ns = f"anyaccel_test_{uuid.uuid4().hex[:10]}"
    library = torch.library.Library(ns, "DEF")
    library.define("scale(Tensor x) -> Tensor")
    yield ns
    del library  # unregisters the namespace


def _scale() -> Function:
    return Function("scale", "(Tensor x) -> Tensor", fake=f"{__name__}:_fake_scale")


def test_register_fakes_finds_its_caller_without_scanning_sys_modules(namespace, monkeypatch) -> None:
    key = os.path.normcase(os.path.abspath(registration.__file__))
    monkeypatch.delitem(inspect.modulesbyfile, key, raising=False)
    unmapped = types.ModuleType("anyaccel_test_unmapped")
    unmapped.__file__ = os.path.abspath(f"{uuid.uuid4().hex}.py")  # a scan would map this file
    monkeypatch.setitem(sys.modules, unmapped.__name__, unmapped)
    registration.register_fakes(namespace, [_scale()], "cpu")
    assert inspect.modulesbyfile[key] == registration.__name__
    assert unmapped.__file__ not in inspect.modulesbyfile  # no scan of sys.modules happened
    out = getattr(torch.ops, namespace).scale(torch.empty(3, device="meta"))  # the fake serves meta tensors
    assert out.shape == (3,) and out.device.type == "meta"


def test_verify_functions_names_what_is_missing_or_different() -> None:
    ns = CPUAdamBuilder().load().namespace
    name = CPUAdamBuilder().functions()[0]
    assert registration.verify_functions(ns, [name], {}) == ""
    assert "has no function nope" in registration.verify_functions(ns, [name, "nope"], {})
    assert "was registered as" in registration.verify_functions(ns, [name], {name: f"{ns}::{name}() -> ()"})


def test_the_fallback_kernel_explains_the_call() -> None:
    with pytest.raises(RuntimeError, match="every tensor list is empty"):
        registration._no_kernel("f", "cpu", [], [])
    with pytest.raises(RuntimeError, match=r"runs on cuda tensors, got tensors on cpu"):
        registration._no_kernel("f", "cuda", [torch.ones(1)], 2.0)
