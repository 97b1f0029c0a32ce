"""scripts/check_docs.py: every public name of the documented modules has a docstring and an API page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_docs.py"

PLANTED = '''\
"""A module with documented and undocumented public names."""

from dataclasses import dataclass

__all__ = ["documented", "undocumented", "CONST", "UNDOC_CONST", "Klass", "Record", "not_on_a_page"]


def documented():
    """Has a docstring."""


def undocumented():
    return 1


#: A documented constant.
CONST = 1
UNDOC_CONST = 2


class Klass:
    """Has a docstring, one of its methods has none."""

    def method(self):
        return 2

    @property
    def prop(self):
        """Documented."""
        return 3


@dataclass
class Record:
    value: int


def not_on_a_page():
    """Documented, but no API page renders it."""
'''

PAGE = """\
# planted

::: planted_mod
    options:
      members:
        - documented
        - undocumented
        - CONST
        - UNDOC_CONST
        - Klass
        - Record
"""


def _run(*args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, env=env)


def _plant(tmp_path: Path, page: str = PAGE) -> Path:
    (tmp_path / "planted_mod.py").write_text(PLANTED)
    api = tmp_path / "api"
    api.mkdir()
    (api / "planted.md").write_text(page)
    return api


def test_every_public_name_of_the_documented_modules_is_documented() -> None:
    result = _run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_a_planted_undocumented_name_fails_with_one_line_per_problem(tmp_path: Path) -> None:
    api = _plant(tmp_path)
    result = _run("--api-dir", str(api), "planted_mod", pythonpath=tmp_path)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    flagged = sorted(line.split(":", 1)[0] for line in lines)
    assert flagged == ["planted_mod.Klass.method", "planted_mod.Record", "planted_mod.UNDOC_CONST",
                       "planted_mod.not_on_a_page", "planted_mod.undocumented"], lines
    assert any(line.startswith("planted_mod.not_on_a_page: missing from the API reference") for line in lines)
    assert any(line.startswith("planted_mod.UNDOC_CONST: has no documentation") for line in lines)


def test_a_raw_sphinx_role_is_reported(tmp_path: Path) -> None:
    api = _plant(tmp_path)
    role = ":" + "func:`planted_mod.documented`"  # split: this file is not searched, but stays greppable-clean
    (tmp_path / "roles.py").write_text(f'"""See {role}."""\n')
    (tmp_path / "page.md").write_text("fine [`x`][planted_mod.documented]\nand :" + "class:`Klass` here\n")
    result = _run("--api-dir", str(api), "--sources", str(tmp_path / "roles.py"), str(tmp_path / "page.md"),
                  pythonpath=tmp_path)
    assert result.returncode == 1
    roles = [line for line in result.stdout.splitlines() if "raw Sphinx role" in line]
    assert len(roles) == 2, result.stdout
    assert roles[0].startswith(f"{tmp_path / 'roles.py'}:1: raw Sphinx role {role} renders as literal text")
    assert roles[1].startswith(f"{tmp_path / 'page.md'}:2: raw Sphinx role :" + "class:`Klass`")


def test_the_sources_and_docs_hold_no_raw_role() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import check_docs
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert check_docs.raw_roles(check_docs.DEFAULT_SOURCES) == []


def test_a_page_that_names_nothing_is_reported(tmp_path: Path) -> None:
    api = _plant(tmp_path, PAGE + "\n::: planted_mod.no_such_name\n")
    result = _run("--api-dir", str(api), "planted_mod", pythonpath=tmp_path)
    assert result.returncode == 1
    assert re.search(r"planted\.md:\d+: ::: planted_mod\.no_such_name names nothing importable", result.stdout)


def _inventory(path: Path, names: list[str]) -> None:
    header = b"# Sphinx inventory version 2\n# Project: t\n# Version: 0\n# The remainder is compressed using zlib.\n"
    body = "".join(f"{name} py:function 1 #$ -\n" for name in names).encode()
    path.write_bytes(header + zlib.compress(body))


def test_a_name_the_built_site_did_not_render_is_reported(tmp_path: Path) -> None:
    fixed = PLANTED.replace("def undocumented():\n", 'def undocumented():\n    """Now documented."""\n')
    fixed = fixed.replace("UNDOC_CONST = 2", "UNDOC_CONST = 2  #: documented at the end of its line")
    fixed = fixed.replace("        return 2", '        """Documented."""\n        return 2')
    fixed = fixed.replace("    value: int", '    """Documented."""\n\n    value: int')
    fixed = fixed.replace('"Klass", "Record", "not_on_a_page"]', '"Klass", "Record"]')
    api = _plant(tmp_path)
    (tmp_path / "planted_mod.py").write_text(fixed)
    assert _run("--api-dir", str(api), "planted_mod", pythonpath=tmp_path).returncode == 0
    rendered = [f"planted_mod.{n}" for n in ("documented", "undocumented", "CONST", "UNDOC_CONST", "Klass")]
    _inventory(tmp_path / "objects.inv", ["planted_mod", *rendered])
    result = _run("--api-dir", str(api), "--inventory", str(tmp_path / "objects.inv"), "planted_mod",
                  pythonpath=tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "planted_mod.Record: the API reference names it as planted_mod.Record, but the built site does not render "
        "it (mkdocstrings cannot see it statically: point the ::: block at the module that defines it)"]


def test_the_getting_started_page_shows_the_readmes_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Set-up.*?```bash\n(.*?)```", readme, re.S)
    assert block is not None
    commands = [line for line in block.group(1).splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    page = (ROOT / "docs" / "getting_started.md").read_text()
    for command in commands:
        assert textwrap.dedent(command) in page, command
