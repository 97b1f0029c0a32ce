"""The evidence table (docs/evidence.json, rendered into docs/accelerators.md by docs/gen_evidence.py) is honest:
complete, each named test exists and carries the named marker, the page is current.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_evidence", ROOT / "docs" / "gen_evidence.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


GEN = _gen()
DATA = GEN.load()
ITEMS = [(cell["family"], cell["accelerator"], item) for cell in DATA["evidence"] for item in cell["items"]]


@pytest.fixture(scope="module")
def registered(pytestconfig: pytest.Config) -> set[str]:
    """The marker names registered in pyproject.toml's [tool.pytest.ini_options] markers."""
    return {line.split(":")[0].strip() for line in pytestconfig.getini("markers")}


def _marks(decorators: list[ast.expr]) -> set[str]:
    """Marker names of ``@pytest.mark.<name>`` decorators (or a ``pytestmark`` list's items)."""
    found = set()
    for node in decorators:
        for sub in ast.walk(node):
            text = ast.unparse(sub)
            if isinstance(sub, ast.Attribute) and text.startswith("pytest.mark.") and text.count(".") == 2:
                found.add(sub.attr)
    return found


def test_markers(path: Path, name: str, registered: set[str]) -> set[str] | None:
    """The registered markers carried by test ``name`` of ``path`` (module ``pytestmark``, class and function
    decorators), or None when the file has no such test."""
    tree = ast.parse(path.read_text())
    module = set().union(*(_marks([n.value]) for n in tree.body if isinstance(n, ast.Assign)
                           and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)))
    scopes: list[tuple[list[ast.stmt], set[str]]] = [(tree.body, module)]
    for body, inherited in scopes:
        for node in body:
            if isinstance(node, ast.ClassDef):
                scopes.append((node.body, inherited | _marks(node.decorator_list)))
            elif isinstance(node, ast.FunctionDef) and node.name == name:
                return (inherited | _marks(node.decorator_list)) & registered
    return None


test_markers.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def test_every_family_and_accelerator_has_one_cell_of_known_statuses() -> None:
    pairs = [(cell["family"], cell["accelerator"]) for cell in DATA["evidence"]]
    wanted = [(f["id"], a["id"]) for f in DATA["families"] for a in DATA["accelerators"]]
    assert sorted(pairs) == sorted(wanted), "evidence.json must have exactly one cell per op family and accelerator"
    bad = [f"{f}/{a}: {item}" for f, a, item in ITEMS if item["status"] not in GEN.STATUSES]
    assert not bad, f"unknown statuses (known: {list(GEN.STATUSES)}):\n" + "\n".join(bad)


def _ids(entry: tuple[str, str, dict[str, Any]]) -> str:
    family, accelerator, item = entry
    return f"{family}-{accelerator}-{item['status']}-{item.get('test', item.get('file', ''))}"


#: markers that say how long a test takes, not what it needs: a row never names them
NOT_EVIDENCE = {"slow"}
TESTED = [entry for entry in ITEMS if entry[2]["status"] in GEN.TESTED]


@pytest.mark.parametrize("entry", TESTED, ids=[_ids(e) for e in TESTED])
def test_the_named_test_exists_and_carries_its_marker(entry: tuple[str, str, dict[str, Any]],
                                                      registered: set[str]) -> None:
    family, accelerator, item = entry
    assert "test" in item and "::" in item["test"], f"{family}/{accelerator}: a {item['status']} claim names no test"
    file, name = item["test"].split("::")
    path = ROOT / file
    assert path.is_file(), f"{family}/{accelerator}: file missing: {file}"
    marks = test_markers(path, name, registered)
    assert marks is not None, f"{family}/{accelerator}: {file} has no test {name}"
    wanted = {item["marker"]} if item.get("marker") else set()
    marks -= NOT_EVIDENCE
    assert marks == wanted, (f"{family}/{accelerator}: {item['test']} carries the markers {sorted(marks)}, "
                             f"the table says {sorted(wanted)}")


def test_the_page_is_what_the_data_gives() -> None:
    page = GEN.PAGE.read_text()
    stale = "docs/accelerators.md is stale: run python docs/gen_evidence.py"
    assert GEN.page_with(page, GEN.render(DATA)) == page, stale


def test_a_missing_test_or_marker_fails(tmp_path: Path, registered: set[str]) -> None:
    """The marker reader sees function, class and module markers and reports a missing test as None."""
    source = tmp_path / "test_x.py"
    source.write_text("import pytest\npytestmark = [pytest.mark.slow]\n"
                      "class TestA:\n    @pytest.mark.gpu\n    def test_b(self):\n        pass\n"
                      "def test_c():\n    pass\n")
    assert test_markers(source, "test_b", registered) == {"slow", "gpu"}
    assert test_markers(source, "test_c", registered) == {"slow"}
    assert test_markers(source, "test_missing", registered) is None
