"""Fixtures for the accelerator tests: a clean selection state and fake torch device modules."""

from __future__ import annotations

import contextlib
import random
import types
from typing import Any

import pytest
import torch

from anyaccel.accelerator import reset_accelerator
from anyaccel.accelerator.selection import OVERRIDE_ENVS, STRICT_ENV


@pytest.fixture(autouse=True)
def clean_selection(monkeypatch: pytest.MonkeyPatch):
    """Every test starts and ends with no cached accelerator and no override variables."""
    for env in (*OVERRIDE_ENVS, STRICT_ENV):
        monkeypatch.delenv(env, raising=False)
    reset_accelerator()
    yield
    reset_accelerator()


class FakeDeviceModule(types.ModuleType):
    """A stand-in for ``torch.cuda``/``torch.xpu``/``torch.npu`` that records calls and returns random figures.

    Figures are drawn fresh per instance so tests compare against the module's own values, never constants.
    """

    def __init__(self, name: str, count: int = 2, graph_class: str | None = None) -> None:
        super().__init__(f"torch.{name}")
        rng = random.Random()
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self._count = count
        self._current = 0
        self.figures: dict[str, int] = {
            key: rng.randrange(1 << 20, 1 << 34)
            for key in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                        "total_memory", "free_memory", "initial_seed")
        }
        self.default_generators = tuple(torch.Generator() for _ in range(max(count, 1)))
        self.rng_state = torch.randint(0, 255, (16,), dtype=torch.uint8)
        self.bf16 = rng.random() < 0.5
        self.capability = (rng.choice([6, 7, 8, 9]), 0)
        self.nvtx = types.SimpleNamespace(range_push=self._range_push, range_pop=self._range_pop)
        self.amp = types.SimpleNamespace(name=f"{name}.amp")
        self.lazy_callbacks: list[Any] = []
        if graph_class:
            setattr(self, graph_class, type(graph_class, (), {"replay": lambda g: self._record("replay", g)}))

    def _record(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))

    class Stream:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.args = args

    class Event:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.kwargs = kwargs

    def is_available(self) -> bool:
        return self._count > 0

    def device_count(self) -> int:
        return self._count

    def current_device(self) -> int:
        return self._current

    def set_device(self, index: int) -> None:
        self._record("set_device", index)
        self._current = index

    def synchronize(self, *args: Any) -> None:
        self._record("synchronize", *args)

    def get_rng_state(self, *args: Any) -> torch.Tensor:
        self._record("get_rng_state", *args)
        return self.rng_state

    def set_rng_state(self, state: torch.Tensor, *args: Any) -> None:
        self._record("set_rng_state", state, *args)

    def manual_seed(self, seed: int) -> None:
        self._record("manual_seed", seed)

    def manual_seed_all(self, seed: int) -> None:
        self._record("manual_seed_all", seed)

    def initial_seed(self) -> int:
        return self.figures["initial_seed"]

    @contextlib.contextmanager
    def stream(self, s: Any):
        self._record("stream", s)
        yield s

    def current_stream(self, *args: Any) -> Any:
        self._record("current_stream", *args)
        return self.Stream("current", *args)

    def default_stream(self, *args: Any) -> Any:
        self._record("default_stream", *args)
        return self.Stream("default", *args)

    def empty_cache(self) -> None:
        self._record("empty_cache")

    def _figure(name: str):  # noqa: N805 (builds methods)
        def get(self: FakeDeviceModule, *args: Any) -> int:
            self._record(name, *args)
            return self.figures[name]

        return get

    memory_allocated = _figure("memory_allocated")
    max_memory_allocated = _figure("max_memory_allocated")
    memory_reserved = _figure("memory_reserved")
    max_memory_reserved = _figure("max_memory_reserved")

    def memory_stats(self, *args: Any) -> dict[str, int]:
        self._record("memory_stats", *args)
        return {"allocated_bytes.all.current": self.figures["memory_allocated"]}

    def reset_peak_memory_stats(self, *args: Any) -> None:
        self._record("reset_peak_memory_stats", *args)

    def get_device_properties(self, *args: Any) -> Any:
        self._record("get_device_properties", *args)
        return types.SimpleNamespace(total_memory=self.figures["total_memory"])

    def mem_get_info(self, *args: Any) -> tuple[int, int]:
        self._record("mem_get_info", *args)
        return self.figures["free_memory"], self.figures["total_memory"]

    def is_bf16_supported(self) -> bool:
        return self.bf16

    def get_device_capability(self, *args: Any) -> tuple[int, int]:
        return self.capability

    def _lazy_call(self, callback: Any) -> None:
        self.lazy_callbacks.append(callback)

    def is_current_stream_capturing(self) -> bool:
        return False

    @contextlib.contextmanager
    def graph(self, g: Any, pool: Any = None, stream: Any = None):
        self._record("graph", g, pool, stream)
        yield

    def _range_push(self, msg: str) -> int:
        self._record("range_push", msg)
        return 1

    def _range_pop(self) -> int:
        self._record("range_pop")
        return 0


@pytest.fixture
def fake_module_factory(monkeypatch: pytest.MonkeyPatch):
    """``install(name, count, graph_class)`` puts a :class:`FakeDeviceModule` at ``torch.<name>``."""

    def install(name: str, count: int = 2, graph_class: str | None = None) -> FakeDeviceModule:
        module = FakeDeviceModule(name, count, graph_class)
        monkeypatch.setattr(torch, name, module, raising=False)
        return module

    return install


@pytest.fixture
def fake_mps(monkeypatch: pytest.MonkeyPatch):
    """A usable ``torch.mps`` on any machine: (memory figures dict, list recording synchronize calls)."""
    figures = {k: random.randrange(1 << 20, 1 << 30) for k in ("allocated", "driver")}
    figures["recommended"] = figures["driver"] + random.randrange(1 << 20, 1 << 30)
    synced = []
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: figures["allocated"])
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: figures["driver"])
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: figures["recommended"])
    monkeypatch.setattr(torch.mps, "synchronize", lambda: synced.append(True))
    return figures, synced
