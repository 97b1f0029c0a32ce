"""Ownership and modes on every path from the cache root to the library, explicit modes
whatever the umask, lock files never followed. "Another user" is uid 65534 (``os.chown`` as root)."""

from __future__ import annotations

import os
import stat

import pytest
from integrity_support import NOBODY, OP, Template, load_in_child, modes, quarantined

from anyaccel.op_builder.core.cache import Cache, check_secure, make_dirs
from anyaccel.op_builder.core.lock import BuildLock
from anyaccel.op_builder.errors import CacheSecurityError

pytestmark = pytest.mark.slow
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to another user (chown)")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Template:
    return Template(tmp_path_factory.mktemp("modes"))


def test_umask_0_still_gives_private_modes(template):
    """The template was built by a child under ``umask 0``: nothing in the cache is open to others."""
    found = modes(template.root)
    assert found, "empty cache"
    for path, kind_mode in found.items():
        kind, mode = kind_mode.split()
        expected = {"dir": "700", "file": "700" if path.endswith("op.so") else "600"}[kind]
        assert mode == expected, f"{path}: {kind_mode}"
    assert any(p.startswith("locks/") for p in found), found


def test_make_dirs_ignores_the_umask(tmp_path):
    old = os.umask(0)
    try:
        make_dirs(tmp_path / "a" / "b" / "c")
    finally:
        os.umask(old)
    for p in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p


@as_root
@pytest.mark.parametrize("case", ["entry-foreign-0777", "library-foreign", "manifest-writable"])
def test_foreign_or_writable_entry_is_quarantined(template, tmp_path, case):
    cache = template.clone(tmp_path / "c")
    entry = cache / template.entry
    if case == "entry-foreign-0777":
        os.chown(entry, NOBODY, NOBODY)
        entry.chmod(0o777)
    elif case == "library-foreign":
        os.chown(entry / "op.so", NOBODY, NOBODY)
    else:
        (entry / "manifest.json").chmod(0o666)
    (result,), stderr = load_in_child(template.env(cache, INTEG_CXX="fail"))
    assert not result["ok"] and result["code"] == "compile_error", result  # rebuilt (made to fail), not loaded
    assert quarantined(cache) == [f"{OP}-{template.key}-insecure"], stderr


@as_root
@pytest.mark.parametrize("case", ["op-dir-0777", "op-dir-symlink-to-foreign", "op-dir-foreign"])
def test_insecure_op_dir_is_refused(template, tmp_path, case):
    cache = template.clone(tmp_path / "c")
    op_dir = cache / "ops" / OP
    if case == "op-dir-0777":
        op_dir.chmod(0o777)
    elif case == "op-dir-foreign":
        os.chown(op_dir, NOBODY, NOBODY)
    else:  # another user's 0777 folder holding a perfect copy of the entry
        theirs = tmp_path / "theirs"
        op_dir.rename(theirs)
        os.chown(theirs, NOBODY, NOBODY)
        theirs.chmod(0o777)
        op_dir.symlink_to(theirs)
    (result,), _ = load_in_child(template.env(cache))
    assert not result["ok"] and result["type"] == "CacheSecurityError" and result["code"] == "cache_insecure", result
    assert result["path"] == str(op_dir) and str(op_dir) in result["message"]
    fix = {"op-dir-0777": "chmod go-w", "op-dir-foreign": "set ANYACCEL_CACHE_DIR",
           "op-dir-symlink-to-foreign": "Remove it"}[case]
    assert fix in result["message"], result["message"]


def test_symlinked_lock_is_never_followed(template, tmp_path):
    cache = template.clone(tmp_path / "c")
    (cache / template.entry / "op.so").write_bytes(b"")  # a build is needed, so the lock is taken
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    lock = cache / "locks" / f"{OP}-{template.key}.lock"
    lock.unlink()
    lock.symlink_to(victim)
    (result,), _ = load_in_child(template.env(cache, INTEG_CXX="fail"))
    assert not result["ok"] and result["type"] == "CacheSecurityError", result
    assert "symbolic link" in result["message"] and str(lock) in result["message"]
    assert victim.read_text() == "precious"
    with pytest.raises(CacheSecurityError, match="never follows"):
        BuildLock(lock, "x", timeout_s=1).acquire()
    assert victim.read_text() == "precious"


def test_lock_file_created_private_and_a_widened_one_refused_untouched(tmp_path):
    path = tmp_path / "x.lock"
    old = os.umask(0)
    try:
        with BuildLock(path, "x", timeout_s=1):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        os.umask(old)
    path.write_bytes(b"keep")
    path.chmod(0o666)  # not what anyaccel makes: refused, neither chmod-ed nor truncated
    with pytest.raises(CacheSecurityError, match="has mode 0666, not 0600"), BuildLock(path, "x", timeout_s=1):
        pass
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 and path.read_bytes() == b"keep"


@as_root
def test_root_symlink_only_when_the_user_made_it(template, tmp_path):
    cache = template.clone(tmp_path / "c")
    link = tmp_path / "link"
    link.symlink_to(cache)
    (mine,), _ = load_in_child(template.env(link))
    assert mine["ok"] and mine["source"] == "cache", mine
    os.lchown(link, NOBODY, NOBODY)
    (theirs,), _ = load_in_child(template.env(link))
    assert not theirs["ok"] and theirs["type"] == "CacheSecurityError", theirs
    assert "symbolic link owned by uid 65534" in theirs["message"]
    with pytest.raises(CacheSecurityError, match="symbolic link owned by uid"):
        Cache.open(link)


def test_symlinked_subdirectory_refused(tmp_path):
    Cache.open(tmp_path / "c")
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    os.rmdir(tmp_path / "c" / "logs")
    (tmp_path / "c" / "logs").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CacheSecurityError, match="symbolic link") as err:
        Cache.open(tmp_path / "c")
    assert err.value.path == tmp_path / "c" / "logs"


def test_check_secure_names_path_and_fix(tmp_path):
    d = tmp_path / "d"
    d.mkdir(mode=0o700)
    check_secure(d)
    d.chmod(0o775)
    with pytest.raises(CacheSecurityError, match="chmod go-w") as err:
        check_secure(d, what="op cache directory")
    assert str(d) in str(err.value) and err.value.code == "cache_insecure" and err.value.fix
