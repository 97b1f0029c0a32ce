"""A stale install (metadata older than the entry-point groups the code relies on) is an error, not a silent loss."""

from __future__ import annotations

import importlib.metadata
import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from anyaccel.op_builder.core import entry_points as ep_mod
from anyaccel.op_builder.core import module_functions
from anyaccel.op_builder.errors import DIAGNOSES, StaleInstallError

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _fresh_caches():
    ep_mod.check_own_group.cache_clear()
    module_functions.providers.cache_clear()
    yield
    ep_mod.check_own_group.cache_clear()
    module_functions.providers.cache_clear()


def _fake_distribution(monkeypatch: pytest.MonkeyPatch, entries: list[importlib.metadata.EntryPoint]) -> None:
    real = importlib.metadata.distribution

    def distribution(name: str):
        if name == ep_mod.DISTRIBUTION:
            return SimpleNamespace(version="0.0.stale", entry_points=importlib.metadata.EntryPoints(entries),
                                   locate_file=lambda path: Path("/checkout") / path)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)


def test_own_groups_are_the_groups_pyproject_declares():
    declared = set(re.findall(r'^\[project\.entry-points\."([^"]+)"\]', (REPO / "pyproject.toml").read_text(), re.M))
    assert declared == set(ep_mod.OWN_GROUPS)


def test_the_installed_metadata_has_every_own_group():
    for group in ep_mod.OWN_GROUPS:
        ep_mod.check_own_group(group)  # this environment is installed from this tree


def test_stale_metadata_raises_naming_the_reinstall(monkeypatch):
    console = importlib.metadata.EntryPoint("anyaccel", "anyaccel.cli:main", "console_scripts")
    _fake_distribution(monkeypatch, [console])
    with pytest.raises(StaleInstallError) as info:
        module_functions.providers()
    message = str(info.value)
    assert "anyaccel.module_functions" in message and "pip install -e ." in message and "0.0.stale" in message
    assert str(Path("/checkout")) in message and "anyaccel.egg-info" in message
    assert isinstance(info.value, RuntimeError) and info.value.fix == DIAGNOSES["stale_install"].fix


def test_a_loaded_module_is_not_made_without_its_functions(monkeypatch):
    _fake_distribution(monkeypatch, [])
    with pytest.raises(StaleInstallError):
        module_functions.for_build("adam", ("CPUAdamBuilder",))


def test_create_op_builder_of_a_contributed_name_is_not_lost(monkeypatch):
    from anyaccel.op_builder.core import aliases

    functions = importlib.metadata.EntryPoint("deepspeed", "anyaccel.integrations.deepspeed.abi:module_functions",
                                              module_functions.ENTRY_POINT_GROUP)
    _fake_distribution(monkeypatch, [functions])  # metadata from before the builder_aliases group
    aliases.contributed.cache_clear()
    try:
        with pytest.raises(StaleInstallError, match="anyaccel.builder_aliases"):
            aliases.contributed()
    finally:
        aliases.contributed.cache_clear()


def test_metadata_with_the_group_passes(monkeypatch):
    entry = importlib.metadata.EntryPoint("deepspeed", "anyaccel.integrations.deepspeed.abi:module_functions",
                                          module_functions.ENTRY_POINT_GROUP)
    _fake_distribution(monkeypatch, [entry])
    ep_mod.check_own_group(module_functions.ENTRY_POINT_GROUP)


def test_other_groups_are_not_checked(monkeypatch):
    _fake_distribution(monkeypatch, [])
    assert ep_mod.entry_points("someone.elses.group") == ()


def test_not_installed_warns(monkeypatch, caplog):
    def distribution(name: str):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    with caplog.at_level(logging.WARNING, logger=ep_mod.__name__):
        ep_mod.check_own_group(module_functions.ENTRY_POINT_GROUP)
    assert "pip install -e ." in caplog.text
