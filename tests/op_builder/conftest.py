"""Fixtures of the op-builder tests: a per-session cache and a counting compiler wrapper."""

from __future__ import annotations

from pathlib import Path

import pytest

from opb_helpers import REAL_CXX, make_wrapper


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory) -> Path:
    """One cache root per session for builds shared between tests."""
    root = tmp_path_factory.mktemp("opcache")
    root.chmod(0o700)
    return root


@pytest.fixture(autouse=True)
def _cache_env(monkeypatch, session_cache) -> None:
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(session_cache))
    monkeypatch.delenv("ANYACCEL_CPU_ISA", raising=False)
    monkeypatch.delenv("ANYACCEL_PREBUILT_DIR", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("MAX_JOBS", raising=False)


@pytest.fixture
def counting_cxx(tmp_path):
    """A CXX wrapper that appends a line to a count file per compilation (``-c``) and runs the real g++.

    Returns (wrapper path, count function).
    """
    count_file = tmp_path / "compiles.txt"
    wrapper = make_wrapper(tmp_path, f'case " $* " in *" -c "*) echo $$ >> "{count_file}";; esac\n'
                                     f'exec {REAL_CXX} "$@"\n')

    def count() -> int:
        return len(count_file.read_text().split()) if count_file.exists() else 0

    return wrapper, count


