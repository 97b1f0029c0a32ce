"""Shared helpers for the ``anyaccel migrate`` tests.

Without libcst only the modules that need no codemod are collected: the device-argument tests and the corpus
runs (which run the committed migrated scripts), so that ``-m gpu`` works on a GPU machine without libcst.
"""

from __future__ import annotations

from pathlib import Path

#: Test modules that never import libcst.
LIBCST_FREE = frozenset({"test_corpus.py", "test_device_arguments.py"})

try:
    import libcst  # noqa: F401
except ImportError:
    collect_ignore = sorted(p.name for p in Path(__file__).parent.glob("test_*.py") if p.name not in LIBCST_FREE)
