"""The implementation loader (anyaccel/ops/dispatch.py): priority, forcing by argument and by
``ANYACCEL_IMPL_<FAMILY>``, availability probes, the built-in rows derived from the op specs, and the
builder-backed probes and loaders. No GPU: probes are patched where a device would be needed."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from anyaccel.op_builder.classes import builder_class
from anyaccel.op_builder.core.loaded_ops import LOADED_OPS
from anyaccel.ops import dispatch, registry


def _impl(name: str, priority: int, available: bool, device_types: tuple[str, ...] = ("cuda",),
          op: str = "toy_op") -> registry.RegisteredImplementation:
    return registry.RegisteredImplementation(
        op=op, name=name, priority=priority, device_types=device_types,
        probe=lambda: (available, "ok" if available else "missing"),
        loader=lambda: type("M", (), {"which": name})(),
    )


@pytest.fixture
def toy_op(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A registry holding only the toy op's implementations (the built-ins are not registered)."""
    monkeypatch.setattr(registry, "_implementations", {})
    monkeypatch.setattr(registry, "_builtins_done", True)
    monkeypatch.delenv("ANYACCEL_IMPL_TOY_OP", raising=False)
    LOADED_OPS.clear()
    for impl in (_impl("fast", 20, False), _impl("mid", 10, True), _impl("slow", 1, True),
                 _impl("xpu_only", 30, True, ("xpu",))):
        registry.register(impl)
    yield "toy_op"
    LOADED_OPS.clear()  # the registry is restored: nothing chosen from the toy rows survives the test


@pytest.fixture
def fresh_builtins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The built-in rows, in a registry of this test's own (rows replaced here do not leak)."""
    registry.implementations("adam")  # registers the built-ins
    monkeypatch.setattr(registry, "_implementations",
                        {op: dict(rows) for op, rows in registry._implementations.items()})
    for family in ("ADAM", "LION", "FUSED_ADAM"):
        monkeypatch.delenv(f"ANYACCEL_IMPL_{family}", raising=False)
    LOADED_OPS.clear()
    yield
    LOADED_OPS.clear()


def _available(op: str, name: str, monkeypatch: pytest.MonkeyPatch, ok: bool = True, reason: str = "") -> None:
    row = registry._implementations[op][name]
    monkeypatch.setitem(registry._implementations[op], name, dataclasses.replace(row, probe=lambda: (ok, reason)))
    LOADED_OPS.clear()


# ---- the mechanism, on a toy op ----------------------------------------------------------------------------


def test_priority_picks_highest_available(toy_op: str) -> None:
    assert dispatch.choose(toy_op, "cuda").name == "mid"
    assert dispatch.choose(toy_op, "xpu").name == "xpu_only"
    assert [i.name for i in registry.implementations(toy_op)] == ["xpu_only", "fast", "mid", "slow"]
    loaded = dispatch.load(toy_op, "cuda")
    assert loaded.which == "mid" and LOADED_OPS["toy_op:mid"] is loaded  # a hand loader's object, entered once


