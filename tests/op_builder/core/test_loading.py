"""The load path: cold build once, warm load without a compiler, revert hits the cache, manifest checked,
8 processes compile once, a builder SIGKILLed mid-compile or mid-link leaves nothing that blocks or is
trusted, stale locks are taken over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from opb_helpers import REAL_CXX, child_env, make_wrapper, run_json, toy_load_cmd, unique
from toy_builder import ToyBuilder

from anyaccel.op_builder.core.cache import Cache
from anyaccel.op_builder.core.lock import BuildLock
from anyaccel.op_builder.core.manifest import MANIFEST_NAME, compute_key

pytestmark = pytest.mark.slow


def test_cold_then_warm_then_revert(monkeypatch, counting_cxx):
    cxx, count = counting_cxx
    monkeypatch.setenv("CXX", str(cxx))
    variant = unique()
    env = child_env(CXX=str(cxx))
    cold = run_json(toy_load_cmd(variant), env)
    assert cold["ok"] and count() == 1  # built (its OpModule.source: see test_a_fresh_build_says_built)
    assert cold["isa"] == ToyBuilder().isa()
    warm = run_json(toy_load_cmd(variant), env)
    assert warm["ok"] and warm["source"] == "cache" and count() == 1
    assert not warm["cpp_extension"], "the warm path must not import torch.utils.cpp_extension"
    assert not cold["cpp_extension"], "CPU builds run our ninja driver, not torch.utils.cpp_extension"
    assert warm["namespace"] == cold["namespace"]
    # another input (ISA portable) builds once more, and its macro reaches the compiler
    portable = run_json(toy_load_cmd(variant), child_env(CXX=str(cxx), ANYACCEL_CPU_ISA="portable"))
    assert portable["isa"] == "portable" and count() == 2
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
    entry = Cache.open().entry("toy", m.key)
    assert {"op.so", MANIFEST_NAME, "build.log"} <= {p.name for p in entry.iterdir()}
    man = json.loads((entry / MANIFEST_NAME).read_text())
    assert man["key"] == m.key and man["namespace"] == m.namespace and man["inputs"]["abi_target"] == "2.10"
    assert "build.ninja" not in {p.name for p in entry.iterdir()}  # the private build directory is gone
    assert "rule link" in (entry / "build.log").read_text()  # the log keeps the ninja file that built it


def test_manifest_fields_decide_trust(monkeypatch, counting_cxx):
    """A published entry is trusted only if its manifest matches: another stable-ABI target newer than this
    torch or another input is not trusted (rebuilt); the torch it was built under is a build-host field."""
    cxx, count = counting_cxx
    monkeypatch.setenv("CXX", str(cxx))
    variant = unique()
    env = child_env(CXX=str(cxx))
    run_json(toy_load_cmd(variant), env)
    assert count() == 1
    b = ToyBuilder(variant)
    key = compute_key(b.key_inputs())
    entry = Cache.open().entry("toy", key)
    path = entry / MANIFEST_NAME
    pristine = path.read_text()

    def tamper(**fields) -> dict:
        man = json.loads(pristine)
        man["inputs"].update(fields)
        path.write_text(json.dumps(man))
        return man

    tamper(built_with_torch="2.10.0")
    assert b._check_entry(entry, key, b.key_inputs()).ok  # built under another torch: still trusted
    assert run_json(toy_load_cmd(variant), env)["source"] == "cache" and count() == 1
    tamper(abi_target="9.99")  # needs a torch this process does not have
    assert not b._check_entry(entry, key, b.key_inputs()).ok
    tamper(isa="avx512" if b.isa() != "avx512" else "portable")
    assert not b._check_entry(entry, key, b.key_inputs()).ok
    run_json(toy_load_cmd(variant), env)
    assert count() == 2  # rebuilt
    assert json.loads(path.read_text())["inputs"] == b.key_inputs() | {"compiler": json.loads(path.read_text())[
        "inputs"]["compiler"], "built_with_torch": torch.__version__}


def test_a_fresh_build_says_built(counting_cxx):
    cxx, count = counting_cxx
    cold = run_json(toy_load_cmd(unique()), child_env(CXX=str(cxx)))
    assert count() == 1 and cold["source"] == "built"


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
    assert len({r["path"] for r in results}) == 1 and len({r["namespace"] for r in results}) == 1
    assert count() == 1, "8 processes on a cold cache must compile exactly once"


def _killing_compiler(directory: Path, marker: str, when: str) -> Path:
    """A CXX that, on its ``when`` step ("-c": compiling, "-shared": linking), SIGKILLs the ancestor process
    whose command line holds ``marker`` (the loading Python) and then its own process group (ninja and every
    compiler), as an out-of-memory killer or a user's ``kill -9`` would; otherwise it is the real compiler."""
    return make_wrapper(directory, f"""case " $* " in *" {when} "*)
  pid=$$
  while [ "$pid" -gt 1 ]; do
    pid=$(sed 's/.*) . //' /proc/$pid/stat | cut -d' ' -f1)
    if tr '\\0' ' ' < /proc/$pid/cmdline 2>/dev/null | grep -qF "{marker}"; then
      kill -9 "$pid"
      kill -9 0
    fi
  done;;
esac
exec {REAL_CXX} "$@"
""", name=f"killing-cxx{when.replace('-', '_')}")


