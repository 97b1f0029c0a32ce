"""Hangs: a compiler that never returns is killed with its whole process group after
``ANYACCEL_BUILD_TIMEOUT`` and reported as a typed error naming its command; time settings that would wait
forever (or not at all) are refused by one parser, before any wait."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from integrity_support import child_env, load_in_child, make_wrapper

from anyaccel.op_builder.core.lock import TIMEOUT_ENV, BuildLock, default_timeout_s
from anyaccel.op_builder.errors import OpBuilderError, SettingError
from anyaccel.op_builder.toolchains import ninja as nj

BAD_SECONDS = ["nan", "inf", "-inf", "1e308", "-1", "0", "abc", "1e10"]


@pytest.mark.parametrize("raw", BAD_SECONDS)
@pytest.mark.parametrize("variable", [TIMEOUT_ENV, nj.TIMEOUT_ENV])
def test_time_settings_refuse_what_is_not_finite_and_positive(monkeypatch, variable, raw):
    monkeypatch.setenv(variable, raw)
    read = default_timeout_s if variable == TIMEOUT_ENV else nj.build_timeout_s
    with pytest.raises(SettingError) as err:
        read()
    assert isinstance(err.value, (OpBuilderError, ValueError)) and err.value.code == "bad_setting"
    assert variable in str(err.value) and repr(raw) in str(err.value) and "e.g." in str(err.value)


def test_time_settings_accept_and_default(monkeypatch):
    monkeypatch.setenv(TIMEOUT_ENV, " 12.5 ")
    monkeypatch.setenv(nj.TIMEOUT_ENV, "3")
    assert default_timeout_s() == 12.5 and nj.build_timeout_s() == 3.0
    monkeypatch.delenv(TIMEOUT_ENV)
    monkeypatch.setenv(nj.TIMEOUT_ENV, "")
    assert default_timeout_s() == 1800.0 and nj.build_timeout_s() == nj.DEFAULT_TIMEOUT_S


def test_lock_reads_its_timeout_when_waiting(monkeypatch, tmp_path):
    monkeypatch.setenv(TIMEOUT_ENV, "nan")
    lock = BuildLock(tmp_path / "x.lock", "x")  # constructing it reads nothing (cache clean makes these)
    assert lock.try_acquire()
    lock.release()
    with pytest.raises(SettingError, match=TIMEOUT_ENV):
        lock.acquire()


@pytest.mark.slow
@pytest.mark.parametrize("variable", [TIMEOUT_ENV, nj.TIMEOUT_ENV])
def test_bad_setting_fails_the_load_before_any_wait(tmp_path, variable):
    cxx = make_wrapper(tmp_path)
    (result,), _ = load_in_child(child_env(tmp_path / "cache", cxx, **{variable: "inf"}))
    assert not result["ok"] and result["type"] == "SettingError" and result["code"] == "bad_setting", result
    assert variable in result["message"]
    assert not any((tmp_path / "cache" / "tmp").iterdir()), "nothing may be started"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, only not yet reaped
    except FileNotFoundError:
        return False


def _group_members(pgid: int) -> list[int]:
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(name))
    return members


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_hung_compiler_is_killed_and_named(tmp_path):
    cxx = make_wrapper(tmp_path)
    pids = tmp_path / "pids.txt"
    t0 = time.monotonic()
    env = child_env(tmp_path / "cache", cxx, INTEG_CXX="sleep", INTEG_PIDS=str(pids), ANYACCEL_BUILD_TIMEOUT="3")
    (result,), stderr = load_in_child(env, timeout=120)
    assert time.monotonic() - t0 < 60
    assert not result["ok"] and result["type"] == "BuildError" and result["code"] == "timeout", result
    assert str(cxx) in result["message"] and " -c " in result["message"], result["message"]  # the command
    assert "ANYACCEL_BUILD_TIMEOUT" in result["message"]
    started = [line.split() for line in pids.read_text().splitlines()]
    assert started, "the hung compiler never started"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(int(pid)) for pid, _ in started):
        time.sleep(0.1)
    assert not [pid for pid, _ in started if _alive(int(pid))], "a compiler outlived the build"
    assert not [m for _, pgid in started for m in _group_members(int(pgid))], "the build's process group lives on"
    # a killed build leaves nothing the next run trusts: no entry, no build directory, the log kept
    cache = tmp_path / "cache"
    assert not any((cache / "ops").rglob("op.so")) and not any((cache / "tmp").iterdir())
    assert any((cache / "logs").iterdir())
    assert "failed after" in stderr and "[timeout]" in stderr
