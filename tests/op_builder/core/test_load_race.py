"""What is hashed is what is loaded: a library rewritten in place (same inode, size and mtime) after its
digest was checked never runs. The foreign library is a tiny C library whose constructor writes a marker
file, so the test sees whether its code ran at all, not only whether the op worked. Loads run in children.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from integrity_support import BUILDER, Template, run_python
from opb_helpers import unique
from toy_builder import ToyBuilder

from anyaccel.op_builder.core import integrity

pytestmark = pytest.mark.slow

FOREIGN_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void foreign_constructor(void) {
    FILE *f = fopen(getenv("RACE_MARKER"), "w");
    if (f) { fputs("the foreign constructor ran\n", f); fclose(f); }
}
"""

# Swaps the library's bytes in place for the foreign ones (padded to the same size, mtime restored) at the
# moment RACE_AT names, then loads the op.
RACE_SCRIPT = r"""
import json, os, sys, traceback
import torch
from anyaccel.op_builder import {builder}
from anyaccel.op_builder.core import integrity
from anyaccel.op_builder.errors import OpBuilderError

def swap(library):
    st = os.stat(library)
    foreign = open(os.environ["RACE_FOREIGN"], "rb").read()
    with open(library, "r+b") as fh:  # in place: same inode
        fh.write(foreign + b"\0" * (st.st_size - len(foreign)))
    os.utime(library, ns=(st.st_atime_ns, st.st_mtime_ns))

swapped = []
if os.environ["RACE_AT"] == "after-check":  # between the digest check and the load
    real_inspect = integrity.inspect_entry
    def inspect_entry(entry, *args, **kwargs):
        check = real_inspect(entry, *args, **kwargs)
        if check.ok and not swapped:
            swapped.append(str(check.library))
            swap(check.library)
        return check
    integrity.inspect_entry = inspect_entry
else:  # at dlopen itself: every loader entry point swaps the file first
    import ctypes
    real_cdll_init = ctypes.CDLL.__init__
    def cdll_init(self, name, *args, **kwargs):
        lib = os.environ["RACE_LIBRARY"]
        if name is not None and not swapped and os.path.exists(lib):
            swapped.append(lib)
            swap(lib)
        return real_cdll_init(self, name, *args, **kwargs)
    ctypes.CDLL.__init__ = cdll_init
try:
    m = {builder}().load()
    p = torch.ones(64)
    m.lion_step([p], [torch.full((64,), 0.5)], [torch.zeros(64)], [], 0.1, 0.9, 0.99, 0.0)
    result = {{"ok": True, "source": m.source, "correct": bool(torch.allclose(p, torch.full((64,), 0.9)))}}
except OpBuilderError as exc:
    result = {{"ok": False, "type": type(exc).__name__, "code": exc.code, "message": str(exc)}}
except Exception as exc:
    result = {{"ok": False, "type": type(exc).__name__, "code": None, "message": traceback.format_exc()}}
result["swapped"] = swapped
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Template:
    return Template(tmp_path_factory.mktemp("race"))


@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the foreign library")
    base = tmp_path_factory.mktemp("foreign")
    (base / "foreign.c").write_text(FOREIGN_C)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-s", str(base / "foreign.c"), "-o", str(base / "foreign.so")],
                   check=True, capture_output=True, timeout=120)
    return base / "foreign.so"


@pytest.mark.parametrize("moment", ["after-check", "at-dlopen"])
def test_a_library_rewritten_in_place_after_its_check_never_runs(template, foreign, tmp_path, moment):
    cache = template.clone(tmp_path / "c")
    library = cache / template.entry / "op.so"
    assert foreign.stat().st_size < library.stat().st_size, "the foreign library must fit in place"
    marker = tmp_path / "marker"
    env = template.env(cache, INTEG_CXX="fail", RACE_AT=moment, RACE_FOREIGN=str(foreign), RACE_MARKER=str(marker),
                       RACE_LIBRARY=str(library))
    proc = run_python(RACE_SCRIPT.format(builder=BUILDER), env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["swapped"] == [str(library)], result
    assert not marker.exists(), f"the foreign library's constructor ran: {result}"
    if moment == "at-dlopen":  # the bytes were read and hashed before the swap: those are what was loaded
        assert result["ok"] and result["correct"] and result["source"] == "cache", result
    else:  # the bytes read for loading are not the recorded ones: a typed error, the entry set aside
        assert not result["ok"] and result["type"] == "BuildError" and result["code"] == "load_error", result
        assert "changed after its integrity check" in result["message"], result["message"]


def test_two_entries_load_side_by_side_and_a_second_load_reuses_the_first():
    """Each entry is loaded from a copy of its own (the loader records a library by path and by inode, so two
    libraries must never share either), and a second ``load()`` of one entry loads nothing."""
    kept = len(integrity._KEPT_FDS)
    variants = unique(), unique()
    first, second = ToyBuilder(variants[0]).load(), ToyBuilder(variants[1]).load()
    assert first.namespace != second.namespace
    assert len(integrity._KEPT_FDS) == kept + 2
    import torch

    for module in (first, second):
        x = torch.arange(5.0)
        getattr(torch.ops, module.namespace).scale_(x, 2.0)
        assert torch.equal(x, torch.arange(5.0) * 2)
        assert str(module.path) in torch.ops.loaded_libraries
    assert ToyBuilder(variants[0]).load() is first
    assert len(integrity._KEPT_FDS) == kept + 2, "a second load() loads nothing"


def test_where_there_is_no_memfd_a_private_file_is_loaded_and_removed(monkeypatch, tmp_path):
    monkeypatch.setattr(integrity, "_memfd", lambda name: None)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    kept = len(integrity._KEPT_FDS)
    modules = [ToyBuilder(unique()).load() for _ in range(2)]
    import torch

    for module in modules:
        x = torch.ones(3)
        getattr(torch.ops, module.namespace).scale_(x, 3.0)
        assert torch.equal(x, torch.full((3,), 3.0))
    assert len(integrity._KEPT_FDS) == kept and not list(tmp_path.iterdir()), "the private copies are removed"


def test_memfd_copy_is_sealed(tmp_path):
    probe = integrity._memfd("probe")
    if probe is None:
        pytest.skip("no memfd here")
    os.close(probe)
    lib = tmp_path / "lib.bin"
    lib.write_bytes(b"abc" * 1000)
    from anyaccel.op_builder.core.manifest import file_digest

    kept = len(integrity._KEPT_FDS)
    with integrity.verified_copy(lib, file_digest(lib), 3000, "probe") as path:
        with pytest.raises(PermissionError):
            with open(path, "r+b") as fh:
                fh.write(b"x")
        assert Path(path).read_bytes() == b"abc" * 1000
    assert len(integrity._KEPT_FDS) == kept + 1
    os.close(integrity._KEPT_FDS.pop())
    with pytest.raises(integrity.LibraryChangedError):
        with integrity.verified_copy(lib, "0" * 64, 3000, "probe"):
            pass
