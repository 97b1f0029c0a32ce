"""``lazy_exports``: names imported on first access, stored once, fallbacks not stored, typed misses."""

from __future__ import annotations

import sys
import textwrap

import pytest

from anyaccel.lazy_exports import lazy_exports


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A throw-away package ``lazypkg`` with a submodule ``impl`` (counting its imports) and ``other``."""
    root = tmp_path / "lazypkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "impl.py").write_text(textwrap.dedent("""
        import builtins
        builtins.lazypkg_imports = getattr(builtins, "lazypkg_imports", 0) + 1
        value = 42
        def thing():
            return "thing"
    """))
    (root / "other.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtins
    import importlib

    monkeypatch.setattr(builtins, "lazypkg_imports", 0, raising=False)
    module = importlib.import_module("lazypkg")
    yield module
    for name in [m for m in sys.modules if m == "lazypkg" or m.startswith("lazypkg.")]:
        del sys.modules[name]


def test_an_export_is_imported_on_first_access_and_stored(package) -> None:
    import builtins

    getattr_, dir_ = lazy_exports("lazypkg", {"thing": "lazypkg.impl", "answer": "lazypkg.impl:value"})
    package.__getattr__, package.__dir__ = getattr_, dir_
    assert "lazypkg.impl" not in sys.modules
    assert package.thing() == "thing" and package.answer == 42
    assert vars(package)["answer"] == 42  # stored: the next lookup does not reach __getattr__
    assert builtins.lazypkg_imports == 1
    assert {"thing", "answer"} <= set(dir(package))


def test_submodules_and_misses(package) -> None:
    package.__getattr__, _ = lazy_exports("lazypkg", {}, submodules=True)
    assert package.other.__name__ == "lazypkg.other"
    with pytest.raises(AttributeError, match="module 'lazypkg' has no attribute 'missing'"):
        package.missing  # noqa: B018
    with pytest.raises(AttributeError, match="'_other'"):
        package._other  # noqa: B018 (private names are never submodule lookups)
    package.__getattr__, _ = lazy_exports("lazypkg", {})
    with pytest.raises(AttributeError):
        package.impl  # noqa: B018 (without submodules=True a submodule is not imported)


def test_a_fallback_answers_other_names_and_is_not_stored(package) -> None:
    seen: list[str] = []

    def fallback(name: str) -> object:
        seen.append(name)
        if name.endswith("Builder"):
            return name.lower()
        raise AttributeError(name)

    package.__getattr__, package.__dir__ = lazy_exports("lazypkg", {}, fallback=fallback,
                                                       more_names=lambda: ["XBuilder"])
    assert package.XBuilder == "xbuilder" and package.XBuilder == "xbuilder"
    assert seen == ["XBuilder", "XBuilder"] and "XBuilder" not in vars(package)
    assert "XBuilder" in dir(package) and "__name__" in dir(package)
    package.__getattr__, package.__dir__ = lazy_exports("lazypkg", {"thing": "lazypkg.impl"}, fallback=fallback,
                                                       more_names=lambda: ["XBuilder"], dir_lists_globals=False)
    assert dir(package) == ["XBuilder", "thing"]
    with pytest.raises(AttributeError):
        package.other_name  # noqa: B018


def test_the_packages_use_it() -> None:
    import anyaccel
    import anyaccel.op_builder
    import anyaccel.ops

    for module in (anyaccel, anyaccel.ops, anyaccel.op_builder):
        assert module.__getattr__.__module__ == "anyaccel.lazy_exports"
