"""Fixtures of the op-builder tests: a per-session cache and a counting compiler wrapper.

The helpers (``opb_helpers``, ``toy_builder``) live beside this file; the test modules sit in
subdirectories mirroring ``anyaccel/op_builder`` (``core/``, ``toolchains/``, ``backends/``, ``cli/``), so
this directory is put on ``sys.path`` for them whatever pytest's import mode.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from opb_helpers import REAL_CXX, make_wrapper  # noqa: E402

#: Variables the op builders read that a developer's shell might set; every test starts without them.
BUILDER_VARIABLES = ("ANYACCEL_CPU_ISA", "ANYACCEL_PREBUILT_DIR", "CXX", "MAX_JOBS", "ANYACCEL_BUILD_TIMEOUT",
                     "ANYACCEL_TORCH_TARGET", "ANYACCEL_BUILD_OPS", "ANYACCEL_IMPL_ADAM", "ANYACCEL_IMPL_LION")


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory) -> Path:
    """One cache root per session for builds shared between tests."""
    root = tmp_path_factory.mktemp("opcache")
    root.chmod(0o700)
    return root


@pytest.fixture(autouse=True)
def _cache_env(monkeypatch, session_cache) -> None:
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(session_cache))
    for name in BUILDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


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
