"""Fixtures for the ops tests: one private kernel cache per session, the loaded host ops."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


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
