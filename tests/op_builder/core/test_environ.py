"""``scoped_environ`` (anyaccel/op_builder/core/environ.py): a build's variables are set only while it runs."""

from __future__ import annotations

import os

import pytest

from anyaccel.op_builder.core.environ import scoped_environ


def test_scoped_environ_restores_exactly(monkeypatch):
    monkeypatch.setenv("ANYACCEL_T_KEEP", "old")
    monkeypatch.delenv("ANYACCEL_T_NEW", raising=False)
    before = dict(os.environ)
    with pytest.raises(RuntimeError):
        with scoped_environ({"ANYACCEL_T_KEEP": "new", "ANYACCEL_T_NEW": "x", "HOME": None}):
            assert os.environ["ANYACCEL_T_KEEP"] == "new" and "HOME" not in os.environ
            raise RuntimeError("build failed")
    assert dict(os.environ) == before


def test_nested_scopes_restore_in_order(monkeypatch):
    monkeypatch.setenv("ANYACCEL_T_A", "0")
    with scoped_environ({"ANYACCEL_T_A": "1"}):
        with scoped_environ({"ANYACCEL_T_A": "2", "ANYACCEL_T_B": "b"}):
            assert os.environ["ANYACCEL_T_A"] == "2"
        assert os.environ["ANYACCEL_T_A"] == "1" and "ANYACCEL_T_B" not in os.environ
    assert os.environ["ANYACCEL_T_A"] == "0"
