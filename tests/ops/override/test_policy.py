"""The override mode's default policy: the packaged file's schema, the device-key lookup with the size rule
for unknown devices, the tuning table overriding it, the once-per-process log of what was enabled and why,
and the emitted file a GPU measurement regenerates it with."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch

import anyaccel.ops
from anyaccel.ops.override import mode, policy
from anyaccel.ops.override.policy import Policy, PolicyFileError, key

H100 = ("NVIDIA H100 80GB HBM3", (9, 0))
H200 = ("NVIDIA H200", (9, 0))


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty anyaccel cache: no tuning table, as on a fresh machine."""
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("ANYACCEL_OVERRIDE_POLICY", raising=False)
    return tmp_path


def _as_device(monkeypatch: pytest.MonkeyPatch, name: str, cap: tuple[int, int] | None) -> None:
    """Fake the current device's name and compute capability (the kernels still run on the CPU)."""
    monkeypatch.setattr(mode, "_device_name", lambda _dt: name)
    monkeypatch.setattr(mode, "_capability", lambda _dt: cap, raising=False)


def test_the_packaged_file_follows_the_schema_and_has_the_gpu_entries() -> None:
    data = policy.read_default()
    assert {policy.device_key(*H100), policy.device_key(*H200)} <= set(data["devices"])
    for entry in [*data["devices"].values(), data[policy.UNKNOWN_DEVICE]]:
        # each entry says where it comes from: a measurement, or a placeholder/rule to be regenerated
        assert "measured by anyaccel tune" in entry["source"] or "to be regenerated" in entry["source"] \
            or "conservative" in entry["source"]
        if "measured" not in entry["source"]:
            assert entry["rule"], "a shipped placeholder must route something without tuning"


_GOOD: dict[str, Any] = {"schema": 1, "about": "x", "devices": {"D|9.0": {"source": "s", "rule": {"_softmax": 8},
                                                                      "speedups": {"_softmax|float32|8|32": 1.5},
                                                                      "fallbacks": {"_softmax|float32|8|32": 0.99}}},
                         "unknown_device": {"rule": {}}}


@pytest.mark.parametrize(("path", "value", "match"), [
    (("schema",), 2, "schema=2"),
    (("devices",), [], "devices must be an object"),
    (("devices", "D|9.0", "rule", "_softmax"), 0, "integer >= 1"),
    (("devices", "D|9.0", "rule", "_softmax"), True, "integer >= 1"),
    (("devices", "D|9.0", "speedups"), {"_softmax|float32|8": 1.0}, "not a policy key"),
    (("devices", "D|9.0", "fallbacks", "_softmax|float32|8|32"), -1.0, "a number > 0"),
    (("devices", "D|9.0", "colour"), "red", "unknown fields"),
    (("unknown_device",), 3, "accepted: an object"),
    (("extra",), 1, "unknown top-level"),
])
def test_the_validator_names_the_broken_field(path: tuple[str, ...], value: object, match: str) -> None:
    policy.validate_default(_GOOD)
    bad = copy.deepcopy(_GOOD)
    node = bad
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    with pytest.raises(PolicyFileError, match=match):
        policy.validate_default(bad)


