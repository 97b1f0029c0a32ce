"""Fixtures shared by the whole suite."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def op_cache_dir(tmp_path_factory):
    """A private op cache root (mode 0700) for this test session, so ops compile once per session."""
    root = tmp_path_factory.mktemp("anyaccel-cache")
    root.chmod(0o700)
    return root
