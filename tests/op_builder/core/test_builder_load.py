"""The load path: cold build once, warm load without a compiler, revert hits the cache, manifest checked,
8 processes compile once, SIGKILL mid-build leaves nothing that blocks or is trusted, stale locks."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import pytest
import torch

from anyaccel.op_builder.core.cache import Cache
from anyaccel.op_builder.core.lock import BuildLock
from anyaccel.op_builder.core.manifest import MANIFEST_NAME, compute_key
from opb_helpers import child_env, run_json, toy_load_cmd, unique
from toy_builder import ToyBuilder

pytestmark = pytest.mark.slow


def test_cold_then_warm_then_revert(monkeypatch, counting_cxx):
    cxx, count = counting_cxx
    monkeypatch.setenv("CXX", str(cxx))
    variant = unique()
    env = child_env(CXX=str(cxx))
    cold = run_json(toy_load_cmd(variant), env)
    assert cold["ok"] and cold["source"] == "built" and count() == 1
    assert cold["isa"] == ToyBuilder().isa()
    warm = run_json(toy_load_cmd(variant), env)
    assert warm["ok"] and warm["source"] == "cache" and count() == 1
    assert not warm["cpp_extension"], "the warm path must not import torch.utils.cpp_extension"
    assert warm["namespace"] == cold["namespace"]
    # another input (ISA portable) builds once more, and its macro reaches the compiler
    portable = run_json(toy_load_cmd(variant), child_env(CXX=str(cxx), ANYACCEL_CPU_ISA="portable"))
    assert portable["isa"] == "portable" and portable["source"] == "built" and count() == 2
    # revert: hits the cache, no compiler
    again = run_json(toy_load_cmd(variant), env)
    assert again["source"] == "cache" and count() == 2
    # in this process: loads the published artifact and works as a torch op (opcheck incl. fake)
    m = ToyBuilder(variant).load()
    assert m.source == "cache" and str(m.path) == cold["path"]
    x = torch.randn(257)
    expected = x * 1.5
    m.scale_(x, 1.5)
    torch.testing.assert_close(x, expected)
    torch.library.opcheck(getattr(torch.ops, m.namespace).scale_.default, (torch.randn(33), 0.5))
    assert ToyBuilder(variant).load() is m and ToyBuilder(variant).is_built()

    # a manifest that does not match is not trusted
    entry = Cache.open().entry("toy", m.key)
    man = json.loads((entry / MANIFEST_NAME).read_text())
    man["inputs"]["torch"] = "1.0.0"
    (entry / MANIFEST_NAME).write_text(json.dumps(man))
    b = ToyBuilder(variant)
    assert b._valid_entry(entry, m.key, b.key_inputs()) is None
    rebuilt = run_json(toy_load_cmd(variant), env)
    assert rebuilt["source"] == "built" and count() == 3


def test_eight_processes_compile_once(counting_cxx):
    cxx, count = counting_cxx
    env = child_env(CXX=str(cxx))
    variant = unique()
    procs = [subprocess.Popen(toy_load_cmd(variant), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(8)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] for r in results)
    assert sum(r["source"] == "built" for r in results) == 1
    assert len({r["path"] for r in results}) == 1
    assert count() == 1, "8 processes on a cold cache must compile exactly once"


def _kill_group(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_sigkill_during_build_then_load(counting_cxx, tmp_path):
    cxx, count = counting_cxx
    env = child_env(CXX=str(cxx))
    variant = unique()
    b = ToyBuilder(variant)
    key = compute_key(b.key_inputs())
    cache = Cache.open()
    rng = random.Random()
    # kill the building process (and its compiler) at random points of the build
    for delay in (rng.uniform(0.2, 1.5), rng.uniform(1.5, 4.0)):
        proc = subprocess.Popen(toy_load_cmd(variant), env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        _kill_group(proc)
        assert not BuildLock(cache.lock_path("toy", key), "t").is_held(), "a dead builder must not hold the lock"
        entry = cache.entry("toy", key)
        if entry.exists():  # only a complete, valid entry may ever be published
            assert b._valid_entry(entry, key, b.key_inputs()) is not None
    # a stale lock file left by a dead process does not block
    cache.lock_path("toy", key).write_text(json.dumps({"pid": 999999, "host": "gone", "since": 0}))
    t0 = time.monotonic()
    m = b.load()
    assert m.key == key and m.scale_ is not None
    x = torch.randn(64)
    y = x.clone()
    m.scale_(x, 2.0)
    torch.testing.assert_close(x, y * 2.0)
    assert time.monotonic() - t0 < 120


def test_waiters_time_out_with_the_holder_named(tmp_path):
    path = tmp_path / "x.lock"
    holder = subprocess.Popen(
        [os.sys.executable, "-c",
         f"import sys; sys.path.insert(0, {str(os.path.dirname(__file__))!r}); import time\n"
         f"from anyaccel.op_builder.core.lock import BuildLock\n"
         f"l = BuildLock({str(path)!r}, 'x'); l.acquire(); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        from anyaccel.op_builder.core.errors import LockTimeoutError

        with pytest.raises(LockTimeoutError, match=f"pid {holder.pid}"):
            BuildLock(path, "op toy", timeout_s=0.5).acquire()
    finally:
        holder.kill()
        holder.wait()
    with BuildLock(path, "op toy", timeout_s=5):  # released by the kernel when the holder died
        pass