def test_known_device_gets_its_entry_and_unknown_devices_the_size_rule(fresh_cache: Path) -> None:
    data = policy.read_default()
    h100 = Policy.load(H100[0], "tuned", capability=H100[1])
    dkey = "NVIDIA H100 80GB HBM3|9.0"
    assert dkey in h100.source and h100.rule == data["devices"][dkey]["rule"]
    least = h100.rule["_softmax"]
    assert h100.registrable("_softmax") and least >= 2
    # single-row keys are not among the measured ones: the size rule decides them
    at, below = key("_softmax", torch.bfloat16, 1, least), key("_softmax", torch.bfloat16, 1, least // 2)
    assert at not in h100.speedups and below not in h100.speedups
    assert h100.use_ours(at)
    assert not h100.use_ours(below)
    # another capability is another device
    other = Policy.load(H100[0], "tuned", capability=(8, 0))
    assert policy.UNKNOWN_DEVICE in other.source and other.rule == data[policy.UNKNOWN_DEVICE]["rule"]
    assert not other.registrable("silu_backward") or "silu_backward" in other.rule


def test_tuning_table_overrides_the_default(fresh_cache: Path) -> None:
    big = key("_softmax", torch.bfloat16, 32768, 8192)
    default = Policy.load(H100[0], "tuned", capability=H100[1])
    assert default.registrable("_softmax") and default.registrable("native_layer_norm")
    tuned = Policy("tuned")
    # this machine measured every softmax key of the default entry, and one more, slower than aten
    for k in [*(k for k in default.speedups if k.startswith("_softmax|")), big]:
        tuned.record(k, 0.5, 0.99)
    tuned.save(H100[0])
    pol = Policy.load(H100[0], "tuned", capability=H100[1])
    assert "tuning table" in pol.source and not pol.use_ours(big)
    assert not pol.registrable("_softmax")  # every measured key now loses
    assert pol.registrable("native_layer_norm")  # not in the table: still the default entry's keys


def test_enable_on_a_fresh_h100_replaces_ops_and_logs_why_once(interpreter_impls: None, fresh_cache: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    _as_device(monkeypatch, *H100)
    mode._LOGGED.clear()
    with caplog.at_level(logging.INFO, logger="anyaccel.ops.override.mode"):
        replaced = anyaccel.ops.enable()
        anyaccel.ops.disable()
        assert anyaccel.ops.enable() == replaced
        anyaccel.ops.disable()
    assert {"_softmax", "_log_softmax", "native_layer_norm"} <= set(replaced)
    lines = [r.getMessage() for r in caplog.records if "policy from" in r.getMessage()]
    assert len(lines) == 1 and "NVIDIA H100 80GB HBM3|9.0" in lines[0] and "measured keys win" in lines[0]


def test_enable_that_replaces_nothing_warns(interpreter_impls: None, fresh_cache: Path,
                                            monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    _as_device(monkeypatch, "Some Accelerator", (1, 0))
    mode._LOGGED.clear()
    with caplog.at_level(logging.INFO, logger="anyaccel.ops.override.mode"):
        assert anyaccel.ops.enable(include=["silu"]) == []
    anyaccel.ops.disable()
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "nothing replaced" in r.getMessage()]
    assert len(warned) == 1 and "unknown_device" in warned[0].getMessage()


def test_derive_rule_starts_above_every_losing_size() -> None:
    s = {key("_softmax", torch.bfloat16, 64, 64): 0.3, key("_softmax", torch.bfloat16, 1024, 2048): 1.2,
         key("_softmax", torch.float16, 8192, 2048): 1.5, key("silu", torch.bfloat16, 1, 1 << 20): 1.5,
         key("silu", torch.bfloat16, 1, 1 << 24): 0.9}
    assert policy.derive_rule(s, {}) == {"_softmax": 1024 * 2048}  # silu's largest size loses: no rule


def test_emit_writes_the_shipped_format_and_keeps_other_entries(tmp_path: Path) -> None:
    pol = Policy("tuned")
    pol.record(key("_softmax", torch.bfloat16, 8192, 4096), 1.4, 0.98)
    out = tmp_path / "default_policy.json"
    policy.emit_default(out, "NVIDIA H200|9.0", pol, "measured")
    policy.emit_default(out, "Other|8.0", pol, "measured")
    data = policy.validate_default(json.loads(out.read_text()))
    assert set(data["devices"]) == {"NVIDIA H200|9.0", "Other|8.0"}
    assert data["devices"]["NVIDIA H200|9.0"]["rule"] == {"_softmax": 8192 * 4096}
    assert data[policy.UNKNOWN_DEVICE] == policy.read_default()[policy.UNKNOWN_DEVICE]
    out.write_text('{"schema": 7}')
    with pytest.raises(PolicyFileError, match="schema=7"):
        policy.emit_default(out, "X", pol, "measured")
    assert out.read_text() == '{"schema": 7}'  # a broken file is not overwritten


def test_tune_emits_a_default_policy_entry(interpreter_impls: None, fresh_cache: Path) -> None:
    from anyaccel import tune_command

    out = fresh_cache / "emitted.json"
    assert tune_command.main(["--ops", "_softmax", "nll_loss_forward", "nll_loss_backward", "--shapes", "4x8",
                      "--dtypes", "float16", "--reps", "1", "--emit-default-policy", str(out)]) == 0
    data = policy.validate_default(json.loads(out.read_text()))
    entry = data["devices"]["cpu"]
    assert set(entry["speedups"]) == {key(op, torch.float16, 4, 8) for op in
                                      ("_softmax", "nll_loss_forward", "nll_loss_backward")}
    assert set(entry["fallbacks"]) == set(entry["speedups"])
