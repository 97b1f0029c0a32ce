"""Every call the XPU, NPU and MPS accelerators and the ops' XPU/NPU paths make on a device module exists in the
real module, with a signature that accepts the arguments the code passes (marker ``device_api``).

The calls are derived from anyaccel's source (``device_calls.py``), so a new call is checked without editing
this file. Checked against:

- ``torch.xpu``, ``torch.mps`` and ``torch.backends.mps``: the running torch (stock torch ships their Python
  API on every build); ``scripts/test_torch_range.sh`` runs this file on each end of the supported torch range.
- ``torch.npu`` and ``torch_npu``: torch_npu 2.14.0's Python sources and op schemas read from its wheel
  (``npu_wheel.py``), never imported.

A call passes when the member exists and ``inspect.Signature.bind`` accepts the call's positional count (a
spread ``*self._index_args(i)`` as both 0 and 1 more) and keyword names. Members of objects a call returns
(device properties) are checked only on NPU (in the extension's strings); stock torch needs a device to
create them.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from anyaccel.accelerator.mps import MPS_Accelerator
from anyaccel.accelerator.npu import NPU_Accelerator
from anyaccel.accelerator.xpu import XPU_Accelerator
from tests.accelerator import npu_wheel
from tests.accelerator.device_calls import CALLED, Access, Call, Extraction, accelerator_accesses, op_accesses

pytestmark = pytest.mark.device_api

ACCELERATORS = (XPU_Accelerator, NPU_Accelerator, MPS_Accelerator)
#: the Python module each checked name lives in (``torch.npu`` is ``torch_npu.npu``)
NPU_MODULES = {"torch.npu": "torch_npu.npu", "torch_npu": "torch_npu"}

#: Optional members (the code works without them) that a real module lacks, with what the code does instead.
#: A required member can never be listed; a listed member that exists fails ``test_expected_absences_are_absent``.
EXPECTED_ABSENT = {
    "torch.xpu.nvtx": "no NVTX on XPU: range_push/range_pop are no-ops, as in DeepSpeed's XPU accelerator",
    "torch.xpu.default_stream": "torch.xpu has no default_stream: default_stream() gives current_stream(), as "
                                "DeepSpeed's XPU accelerator does",
    "torch.xpu.amp": "torch.xpu has no amp module: amp() returns None (torch.autocast('xpu') is the API)",
    "torch.npu.nvtx": "torch_npu profiles with mstx, not NVTX: range_push/range_pop are no-ops, as in DeepSpeed's "
                      "NPU accelerator",
    "torch.mps.nvtx": "no NVTX on MPS: range_push/range_pop are no-ops",
    "torch.mps.amp": "torch.mps has no amp module: amp() returns None",
    "torch.mps.graph": "MPS has no graphs (_graph_class_name is None): capture_to_graph is a no-op context",
    "torch.mps._lazy_call": "MPS initialises eagerly: lazy_call runs the callback at once",
    "torch.mps.is_current_stream_capturing": "MPS has no graphs: is_current_stream_capturing() is False",
}

#: Optional members that torch's older releases lack: name -> (first torch with it, what the code does before).
#: Versions found by reading the torch 2.10, 2.11, 2.12, 2.13 and 2.15 wheels' Python sources.
ABSENT_BEFORE_TORCH = {
    "torch.xpu.XPUGraph": ("2.11", "no XPU graphs: create_graph() returns None"),
    "torch.xpu.graph": ("2.11", "no XPU graphs: capture_to_graph is a no-op context"),
    "torch.xpu.is_current_stream_capturing": ("2.11", "no XPU graphs: is_current_stream_capturing() is False"),
}


def _torch_older_than(version: str) -> bool:
    import torch

    return Version(torch.__version__.split("+")[0]) < Version(version)


def _all_accesses() -> list[Access]:
    found = op_accesses().accesses
    for accelerator in ACCELERATORS:
        found += accelerator_accesses(accelerator).accesses
    return list(dict.fromkeys(found))


ACCESSES = _all_accesses()


def _bind_problem(signatures: tuple[inspect.Signature, ...], call: Call) -> str | None:
    """None when one of ``signatures`` accepts ``call`` in every spread variant, else the binding error."""
    errors = []
    for signature in signatures:
        keywords = {} if call.double_star else dict.fromkeys(call.keywords)
        try:
            for extra in range(call.starred + 1):
                signature.bind(*[None] * (call.positional + extra), **keywords)
        except TypeError as exc:
            errors.append(f"{signature}: {exc}")
            continue
        return None
    return "; ".join(errors) if errors else None


def _stock(access: Access) -> tuple[bool, tuple[inspect.Signature, ...]] | None:
    """(exists, signatures) of a stock-torch member; None when the path runs through a returned object."""
    if CALLED in access.path:
        return None
    obj: Any = importlib.import_module(access.module)
    for name in access.path:
        if not hasattr(obj, name):
            return False, ()
        obj = getattr(obj, name)
    try:
        return True, (inspect.signature(obj),) if callable(obj) else ()
    except (TypeError, ValueError):  # a C function without a readable signature: existence only
        return True, ()


@pytest.fixture(scope="module")
def wheel() -> npu_wheel.NPUWheel:
    path = npu_wheel.find_wheel()
    if path is None or not path.is_file():
        pytest.skip(f"torch_npu {npu_wheel.VERSION} wheel not found (ANYACCEL_TORCH_NPU_WHEEL or the toolchains "
                    f"cache); install it with: {npu_wheel.INSTALL}")
    return npu_wheel.NPUWheel(path)


def _npu(wheel: npu_wheel.NPUWheel) -> Callable[[Access], tuple[bool, tuple[inspect.Signature, ...]] | None]:
    def look(access: Access) -> tuple[bool, tuple[inspect.Signature, ...]] | None:
        found = wheel.resolve(NPU_MODULES[access.module], access.path)
        return (found is not None, found.signatures if found else ())
    return look


def _problems(accesses: list[Access], look: Callable[[Access], Any]) -> list[str]:
    problems: list[str] = []
    for access in accesses:
        result = look(access)
        if result is None:
            continue
        exists, signatures = result
        if not exists:
            if not access.optional or not _expected_absent(access):
                kind = "optional, and not in EXPECTED_ABSENT" if access.optional else "required"
                problems.append(f"{access.where}: {access.name} does not exist ({kind})")
        elif access.call is not None:
            error = _bind_problem(signatures, access.call)
            if error:
                problems.append(f"{access.where}: {access.name}{_shown(access.call)} does not bind: {error}")
    return list(dict.fromkeys(problems))


def _expected_absent(access: Access) -> bool:
    """True when the member, or the module or object holding it (``torch.xpu.nvtx``), is in EXPECTED_ABSENT, or in
    ABSENT_BEFORE_TORCH for a torch older than its version."""
    names = [".".join((access.module, *access.path[:i])) for i in range(1, len(access.path) + 1)]
    return any(name in EXPECTED_ABSENT or (name in ABSENT_BEFORE_TORCH
                                           and _torch_older_than(ABSENT_BEFORE_TORCH[name][0])) for name in names)


def _shown(call: Call) -> str:
    parts = ["_"] * call.positional + ["*_"] * call.starred + [f"{k}=_" for k in call.keywords]
    return f"({', '.join(parts)})"


@pytest.mark.parametrize("module", ["torch.xpu", "torch.mps", "torch.backends.mps"])
def test_stock_torch_members_exist_and_bind(module: str) -> None:
    accesses = [a for a in ACCESSES if a.module == module]
    assert accesses, f"no call on {module} found in anyaccel's source: the extraction is broken"
    import torch

    problems = _problems(accesses, _stock)
    assert not problems, f"torch {torch.__version__}:\n" + "\n".join(problems)


@pytest.mark.parametrize("module", ["torch.npu", "torch_npu"])
def test_torch_npu_members_exist_and_bind(module: str, wheel: npu_wheel.NPUWheel) -> None:
    accesses = [a for a in ACCESSES if a.module == module]
    assert accesses, f"no call on {module} found in anyaccel's source: the extraction is broken"
    problems = _problems(accesses, _npu(wheel))
    assert not problems, f"torch_npu {npu_wheel.VERSION} ({wheel.path.name}):\n" + "\n".join(problems)


def test_every_member_name_is_resolved() -> None:
    """A member named at run time by something the extraction cannot read would escape the check."""
    unresolved = list(op_accesses().unresolved)
    for accelerator in ACCELERATORS:
        unresolved += accelerator_accesses(accelerator).unresolved
    assert not unresolved, "device-module member names the extraction cannot read:\n" + "\n".join(unresolved)


@pytest.mark.parametrize("name", sorted(EXPECTED_ABSENT))
def test_expected_absences_are_optional_and_absent(name: str, request: pytest.FixtureRequest) -> None:
    """Each EXPECTED_ABSENT entry is reached only optionally by the code and really is absent."""
    reached = [a for a in ACCESSES if a.name == name]
    assert reached, f"{name} is no longer reached by anyaccel: remove it from EXPECTED_ABSENT"
    required = [a.where for a in reached if not a.optional]
    assert not required, f"{name} is required at {required}: it cannot be an expected absence"
    look = _npu(request.getfixturevalue("wheel")) if reached[0].module in NPU_MODULES else _stock
    result = look(reached[0])
    assert result is not None and not result[0], f"{name} exists now: remove it from EXPECTED_ABSENT"


@pytest.mark.parametrize("name", sorted(ABSENT_BEFORE_TORCH))
def test_members_of_newer_torch_are_absent_only_before_their_version(name: str) -> None:
    """Before its version the member is absent (and reached only optionally); from its version on it exists."""
    reached = [a for a in ACCESSES if a.name == name]
    assert reached and all(a.optional for a in reached), f"{name}: no longer reached, or required"
    result = _stock(reached[0])
    assert result is not None
    version = ABSENT_BEFORE_TORCH[name][0]
    assert result[0] != _torch_older_than(version), (
        f"{name} {'exists' if result[0] else 'is absent'} in this torch; ABSENT_BEFORE_TORCH says torch {version}")


def test_a_new_call_cannot_escape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An accelerator method calling a function torch.xpu lacks, calling one with arguments it does not take, or
    naming one the extraction cannot read, is found and fails the check."""
    (tmp_path / "planted_accelerator.py").write_text(textwrap.dedent("""
        from anyaccel.accelerator.xpu import XPU_Accelerator

        class Planted(XPU_Accelerator):
            def renamed(self):
                return self._fn("memory_statistics", "memory_stats")()

            def misused(self, index):
                return self._fn("synchronize", "synchronize")(index, blocking=True)

            def computed(self):
                name = "memory_" + "stats"
                return self._fn(name, "memory_stats")()
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    planted = importlib.import_module("planted_accelerator").Planted
    try:
        found: Extraction = accelerator_accesses(planted)
        problems = _problems([a for a in found.accesses if a.module == "torch.xpu"], _stock)
    finally:
        sys.modules.pop("planted_accelerator", None)
    assert any("torch.xpu.memory_statistics does not exist (required)" in p for p in problems), problems
    assert any("torch.xpu.synchronize(_, blocking=_) does not bind" in p for p in problems), problems
    assert any(u.endswith(": name") and "planted_accelerator.py" in u for u in found.unresolved), found.unresolved
