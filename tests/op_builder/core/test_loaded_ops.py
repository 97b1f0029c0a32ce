"""The process's one table of loaded ops (anyaccel/op_builder/core/loaded_ops.py): one entry per load, a failed
build recorded once, one reset, and registrations with torch that outlive it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from opb_helpers import HERE, child_env, run_json, unique
from toy_builder import ToyBuilder

from anyaccel.op_builder.core import manifest as mf
from anyaccel.op_builder.core.loaded_ops import (
    LOADED_OPS,
    LoadedOps,
    NativeLibrary,
    implementation_key,
    is_implementation_key,
)
from anyaccel.op_builder.errors import DIAGNOSES, BuildError


def _counting(result: Any, calls: list[int]) -> Any:
    def loader() -> Any:
        calls.append(1)
        return result

    return loader


def test_a_key_is_loaded_once_and_then_read() -> None:
    table, calls, module = LoadedOps(), [], object()
    assert table.load("k" * 64, _counting(module, calls)) is module
    assert table.load("k" * 64, _counting(object(), calls)) is module and calls == [1]
    assert dict(table) == {"k" * 64: module} and len(table) == 1 and "k" * 64 in table
    assert table.get("k" * 64) is module and table.get("nope") is None and table.key_of(module) == "k" * 64
    assert table.key_of(object()) is None


def test_a_failed_build_is_recorded_once_and_enters_nothing() -> None:
    table, calls = LoadedOps(), []
    error = BuildError("toy", DIAGNOSES["compile_error"], detail="boom")

    def fails() -> Any:
        calls.append(1)
        raise error

    for _ in range(3):
        with pytest.raises(BuildError) as raised:
            table.load("f" * 64, fails)
        assert raised.value is error  # the same typed error, at once
    assert calls == [1] and "f" * 64 not in table and len(table) == 0 and table.failure("f" * 64) is error


def test_other_errors_are_not_recorded() -> None:
    table, calls = LoadedOps(), []

    def flaky() -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise ImportError("not yet")
        return "module"

    with pytest.raises(ImportError):
        table.load("ns", flaky)
    assert table.failure("ns") is None and "ns" not in table
    assert table.load("ns", flaky) == "module" and calls == [1, 1]


def test_clear_is_the_one_reset() -> None:
    table, calls, cleared = LoadedOps(), [], []
    table.on_clear(lambda: cleared.append(1))
    module = table.load("a" * 64, _counting(object(), calls))
    with pytest.raises(BuildError):
        table.load("b" * 64, lambda: (_ for _ in ()).throw(BuildError("toy", DIAGNOSES["compile_error"])))
    made: list[int] = []
    assert table.derived(module, "f", lambda: made.append(1) or 42) == 42
    assert table.derived(module, "f", lambda: made.append(1) or 43) == 42 and made == [1]
    table.clear()
    assert len(table) == 0 and table.failure("b" * 64) is None and cleared == [1]
    assert table.load("a" * 64, _counting(object(), calls)) is not module and calls == [1, 1]  # loaded again
    assert table.derived(module, "f", lambda: 44) == 44  # the derived value went with the reset


def test_discard_forgets_one_key() -> None:
    table = LoadedOps()
    table.load("a" * 64, lambda: "a")
    table.load(implementation_key("toy_op", "mid"), lambda: "mid")
    assert is_implementation_key("toy_op:mid") and not is_implementation_key("a" * 64)
    assert not is_implementation_key("anyaccel_triton_adam")
    table.discard("toy_op:mid")
    table.discard("never-loaded")
    assert list(table) == ["a" * 64]


def test_registrations_outlive_the_reset_and_definitions_are_entered_again() -> None:
    table, defined = LoadedOps(), []

    def define() -> Any:
        defined.append(1)
        return object()

    first = table.load_definitions("anyaccel_test_ns", define)
    assert table.load_definitions("anyaccel_test_ns", define) is first and defined == [1]
    table.clear()
    assert "anyaccel_test_ns" not in table
    assert table.load_definitions("anyaccel_test_ns", define) is first and defined == [1]  # never defined twice
    assert table["anyaccel_test_ns"] is first
    library = NativeLibrary("pin_memory", Path("/x/op.so"))
    assert table.register_once("anyaccel_pin_memory_0123456789", lambda: library) is library
    table.clear()
    assert table.native_libraries("pin_memory") == {"anyaccel_pin_memory_0123456789": library}
    assert table.native_libraries("cpu_adam") == {}


def test_nothing_is_registered_when_registering_fails() -> None:
    table = LoadedOps()
    with pytest.raises(RuntimeError):
        table.register_once("anyaccel_ns", lambda: (_ for _ in ()).throw(RuntimeError("half")))
    assert table.register_once("anyaccel_ns", lambda: "second") == "second"


def test_a_native_build_is_one_entry_and_its_failure_is_recorded_there() -> None:
    builder = ToyBuilder(unique(), source="broken.cpp")
    with pytest.raises(BuildError) as first:
        builder.load()
    key = mf.compute_key(builder.key_inputs())  # the build's cache key: its one entry
    assert LOADED_OPS.failure(key) is first.value and key not in LOADED_OPS
    with pytest.raises(BuildError) as second:
        ToyBuilder(builder.variant, source="broken.cpp").load()
    assert second.value is first.value


RELOAD_SCRIPT = """
import json, sys
sys.path.insert(0, {here!r})
from toy_builder import ToyBuilder
import torch
from anyaccel.op_builder.core.loaded_ops import LOADED_OPS
first = ToyBuilder({variant!r}).load()
keys = list(LOADED_OPS)
LOADED_OPS.clear()  # the one reset: the library stays loaded (torch cannot unload it), the module is made again
second = ToyBuilder({variant!r}).load()
x = torch.ones(4)
second.scale_(x, 2.0)
print(json.dumps({{"keys": keys, "after": list(LOADED_OPS), "new_module": second is not first,
                  "same_namespace": second.namespace == first.namespace, "held": LOADED_OPS[keys[0]] is second,
                  "works": x.tolist() == [2.0] * 4}}))
"""


def test_a_native_build_loads_again_after_the_reset_without_loading_its_library_twice(session_cache: Path) -> None:
    """Loading the library a second time would run its registrations again and crash the process: the reload
    attaches a new module to the library already loaded."""
    out = run_json([sys.executable, "-c", RELOAD_SCRIPT.format(here=str(HERE), variant=unique())],
                   child_env(ANYACCEL_CACHE_DIR=str(session_cache)))
    assert len(out["keys"]) == 1 and out["after"] == out["keys"]
    assert out["new_module"] and out["same_namespace"] and out["held"] and out["works"]
