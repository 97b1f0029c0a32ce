"""Shared helpers for the ``anyaccel migrate`` tests."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="anyaccel migrate needs libcst: pip install 'anyaccel[migrate]'")
