"""Builder aliases contributed by integrations (``anyaccel.builder_aliases``): validated against the specs,
published through the op registry, never hiding a build's own row."""

from __future__ import annotations

import logging

import pytest

from anyaccel.integrations.deepspeed import builder_names
from anyaccel.op_builder import classes
from anyaccel.op_builder.core import aliases
from anyaccel.ops import registry
from anyaccel.spec import SpecError


@pytest.fixture
def extra_aliases(monkeypatch: pytest.MonkeyPatch):
    """Replace the contributed aliases with DeepSpeed's plus the given ones."""

    def install(*extra: aliases.BuilderAlias) -> None:
        found = (*builder_names.builder_aliases(), *extra)
        monkeypatch.setattr(aliases, "contributed", lambda: found)

    return install


def test_deepspeeds_table_is_what_the_registry_serves():
    assert set(aliases.contributed()) == set(builder_names.builder_aliases())
    for name, family, build, accelerators in builder_names.ALIASES:
        for acc in accelerators:
            cls = registry.get_builder_class(name, acc)
            assert cls is not None and cls.__name__ == name and cls.NAME == build
        assert name in classes.builder_names(family, build)


@pytest.mark.parametrize("bad,words", [
    (aliases.BuilderAlias("FusedToyBuilder", "adam", "cpu_adam", ("*",)), "not '\\*'"),
    (aliases.BuilderAlias("FusedToyBuilder", "adam", "cpu_adam", ()), "at least one"),
    (aliases.BuilderAlias("Fused Toy", "adam", "cpu_adam", ("cpu",)), "identifier"),
    (aliases.BuilderAlias("FusedToyBuilder", "adam", "no_such_build", ("cpu",)), "no build"),
    (aliases.BuilderAlias("FusedToyBuilder", "adam", "CPUAdamBuilder", ("cpu",)), "NAME"),
    (aliases.BuilderAlias("FusedToyBuilder", "adam", "cpu_adam", ("cpu",), "toy:OtherBuilder"), "'<module>:Fused"),
    (aliases.BuilderAlias("FusedToyBuilder", "adam", "cpu_adam", ("cpu",), "FusedToyBuilder"), "'<module>:Fused"),
])
def test_an_alias_names_an_identifier_a_build_and_named_accelerators(bad: aliases.BuilderAlias, words: str):
    with pytest.raises(SpecError, match=words):
        bad.validate()


def test_an_alias_never_takes_a_builds_own_row(extra_aliases, caplog):
    extra_aliases(aliases.BuilderAlias("FusedAdamBuilder", "adam", "cpu_adam", ("cuda",)))
    classes._log_alias_clash.cache_clear()
    with caplog.at_level(logging.WARNING, logger=aliases.__name__):
        cls = registry.get_builder_class("FusedAdamBuilder", "cuda")
        assert caplog.text == ""  # the native row answers: the aliases are not even read
        assert "cuda" not in classes.alias_rows().get("FusedAdamBuilder", {})
    assert cls is not None and cls.NAME == "fused_adam"
    assert "already fills that row" in caplog.text


def test_a_new_alias_answers_through_the_registry(extra_aliases):
    extra_aliases(aliases.BuilderAlias("AdagradOnMpsBuilder", "adagrad", "cpu_adagrad", ("mps",)))
    cls = registry.get_builder_class("AdagradOnMpsBuilder", "mps")
    assert cls is not None and cls.NAME == "cpu_adagrad" and cls.__name__ == "AdagradOnMpsBuilder"
    assert registry.get_builder_class("AdagradOnMpsBuilder", "cuda") is None
    own = classes.builder_class("adagrad", "cpu_adagrad")  # a class made for it: the build's base, two of ours
    assert cls.__module__ == "anyaccel.op_builder" and cls.__mro__[1:] == own.__mro__[1:] and cls.BUILD is own.BUILD


def test_an_alias_naming_a_class_of_another_build_gets_a_made_class(extra_aliases, caplog):
    lion = f"{builder_names.CLASSES_MODULE}:FusedLionBuilder"  # cpu_lion's class, named for cpu_adam
    extra_aliases(aliases.BuilderAlias("FusedLionBuilder", "adam", "cpu_adam", ("mps",), lion),
                  aliases.BuilderAlias("MissingBuilder", "adam", "cpu_adam", ("mps",), "no.such.module:MissingBuilder"))
    cls = classes.builder_class("adam", "cpu_adam", "FusedLionBuilder")
    assert cls.NAME == "cpu_adam" and cls.__module__ == "anyaccel.op_builder"
    with caplog.at_level(logging.WARNING, logger=classes.__name__):
        missing = classes.builder_class("adam", "cpu_adam", "MissingBuilder")
    assert missing.NAME == "cpu_adam" and "no.such.module:MissingBuilder not importable" in caplog.text