@pytest.mark.parametrize("when", ["-c", "-shared"])
def test_sigkill_during_the_build_then_load(tmp_path, monkeypatch, when):
    variant = unique()
    cxx = _killing_compiler(tmp_path, f"ToyBuilder('{variant}')", when)  # only the loading script says this
    monkeypatch.setenv("CXX", str(cxx))  # the same compiler here: the same key as the killed child's
    b = ToyBuilder(variant)
    key = compute_key(b.key_inputs())
    cache = Cache.open()
    proc = subprocess.run(toy_load_cmd(variant), env=child_env(CXX=str(cxx)), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
    assert not BuildLock(cache.lock_path("toy", key), "t").is_held(), "a dead builder must not hold the lock"
    assert not cache.entry("toy", key).exists(), "a killed build must publish nothing"
    leftovers = [p for p in cache.tmp.iterdir() if p.name.startswith(f"toy-{key[:10]}-")]
    assert leftovers, "the killed build's private directory is where it died"
    # a stale lock file left by a dead process does not block, and this process (not matched by the killer)
    # builds, publishes and loads the op
    cache.lock_path("toy", key).write_text(json.dumps({"pid": 999999, "host": "gone", "since": 0}))
    m = b.load()
    assert m.key == key and m.source == "built"
    x = torch.randn(64)
    y = x.clone()
    m.scale_(x, 2.0)
    torch.testing.assert_close(x, y * 2.0)
    assert b._check_entry(cache.entry("toy", key), key, b.key_inputs()).ok


def test_a_failed_key_fails_fast_and_another_key_still_builds(monkeypatch):
    bad = ToyBuilder(unique(), source="broken.cpp")
    with pytest.raises(Exception) as first:
        bad.load()
    with pytest.raises(Exception) as second:
        ToyBuilder(bad.variant, source="broken.cpp").load()
    assert second.value is first.value
    assert ToyBuilder(unique()).load().scale_ is not None


def test_a_gold_linker_that_cannot_link_does_not_fail_the_build(tmp_path, monkeypatch):
    make_wrapper(tmp_path, 'echo "ld.gold: error: cannot open /opt/gcc/lib/gcc/x86_64-linux-gnu/13/libstdc++.so: No '
                           'such file or directory" >&2\nexit 1\n', name="ld.gold")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    m = ToyBuilder(unique()).load()  # the default linker links this fine
    x = torch.ones(3)
    m.scale_(x, 2.0)
    assert torch.equal(x, torch.full((3,), 2.0))


def test_prebuilt_root_follows_the_variable(monkeypatch, tmp_path):
    from anyaccel.op_builder.core.hooks import PACKAGE_DIR
    from anyaccel.op_builder.core.loading import prebuilt_root

    monkeypatch.delenv("ANYACCEL_PREBUILT_DIR", raising=False)
    assert prebuilt_root() == PACKAGE_DIR / "_prebuilt"
    monkeypatch.setenv("ANYACCEL_PREBUILT_DIR", str(tmp_path))
    assert prebuilt_root() == tmp_path
    assert os.environ["ANYACCEL_PREBUILT_DIR"] == str(tmp_path)
