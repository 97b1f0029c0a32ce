"""Nothing is loaded that was not built for us. Every artifact's manifest records its
library's SHA-256; a truncated, bit-flipped, zero-byte or swapped ``op.so`` is quarantined and rebuilt, never
``dlopen``ed; a library that registers another namespace gives a typed error and is quarantined; ``cache ls``
and ``cache clean --stale`` see all of it. Loads run in child processes, so a crash fails one test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from integrity_support import (
    OP,
    REPO,
    Template,
    child_env,
    load_in_child,
    other_isa_library,
    quarantined,
)

from anyaccel.op_builder.cli import cache as cache_cli
from anyaccel.op_builder.core import integrity
from anyaccel.op_builder.core.cache import Cache
from anyaccel.op_builder.core.manifest import MANIFEST_NAME, SCHEMA, compute_key, file_digest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Template:
    return Template(tmp_path_factory.mktemp("integrity"))


@pytest.fixture(scope="module")
def other_library(tmp_path_factory, template) -> Path:
    return other_isa_library(tmp_path_factory.mktemp("other-isa"), template)


def _edit_manifest(entry: Path, **changes) -> dict:
    man = json.loads((entry / MANIFEST_NAME).read_text())
    man.update(changes)
    (entry / MANIFEST_NAME).write_text(json.dumps(man))
    return man


def test_manifest_records_the_digest(template):
    entry = template.root / template.entry
    man = json.loads((entry / MANIFEST_NAME).read_text())
    assert man["schema"] == SCHEMA == 2
    assert man["library"] == "op.so" and man["library_size"] == (entry / "op.so").stat().st_size
    assert man["library_sha256"] == file_digest(entry / "op.so")
    assert integrity.inspect_entry(entry).ok


def test_truncated_library_is_quarantined_and_rebuilt(template, tmp_path):
    cache = template.clone(tmp_path / "c")
    lib = cache / template.entry / "op.so"
    with open(lib, "r+b") as fh:  # SIGBUS inside dlopen before the digest
        fh.truncate(lib.stat().st_size // 3)
    (first,), stderr = load_in_child(template.env(cache))
    assert first["ok"] and first["correct"] and first["source"] == "built", first
    assert quarantined(cache) == [f"{OP}-{template.key}-size-mismatch"]
    assert stderr.count("moved it to") == 1 and "truncated or replaced" in stderr
    assert integrity.inspect_entry(cache / template.entry).ok
    (again,), _ = load_in_child(template.env(cache))
    assert again["source"] == "cache"


@pytest.mark.parametrize("damage", ["flip", "zero", "other-isa"])
def test_damaged_library_is_never_loaded(template, other_library, tmp_path, damage):
    """The rebuild is made to fail (INTEG_CXX=fail), so a success could only come from loading the damage."""
    cache = template.clone(tmp_path / "c")
    lib = cache / template.entry / "op.so"
    same_size = other_library.stat().st_size == lib.stat().st_size
    if damage == "flip":  # same size, bytes flipped in the ELF header and the code: SIGSEGV before the digest
        data = bytearray(lib.read_bytes())
        for offset in (0x18, 0x20, len(data) // 2, len(data) // 2 + 1):
            data[offset] ^= 0xFF
        lib.write_bytes(bytes(data))
    elif damage == "zero":
        lib.write_bytes(b"")
    else:  # a library of another ISA in this entry, the manifest untouched
        shutil.copyfile(other_library, lib)
    reason = {"flip": "digest-mismatch", "zero": "size-mismatch", "other-isa": "size-mismatch"}[damage]
    if damage == "other-isa" and same_size:
        reason = "digest-mismatch"
    (result,), stderr = load_in_child(template.env(cache, INTEG_CXX="fail"))
    assert not result["ok"] and result["type"] == "BuildError" and result["code"] == "compile_error", result
    assert quarantined(cache) == [f"{OP}-{template.key}-{reason}"], stderr


def test_library_of_another_isa_with_a_matching_digest_is_a_typed_error(template, other_library, tmp_path):
    """A swapped library whose manifest was updated to match passes the digest: after dlopen the builder sees
    that its namespace was not registered, raises ArtifactError (never torch's untyped "operator ... does not
    exist") and quarantines the entry; the next load in the same process rebuilds (here: fails to)."""
    cache = template.clone(tmp_path / "c")
    entry = cache / template.entry
    shutil.copyfile(other_library, entry / "op.so")
    _edit_manifest(entry, library_sha256=file_digest(entry / "op.so"), library_size=(entry / "op.so").stat().st_size)
    (first, second), _ = load_in_child(template.env(cache), then=["fail"])
    assert not first["ok"] and first["type"] == "ArtifactError" and first["code"] == "wrong_library", first
    assert "has no function lion_step" in first["message"] and "quarantined" in first["message"]
    assert quarantined(cache) == [f"{OP}-{template.key}-wrong-library"]
    assert not second["ok"] and second["code"] == "compile_error", second


@pytest.mark.parametrize("edit", ["namespace", "inputs", "old-schema", "no-digest", "key"])
def test_edited_manifest_is_never_trusted(template, tmp_path, edit):
    cache = template.clone(tmp_path / "c")
    entry = cache / template.entry
    man = json.loads((entry / MANIFEST_NAME).read_text())
    if edit == "namespace":
        _edit_manifest(entry, namespace=man["namespace"][:-1] + "x")
    elif edit == "inputs":
        _edit_manifest(entry, inputs={**man["inputs"], "cxx_args": ["-O0"]})
    elif edit == "old-schema":
        _edit_manifest(entry, schema=1)
    elif edit == "no-digest":
        del man["library_sha256"]
        (entry / MANIFEST_NAME).write_text(json.dumps(man))
    else:
        _edit_manifest(entry, key="0" * 64)
    reason = {"namespace": "namespace-mismatch", "inputs": "inputs-mismatch", "old-schema": "bad-manifest",
              "no-digest": "no-digest", "key": "key-mismatch"}[edit]
    (result,), _ = load_in_child(template.env(cache, INTEG_CXX="fail"))
    assert not result["ok"] and result["code"] == "compile_error", result
    assert quarantined(cache) == [f"{OP}-{template.key}-{reason}"]


@pytest.mark.parametrize("damage", ["nested", "not-utf8", "oversized", "wrong-type"])
def test_unparsable_manifest_is_quarantined_and_rebuilt(template, tmp_path, damage):
    """A manifest that cannot be parsed for any reason (a RecursionError included) is damage like any other:
    the entry is quarantined and the op rebuilt, on the first load and every later one."""
    cache = template.clone(tmp_path / "c")
    path = cache / template.entry / MANIFEST_NAME
    man = json.loads(path.read_text())
    if damage == "nested":
        path.write_text(json.dumps(man)[:-1] + ', "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    elif damage == "not-utf8":
        path.write_bytes(json.dumps(man).encode()[:-1] + b', "x": "' + bytes([0xFF, 0xFE]) + b'"}')
    elif damage == "oversized":
        path.write_text(json.dumps({**man, "pad": " " * (2 << 20)}))
    else:
        _edit_manifest(cache / template.entry, library_size=str(man["library_size"]))
    (first,), stderr = load_in_child(template.env(cache))
    assert first["ok"] and first["correct"] and first["source"] == "built", first
    assert quarantined(cache) == [f"{OP}-{template.key}-bad-manifest"] and stderr.count("moved it to") == 1
    assert integrity.inspect_entry(cache / template.entry).ok
    (again,), _ = load_in_child(template.env(cache))
    assert again["ok"] and again["source"] == "cache", again


def test_inspect_entry_reasons(template, tmp_path):
    cache = template.clone(tmp_path / "c")
    entry = cache / template.entry
    assert not integrity.inspect_entry(cache / "ops" / OP / ("f" * 64)).present
    (entry / "op.so").unlink()
    assert integrity.inspect_entry(entry).reason == "no-library"
    (entry / MANIFEST_NAME).unlink()
    assert integrity.inspect_entry(entry).reason == "no-manifest"
    shutil.rmtree(entry)
    entry.symlink_to(template.root / template.entry)
    check = integrity.inspect_entry(entry)
    assert check.reason == "not-a-directory" and "symbolic link" in check.problem


def _cache_cmd(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    cache_cli.add_arguments(parser)
    return cache_cli.run(parser.parse_args(argv))


def _plant(good: Path, **input_changes) -> Path:
    """A copy of ``good`` whose recorded inputs differ by ``input_changes``, under the key they hash to (an
    intact entry of another build, as far as ``cache ls`` can tell)."""
    man = json.loads((good / MANIFEST_NAME).read_text())
    inputs = {**man["inputs"], **input_changes}
    entry = good.parent / compute_key(inputs)
    shutil.copytree(good, entry)
    _edit_manifest(entry, key=entry.name, inputs=inputs)
    return entry


def test_ls_shows_damage_and_clean_stale_removes_it(template, tmp_path, monkeypatch, capsys):
    cache = template.clone(tmp_path / "c")
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(cache))
    good = cache / template.entry
    truncated = _plant(good, cxx_args=["-O0"])
    with open(truncated / "op.so", "r+b") as fh:
        fh.truncate(1000)
    edited = _plant(good, cxx_args=["-O1"])
    _edit_manifest(edited, inputs={**json.loads((edited / MANIFEST_NAME).read_text())["inputs"], "isa": "avx2"})
    stale = _plant(good, platform="plan9-mips")
    (good.parent / "notes.txt").write_text("a stray file")
    (cache / "quarantine" / f"{OP}-{'e' * 64}-digest-mismatch").mkdir()
    assert _cache_cmd(["ls"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[1]: line for line in out.splitlines()[2:]}
    assert rows[good.name[:12]].rstrip().endswith(" ok"), out
    assert "damaged: size-mismatch" in rows[truncated.name[:12]], out
    assert "damaged: inputs-mismatch" in rows[edited.name[:12]], out
    assert "stale: built for platform 'plan9-mips'" in rows[stale.name[:12]], out
    assert "quarantined: digest-mismatch" in rows["e" * 12], out
    assert "unexpected: a file" in out
    assert _cache_cmd(["clean", "--stale"]) == 0
    assert [p.name for p in Cache.open(cache).entries()] == [good.name]
    assert sorted(p.name for p in good.parent.iterdir()) == [good.name]
    assert quarantined(cache) == []


def test_damage_cannot_be_planted_in_a_prebuilt(template, tmp_path):
    """A prebuilt artifact is checked the same way; one that fails is skipped with one warning (it is not ours
    to quarantine) and the op is built just in time (made to fail here)."""
    prebuilt = tmp_path / "prebuilt"
    shutil.copytree(template.root / "ops", prebuilt)
    (prebuilt / OP / template.key / "op.so").write_bytes(b"\x7fELF" + b"\0" * 100)
    cache = tmp_path / "empty-cache"
    env = template.env(cache, INTEG_CXX="fail", ANYACCEL_PREBUILT_DIR=str(prebuilt))
    (result,), stderr = load_in_child(env)
    assert not result["ok"] and result["code"] == "compile_error", result
    assert stderr.count("prebuilt op cpu_lion") == 1 and "damaged" in stderr
    # intact, it is used without any compiler run
    shutil.copyfile(template.root / template.entry / "op.so", prebuilt / OP / template.key / "op.so")
    (used,), _ = load_in_child(env)
    assert used["ok"] and used["source"] == "prebuilt" and used["correct"], used


WARM = r"""
import json, time
import torch
from anyaccel.op_builder import CPUAdamBuilder
from anyaccel.op_builder.core import manifest as mf
spent = []
real = mf.fd_digest
def timed(fd):
    t = time.perf_counter()
    try:
        return real(fd)
    finally:
        spent.append(time.perf_counter() - t)
mf.fd_digest = timed
c0, t0 = time.process_time(), time.perf_counter()
m = CPUAdamBuilder().load()
t1, c1 = time.perf_counter(), time.process_time()
print(json.dumps({"load_ms": (t1 - t0) * 1e3, "cpu_ms": (c1 - c0) * 1e3, "digest_ms": sum(spent) * 1e3,
                  "digests": len(spent), "source": m.source}))
"""


def test_a_warm_load_checks_one_digest_and_builds_nothing(tmp_path):
    """CPUAdamBuilder().load() in fresh processes on a warm cache reads the library from the cache and hashes it
    exactly once before ``dlopen``. What that costs is measured, not asserted here:
    ``benchmarks/build_times.py`` prints the warm-load time and the digest's share; the timings of these runs are
    printed too (``pytest -s``)."""
    env = child_env(tmp_path / "cache", Path(shutil.which("c++") or "c++"))
    env.pop("ANYACCEL_CPU_ISA")
    env.pop("CXX")

    def once() -> dict:
        out = subprocess.run([sys.executable, "-c", WARM], env=env, capture_output=True, text=True, timeout=300,
                             cwd=REPO)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = once()
    assert first["source"] == "built" and first["digests"] >= 1, first
    runs = [once() for _ in range(3)]
    assert all(r["source"] == "cache" and r["digests"] == 1 for r in runs), runs
    print(f"\nwarm CPUAdamBuilder().load() (ms wall / CPU / digest): "
          f"{[(round(r['load_ms'], 2), round(r['cpu_ms'], 2), round(r['digest_ms'], 3)) for r in runs]}")
