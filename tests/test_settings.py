"""anyaccel.settings: every ANYACCEL_* variable is declared once and parsed into a typed value or a typed error."""

from __future__ import annotations

import ast
import pickle
import re
from pathlib import Path

import pytest

from anyaccel import settings
from anyaccel.settings import Choice, CountOrChoice, Flag, PathSetting, Seconds, SettingError, Text

PACKAGE = Path(settings.__file__).resolve().parent
#: ANYACCEL_* names in the package's Python that are C preprocessor macros or family prefixes, not variables.
NOT_VARIABLES = {"ANYACCEL_DEFINE_OPS", "ANYACCEL_OP_NAMESPACE", "ANYACCEL_LIBRARY", "ANYACCEL_LIBRARY_IMPL",
                 "ANYACCEL_IMPL", "ANYACCEL_DTYPE_COMBOS", "ANYACCEL_OP_FAMILY", "ANYACCEL_BUILD_NAME",
                 "ANYACCEL_ISA_AVX2", "ANYACCEL_ISA_AVX512", "ANYACCEL_ISA_NEON", "ANYACCEL_ISA_SVE",
                 "ANYACCEL_BUILD_", "ANYACCEL_IMPL_", "ANYACCEL_SYCL_HOST_DEVICE"}


def test_every_variable_named_in_the_package_is_declared() -> None:
    declared = {s.name for s in settings.all_settings()}
    families = [s.name.partition("<")[0] for s in settings.all_settings() if "<" in s.name]
    named = {m for path in PACKAGE.rglob("*.py") for m in re.findall(r"\bANYACCEL_[A-Z0-9_]+", path.read_text())}
    undeclared = {n for n in named - declared - NOT_VARIABLES
                  if not any(n.startswith(f) and n != f for f in families)}
    assert not undeclared, f"declare these in anyaccel/settings.py: {sorted(undeclared)}"


def test_the_module_is_a_leaf() -> None:
    tree = ast.parse(Path(settings.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m.split(".")[0] == "anyaccel"}


@pytest.mark.parametrize("raw", ["abc", "nan", "inf", "-1", "0", "1e308"])
def test_seconds_refuse_what_would_never_or_always_time_out(raw: str) -> None:
    setting = Seconds("ANYACCEL_X_TIMEOUT", doc="", default="5", read_by="", default_s=5.0)
    with pytest.raises(SettingError, match=r"ANYACCEL_X_TIMEOUT=.* is not a finite positive number") as info:
        setting.get({"ANYACCEL_X_TIMEOUT": raw})
    assert info.value.name == "ANYACCEL_X_TIMEOUT" and info.value.value == raw and isinstance(info.value, ValueError)
    assert "e.g. 5" in str(info.value)


def test_seconds_values_and_default() -> None:
    setting = Seconds("ANYACCEL_X_TIMEOUT", doc="", default="5", read_by="", default_s=5.0)
    assert setting.get({}) == 5.0 and setting.get({"ANYACCEL_X_TIMEOUT": " "}) == 5.0
    assert setting.get({"ANYACCEL_X_TIMEOUT": " 2.5 "}) == 2.5


def test_a_caller_chooses_the_error_class() -> None:
    class MyError(SettingError):
        pass

    setting = Seconds("ANYACCEL_X_TIMEOUT", doc="", default="5", read_by="", default_s=5.0)
    with pytest.raises(MyError):
        setting.get({"ANYACCEL_X_TIMEOUT": "never"}, error=MyError)
    from anyaccel.op_builder.errors import SettingError as BuilderSettingError

    with pytest.raises(SettingError) as info:
        settings.BUILD_TIMEOUT.get({"ANYACCEL_BUILD_TIMEOUT": "-3"}, error=BuilderSettingError)
    assert isinstance(info.value, BuilderSettingError) and info.value.code == "bad_setting"


def test_errors_pickle() -> None:
    error = SettingError("ANYACCEL_X='y' is not accepted", "ANYACCEL_X", "y")
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.name, copy.value) == (str(error), "ANYACCEL_X", "y")


def test_flags() -> None:
    words = Flag("ANYACCEL_X", doc="", default="off", read_by="", words=True)
    assert [words.get({"ANYACCEL_X": v}) for v in ("1", "TRUE", "yes", "On", "0", "no", "")] == [True] * 4 + [False] * 3
    exact = Flag("ANYACCEL_X", doc="", default="off", read_by="")
    assert exact.get({"ANYACCEL_X": "1"}) and not exact.get({"ANYACCEL_X": "true"}) and not exact.get({})
    assert [exact.state({"ANYACCEL_X": v}) for v in ("1", "0", "", "maybe")] == [True, False, None, None]
    default_on = Flag("ANYACCEL_X", doc="", default="on", read_by="", default_on=True)
    assert default_on.get({}) and default_on.get({"ANYACCEL_X": "yes"}) and not default_on.get({"ANYACCEL_X": "0"})


def test_choices_counts_paths_and_texts(tmp_path) -> None:
    choice = Choice("ANYACCEL_X", doc="", default="best", read_by="", choices=("avx2", "portable"))
    assert choice.get({"ANYACCEL_X": "AVX2"}) == "avx2" and choice.get({}) is None
    with pytest.raises(SettingError, match=r"ANYACCEL_X='sse' is not accepted: one of `avx2`, `portable`.*fix"):
        choice.get({"ANYACCEL_X": "sse"})
    count = CountOrChoice("ANYACCEL_X", doc="", default="auto", read_by="", choices=("auto", "torch"),
                          default_choice="auto")
    assert [count.get({"ANYACCEL_X": v}) for v in ("", "Torch", "4")] == ["auto", "torch", 4]
    for bad in ("0", "-2", "many"):
        with pytest.raises(SettingError, match="an integer >= 1"):
            count.get({"ANYACCEL_X": bad})
    path = PathSetting("ANYACCEL_X", doc="", default="", read_by="")
    assert path.get({"ANYACCEL_X": str(tmp_path)}) == tmp_path and path.get({"ANYACCEL_X": ""}) is None
    assert path.get({"ANYACCEL_X": "~/x"}) == Path("~/x").expanduser()
    text = Text("ANYACCEL_X", doc="", default="", read_by="", lower=True)
    assert text.get({"ANYACCEL_X": " CUDA "}) == "cuda"


def test_a_family_names_its_members() -> None:
    assert settings.IMPL.named("adam") == "ANYACCEL_IMPL_ADAM"
    assert settings.BUILD.state({"ANYACCEL_BUILD_CPU_ADAM": "0"}, name=settings.BUILD.named("cpu_adam")) is False
    with pytest.raises(ValueError, match="one variable"):
        settings.STRICT.named("x")


def test_the_table_has_a_row_per_declaration() -> None:
    table = settings.markdown_table()
    assert len(table.splitlines()) == 2 + len(list(settings.all_settings()))
    assert "| `ANYACCEL_BUILD_TIMEOUT` |" in table and "0 < seconds <= 1e+09" in table
