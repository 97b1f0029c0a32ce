"""Cache roots another user could write to are refused."""

from __future__ import annotations

import os

import pytest

from anyaccel.op_builder.core.cache import Cache, default_cache_root
from anyaccel.op_builder.errors import CacheSecurityError


def test_world_writable_root_refused(tmp_path):
    planted = tmp_path / "planted"
    planted.mkdir()
    planted.chmod(0o777)
    with pytest.raises(CacheSecurityError, match="writable by group or others") as err:
        Cache.open(planted)
    assert str(planted) in str(err.value) and "ANYACCEL_CACHE_DIR" in str(err.value)


def test_group_writable_entry_dir_refused(tmp_path):
    Cache.open(tmp_path / "c")
    (tmp_path / "c" / "ops").chmod(0o770)
    with pytest.raises(CacheSecurityError, match="ops"):
        Cache.open(tmp_path / "c")


def test_other_owner_refused(tmp_path, monkeypatch):
    root = tmp_path / "c"
    root.mkdir(mode=0o700)
    if os.geteuid() == 0:  # root's own directories are trusted: give this one to another user
        os.chown(root, 65534, 65534)
    else:
        monkeypatch.setattr(os, "geteuid", lambda: os.stat(root).st_uid + 1)
    with pytest.raises(CacheSecurityError, match="owned by uid"):
        Cache.open(root)


def test_symlinked_root_only_when_the_user_made_it(tmp_path):
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    Cache.open(tmp_path / "link")  # the user's own link to a private directory is accepted
    if os.geteuid() != 0:
        pytest.skip("needs root to give the link to another user")
    os.lchown(tmp_path / "link", 65534, 65534)
    with pytest.raises(CacheSecurityError, match="symbolic link"):
        Cache.open(tmp_path / "link")


def test_private_root_created_and_env_wins(tmp_path):
    cache = Cache.open(tmp_path / "new" / "root")
    assert (cache.root.stat().st_mode & 0o777) == 0o700
    assert default_cache_root({"ANYACCEL_CACHE_DIR": "/x/y", "XDG_CACHE_HOME": "/z"}) == default_cache_root(
        {"ANYACCEL_CACHE_DIR": "/x/y"})
    assert str(default_cache_root({"XDG_CACHE_HOME": "/z"})) == "/z/anyaccel"