def test_force_by_argument_and_env(toy_op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert dispatch.choose(toy_op, "cuda", "slow").name == "slow"
    monkeypatch.setenv("ANYACCEL_IMPL_TOY_OP", "slow")
    assert dispatch.forced_name(toy_op) == "slow"
    assert dispatch.choose(toy_op, "cuda").name == "slow"
    assert dispatch.choose(toy_op, "cuda", "mid").name == "mid"  # the argument wins over the variable
    monkeypatch.setenv("ANYACCEL_IMPL_TOY_OP", "")
    assert dispatch.choose(toy_op, "cuda").name == "mid"  # empty: not forced


def test_forcing_unknown_or_unavailable_raises_never_falls_back(toy_op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(dispatch.UnknownImplementationError,
                       match=r"no implementation 'nope'; registered: .* \(set by the caller\)") as err:
        dispatch.choose(toy_op, "cuda", "nope")
    assert isinstance(err.value, ValueError) and isinstance(err.value, dispatch.ImplementationError)
    monkeypatch.setenv("ANYACCEL_IMPL_TOY_OP", "nope")
    with pytest.raises(dispatch.UnknownImplementationError, match=r"\(set by ANYACCEL_IMPL_TOY_OP\)"):
        dispatch.choose(toy_op, "cuda")
    monkeypatch.delenv("ANYACCEL_IMPL_TOY_OP")
    with pytest.raises(dispatch.NoImplementationError, match="'fast' of op 'toy_op' is unavailable on cuda: missing"):
        dispatch.choose(toy_op, "cuda", "fast")
    with pytest.raises(dispatch.NoImplementationError, match="serves xpu, not cuda"):
        dispatch.choose(toy_op, "cuda", "xpu_only")


def test_register_user_implementation_and_explain(toy_op: str) -> None:
    registry.register(_impl("mine", 99, True))
    with pytest.raises(ValueError, match="already registered; pass override=True"):
        registry.register(_impl("mine", 5, True))
    assert dispatch.choose(toy_op, "cuda").name == "mine"
    lines = {c.name: c for c in dispatch.explain(toy_op, "cuda")}
    assert lines["mine"].chosen and not lines["mid"].chosen and lines["mine"].priority == 99
    assert not lines["fast"].available and lines["fast"].reason == "missing"
    registry.register(_impl("mine", 0, True), override=True)
    assert dispatch.choose(toy_op, "cuda").name == "mid"
    assert not any(c.chosen for c in dispatch.explain(toy_op, "mps"))  # nothing available: nothing chosen


def test_no_available_implementation_lists_reasons(toy_op: str) -> None:
    with pytest.raises(dispatch.NoImplementationError,
                       match=r"no implementation of op 'toy_op' is available on mps: xpu_only: serves xpu, not mps; "
                             r"fast: serves cuda, not mps"):
        dispatch.choose(toy_op, "mps")
    with pytest.raises(dispatch.UnknownImplementationError, match=r"no implementation of op 'other' is registered"):
        registry.implementations("other")


def test_a_probe_that_raises_makes_its_implementation_unavailable(toy_op: str) -> None:
    def broken() -> tuple[bool, str]:
        raise RuntimeError("driver says no")

    registry.register(dataclasses.replace(_impl("flaky", 50, True), probe=broken))
    assert dispatch.choose(toy_op, "cuda").name == "mid"
    flaky = {c.name: c for c in dispatch.explain(toy_op, "cuda")}["flaky"]
    assert not flaky.available and flaky.reason == "probe failed: driver says no"


def test_load_probes_once_and_caches_the_choice(toy_op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    loads: list[int] = []
    impl = _impl("counted", 50, True)
    registry.register(dataclasses.replace(
        impl, probe=lambda: calls.append(1) or (True, ""), loader=lambda: loads.append(1) or impl.loader()))
    first = dispatch.load(toy_op, "cuda")
    assert first.which == "counted" and dispatch.load(toy_op, "cuda") is first
    assert dispatch.load(toy_op, "cuda", "counted") is first  # forced by name: same loaded object
    assert len(calls) == 2 and len(loads) == 1  # one probe per (op, device, forced name), one load per impl
    monkeypatch.setenv("ANYACCEL_IMPL_TOY_OP", "mid")  # the variable is read on every call
    assert dispatch.load(toy_op, "cuda").which == "mid"
    with pytest.raises(AttributeError):
        first.__len__  # noqa: B018  dunders are not forwarded
    with pytest.raises(AttributeError):
        first.no_such_function  # noqa: B018


def test_registering_clears_the_cached_choice(toy_op: str) -> None:
    assert dispatch.load(toy_op, "cuda").which == "mid"
    registry.register(_impl("newer", 15, True))
    assert dispatch.load(toy_op, "cuda").which == "newer"


# ---- the built-in rows, derived from the op specs ----------------------------------------------------------


@pytest.mark.parametrize("family", ["adam", "lion"])
def test_builtin_rows_per_device_type(family: str) -> None:
    def on(device: str) -> list[str]:
        return [i.name for i in registry.implementations(family) if device in i.device_types]

    assert on("cuda") == ["cuda", "triton"]  # the CUDA C++ kernel (20) above Triton (10)
    assert on("xpu") == ["sycl", "triton"]  # SYCL (20) above Triton (10) on Intel GPUs
    assert on("npu") == ["npu"] and on("cpu") == ["cpu"] and on("mps") == []
    rows = {i.name: (i.priority, i.device_types) for i in registry.implementations(family)}
    assert rows == {"cpu": (10, ("cpu",)), "cuda": (20, ("cuda",)), "sycl": (20, ("xpu",)), "npu": (20, ("npu",)),
                    "triton": (10, ("cuda", "xpu"))}
    assert all(i.op == family and i.description for i in registry.implementations(family))


def test_the_old_op_names_are_gone() -> None:
    for old in ("fused_adam", "fused_lion"):
        with pytest.raises(dispatch.UnknownImplementationError, match=r"known ops: .*'adam'.*'lion'"):
            registry.implementations(old)


def test_the_family_variable_forces_and_the_old_one_is_ignored(fresh_builtins: None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _available("adam", "cuda", monkeypatch)
    _available("adam", "triton", monkeypatch)
    monkeypatch.setenv("ANYACCEL_IMPL_FUSED_ADAM", "triton")  # the pre-spec name: no effect any more
    assert dispatch.choose("adam", "cuda").name == "cuda"
    monkeypatch.setenv("ANYACCEL_IMPL_ADAM", "triton")
    assert dispatch.choose("adam", "cuda").name == "triton"
    _available("lion", "cuda", monkeypatch)
    _available("lion", "triton", monkeypatch)
    assert dispatch.forced_name("lion") is None  # each family has its own variable
    assert dispatch.choose("lion", "cuda").name == "cuda"
    monkeypatch.setenv("ANYACCEL_IMPL_ADAM", "sycl")  # names an XPU implementation: CUDA keeps its choice
    assert dispatch.choose("adam", "cuda").name == "cuda"
    with pytest.raises(dispatch.NoImplementationError, match="'sycl' of op 'adam' is unavailable on xpu"):
        dispatch.choose("adam", "xpu")  # where it applies, an unavailable forced one raises, never falls back
    with pytest.raises(dispatch.NoImplementationError, match="serves xpu, not cuda"):
        dispatch.choose("adam", "cuda", "sycl")  # a caller's explicit choice applies everywhere


def test_cpu_rows_probe_their_builders_and_serve_the_cpu(fresh_builtins: None) -> None:
    for family in ("adam", "lion"):
        cpu = {c.name: c for c in dispatch.explain(family, "cpu")}
        assert cpu["cpu"].available and cpu["cpu"].chosen, cpu["cpu"].reason
        assert not cpu["cuda"].available and cpu["cuda"].reason == "serves cuda, not cpu"


def test_gpu_rows_explain_why_they_are_unavailable_on_a_cpu_torch(fresh_builtins: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr("anyaccel.op_builder.backends.sycl.torch_has_xpu", lambda: False)
    monkeypatch.setattr("anyaccel.op_builder.backends.npu.find_torch_npu", lambda: None)
    reasons = {c.name: c.reason for c in dispatch.explain("adam", "cuda") if not c.available}
    assert "CPU-only" in reasons["cuda"]
    assert "XPU support" in {c.name: c.reason for c in dispatch.explain("adam", "xpu")}["sycl"]
    assert "torch_npu is not installed" in {c.name: c.reason for c in dispatch.explain("lion", "npu")}["npu"]


def test_triton_row_probes_the_package_without_importing_it(fresh_builtins: None,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    triton = {c.name: c for c in dispatch.explain("lion", "xpu")}["triton"]
    assert not triton.available and triton.reason == "triton is not installed"


def test_sycl_above_triton_on_xpu_and_the_choice_is_logged(fresh_builtins: None, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    assert {"sycl", "triton"} <= {c.name for c in dispatch.explain("adam", "xpu")}
    xpu_adam = builder_class("adam", "fused_adam_sycl")
    monkeypatch.setattr(xpu_adam, "compatibility", lambda self: (True, ""))
    _available("adam", "triton", monkeypatch, True, "triton installed")
    assert dispatch.choose("adam", "xpu").name == "sycl"
    assert dispatch.choose("adam", "xpu", name="triton").name == "triton"
    monkeypatch.setattr(xpu_adam, "load", lambda self, verbose=False: "sycl-module")
    with caplog.at_level("INFO", logger="anyaccel.ops.dispatch"):
        loaded = dispatch.load("adam", "xpu")
    assert loaded == "sycl-module"
    assert "op adam: using implementation 'sycl' (priority 20)" in caplog.text
    assert "sycl" not in {c.name for c in dispatch.explain("adam", "cuda") if c.available}


def test_builder_probe_and_loader_use_the_class_at_call_time(fresh_builtins: None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows make their builder at each probe/load, so a patched builder class is seen."""
    cls = builder_class("lion", "cpu_lion")
    row = registry._implementations["lion"]["cpu"]
    monkeypatch.setattr(cls, "compatibility", lambda self: (False, "patched away"))
    assert row.probe() == (False, "patched away")
    with pytest.raises(dispatch.NoImplementationError, match="cpu: patched away"):
        dispatch.choose("lion", "cpu")
    monkeypatch.setattr(cls, "compatibility", lambda self: (True, ""))
    monkeypatch.setattr(cls, "load", lambda self, verbose=False: "lion-module")
    assert row.probe() == (True, "") and row.loader() == "lion-module"


def test_loading_the_cpu_rows_builds_the_host_ops(fresh_builtins: None) -> None:
    """The real thing: the cpu row of each family loads its build, whose torch ops answer."""
    for family in ("adam", "lion"):
        op: Any = dispatch.load(family, "cpu")
        assert op is builder_class(family, f"cpu_{family}")().load() and dispatch.load(family, "cpu") is op
        assert op.namespace.startswith(f"anyaccel_cpu_{family}_")
        assert getattr(torch.ops, op.namespace).isa() == op.isa
        assert callable(getattr(op, f"{family}_step"))


# ---- one table of loaded ops: the builder and the dispatcher read the same entry -------------------------------


def test_a_build_and_its_dispatch_are_one_entry_and_reload_together_after_the_reset(fresh_builtins: None) -> None:
    from anyaccel.accelerator import get_accelerator
    from anyaccel.op_builder.core import manifest as mf

    builder = get_accelerator().create_op_builder("CPUAdamBuilder")
    key = mf.compute_key(builder.key_inputs())
    module = builder.load()
    assert dispatch.load("adam", "cpu") is module  # the dispatcher's path returns the builder's very module
    assert dispatch.load("adam", "cpu", "cpu") is module
    entries = [k for k, m in LOADED_OPS.items() if m is module]
    assert entries == [key] and LOADED_OPS[key] is module and not any(k.startswith("adam:") for k in LOADED_OPS)

    LOADED_OPS.clear()  # the one reset: both paths load again, and again share one entry
    assert key not in LOADED_OPS
    again = dispatch.load("adam", "cpu")
    assert again is not module and again.namespace == module.namespace  # attached to the library already loaded
    assert builder.load() is again and LOADED_OPS[key] is again
    assert [k for k, m in LOADED_OPS.items() if m is again] == [key]
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    from anyaccel.ops.adam import CPUAdam

    CPUAdam([p], lr=0.1).step()  # the reloaded module runs
    assert p.detach().lt(1).all()


def test_a_registry_change_drops_the_choices_and_hand_loaded_entries_but_no_build(toy_op: str) -> None:
    from anyaccel.op_builder import CPUAdamBuilder

    build = CPUAdamBuilder().load()
    key = LOADED_OPS.key_of(build)
    assert dispatch.load(toy_op, "cuda").which == "mid" and "toy_op:mid" in LOADED_OPS
    registry.register(_impl("mid", 10, True), override=True)  # a new loader for "mid": it must be the one used
    assert "toy_op:mid" not in LOADED_OPS and LOADED_OPS.get(key) is build
    assert dispatch.load(toy_op, "cuda").which == "mid" and LOADED_OPS["toy_op:mid"] is dispatch.load(toy_op, "cuda")


def test_the_callers_name_and_the_variables_are_remembered_apart(toy_op: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """ANYACCEL_IMPL_<OP> naming an implementation of other device types is ignored there; the same name passed by
    the caller is an error. A choice made under the variable must not answer the caller."""
    monkeypatch.setenv("ANYACCEL_IMPL_TOY_OP", "xpu_only")
    assert dispatch.load(toy_op, "cuda").which == "mid"
    with pytest.raises(dispatch.NoImplementationError, match="serves xpu, not cuda"):
        dispatch.load(toy_op, "cuda", "xpu_only")
