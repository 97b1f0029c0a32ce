"""Fixtures for the ops tests: one private kernel cache per session, the loaded host ops, the portable
("pycpu") implementations of the fused optimizers for CPU tensors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from anyaccel.op_builder.core.loaded_ops import LOADED_OPS
from anyaccel.ops import python_ops, registry
from anyaccel.ops.adam import npu as npu_adam
from anyaccel.ops.adam.spec import SPEC as ADAM
from anyaccel.ops.lion import npu as npu_lion
from anyaccel.ops.lion.spec import SPEC as LION


@pytest.fixture(scope="session", autouse=True)
def _ops_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Points ``ANYACCEL_CACHE_DIR`` at a session temporary directory (each op compiles once per ISA)."""
    cache_dir = str(tmp_path_factory.mktemp("anyaccel_cache"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ANYACCEL_CACHE_DIR", cache_dir)
        mp.delenv("ANYACCEL_CPU_ISA", raising=False)
        mp.delenv("ANYACCEL_IMPL_ADAM", raising=False)
        mp.delenv("ANYACCEL_IMPL_LION", raising=False)
        yield cache_dir


@pytest.fixture(scope="session")
def cpu_adam_module(_ops_cache_dir: str) -> Any:
    """The ``cpu_adam`` op module for the ISA level this CPU selects by default."""
    from anyaccel.op_builder import CPUAdamBuilder

    return CPUAdamBuilder().load()


@pytest.fixture(scope="session")
def cpu_lion_module(_ops_cache_dir: str) -> Any:
    """The ``cpu_lion`` op module for the ISA level this CPU selects by default."""
    from anyaccel.op_builder import CPULionBuilder

    return CPULionBuilder().load()


@pytest.fixture
def python_impls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A "pycpu" implementation of both families for the CPU (the NPU code on torch's foreach ops)."""
    registry.implementations("adam")  # built-ins registered
    monkeypatch.setattr(registry, "_implementations",
                        {op: dict(rows) for op, rows in registry._implementations.items()})
    LOADED_OPS.clear()
    monkeypatch.setattr(npu_adam, "ascend_kernel", lambda: None)
    for spec, fn, name in ((ADAM, npu_adam.adam_step, "adam_step"), (LION, npu_lion.lion_step, "lion_step")):
        ns = f"anyaccel_test_fused_opt_{spec.family}"
        registry.register(registry.RegisteredImplementation(
            spec.family, "pycpu", 0, ("cpu",), lambda: (True, ""),
            lambda spec=spec, ns=ns, fn=fn, name=name: python_ops.define_custom_ops(spec, ns, {name: fn}, ("cpu",),
                                                                                    "cpu")))
