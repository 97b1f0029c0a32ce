"""anyaccel/op_builder/builders.py: one checked-in class per native build, in step with the op specs
(scripts/gen_builders.py), returned for the builds' own names, two of anyaccel's bases deep, imported lazily; and
anyaccel/integrations/deepspeed/alias_builders.py, the same for DeepSpeed's alias names, from its table."""

from __future__ import annotations

import dataclasses
import functools
import re
import subprocess
import sys
from pathlib import Path

from anyaccel import get_accelerator
from anyaccel.integrations.deepspeed import alias_builders, builder_names
from anyaccel.op_builder import builders
from anyaccel.op_builder.backends.cpu import TorchCPUOpBuilder
from anyaccel.op_builder.classes import _checked_in_class, builder_class, spec_builds
from anyaccel.op_builder.core import manifest as mf
from anyaccel.op_builder.core.builder import OpBuilder
from anyaccel.ops.registry import get_builder_class

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_builders.py"
ALIAS_MODULE = ROOT / "anyaccel" / "integrations" / "deepspeed" / "alias_builders.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_the_module_agrees_with_the_specs() -> None:
    result = _run("--check")
    assert result.returncode == 0, result.stderr


def test_a_module_out_of_step_fails_the_check_and_is_rewritten(tmp_path: Path) -> None:
    out = tmp_path / "builders.py"
    text = (ROOT / "anyaccel" / "op_builder" / "builders.py").read_text()
    out.write_text(text.replace('NAME = "cpu_adam"', 'NAME = "cpu_adam_old"'))
    result = _run("--check", "--out", str(out))
    assert result.returncode == 1 and "cpu_adam_old" in result.stderr
    assert _run("--out", str(out)).returncode == 0 and out.read_text() == text


def test_an_alias_module_out_of_step_fails_the_check_and_is_rewritten(tmp_path: Path) -> None:
    out, own = tmp_path / "alias_builders.py", tmp_path / "builders.py"
    own.write_text((ROOT / "anyaccel" / "op_builder" / "builders.py").read_text())
    text = ALIAS_MODULE.read_text()
    out.write_text(text.replace("class FusedLambBuilder(", "class FusedLambBuilderOld("))
    result = _run("--check", "--out", str(own), "--aliases-out", str(out))
    assert result.returncode == 1 and "FusedLambBuilderOld" in result.stderr
    assert "DeepSpeed alias table" in result.stderr
    assert _run("--out", str(own), "--aliases-out", str(out)).returncode == 0 and out.read_text() == text


def test_every_deepspeed_alias_is_its_checked_in_class_with_two_of_our_bases() -> None:
    """The class create_op_builder gives for a DeepSpeed alias: grep-able in the integration's module, the build's
    base (two of ours), and the build's NAME, key and answers, as the build's own class."""
    text = ALIAS_MODULE.read_text()
    assert alias_builders.__file__ == str(ALIAS_MODULE) and builder_names.CLASSES_MODULE == alias_builders.__name__
    for name, family, build, accelerators in builder_names.ALIASES:
        own = builder_class(family, build)
        for acc in accelerators:
            cls = get_builder_class(name, acc)
            assert cls is getattr(alias_builders, name) and cls.__module__ == alias_builders.__name__
            ours = [c for c in cls.__mro__[1:] if c.__module__.startswith("anyaccel.")]
            assert len(ours) <= 2 and ours[-1] is OpBuilder and cls.__mro__[1:] == own.__mro__[1:], (cls, ours)
            assert (cls.__name__, cls.NAME, cls.BUILD_VAR, cls.SPEC, cls.BUILD) == \
                (name, own.NAME, own.BUILD_VAR, own.SPEC, own.BUILD)
            assert re.search(rf"^class {name}\({cls.__mro__[1].__name__}\):$", text, re.M)
            alias, mine = cls(), own()
            assert (alias.name, alias.absolute_name(), alias.is_compatible()) == \
                (mine.name, mine.absolute_name(), mine.is_compatible())
            assert mf.compute_key(alias.key_inputs()) == mf.compute_key(mine.key_inputs())  # one cache entry


def test_every_own_build_is_its_checked_in_class_with_two_of_our_bases() -> None:
    own = [(s, b) for s, b in spec_builds() if s.source.startswith("anyaccel.")]
    assert own and len(builders.BY_BUILD) == len(own)
    for s, b in own:
        cls = builder_class(s.family, b.name)
        assert cls is builders.BY_BUILD[(s.family, b.name)] and cls.__module__ == builders.__name__
        assert (cls.NAME, cls.BUILD_VAR, cls.SPEC, cls.BUILD) == (b.name, b.build_var, s, b)
        ours = [c for c in cls.__mro__[1:] if c.__module__.startswith("anyaccel.")]
        assert len(ours) <= 2 and ours[-1] is OpBuilder, (cls, ours)
        assert cls.__name__ == b.builder  # DeepSpeed's name, whichever accelerator
        assert functools.reduce(getattr, cls.__qualname__.split("."), builders) is cls  # its name finds it
        text = Path(builders.__file__).read_text()
        assert re.search(rf"^ *class {cls.__name__}\({cls.__mro__[1].__name__}\):$", text, re.M)


def test_the_user_facing_names_give_the_checked_in_class() -> None:
    from anyaccel.op_builder import CPUAdamBuilder

    assert CPUAdamBuilder is builders.CPUAdamBuilder
    assert CPUAdamBuilder.__mro__[1:] == (TorchCPUOpBuilder, OpBuilder, object)
    assert type(get_accelerator().create_op_builder("CPUAdamBuilder")) is builders.CPUAdamBuilder


def test_a_build_the_module_was_not_generated_from_gets_a_made_class() -> None:
    s, b = next((s, b) for s, b in spec_builds() if b.name == "cpu_adam")
    changed = dataclasses.replace(b, cxx_args=(*b.cxx_args, "-DANYACCEL_CHANGED"))
    assert _checked_in_class(s, b) is builders.CPUAdamBuilder
    assert _checked_in_class(s, changed) is None


def test_importing_the_package_does_not_import_the_module() -> None:
    code = ("import sys, anyaccel.op_builder; "
            "assert 'anyaccel.op_builder.builders' not in sys.modules, 'imported eagerly'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
