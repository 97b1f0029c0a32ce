"""Fail when code comments, docstrings or docs pages point at things outside the repository.

A reader of the repository must be able to follow every reference in it. This check reports, in the strings
and comments of Python sources (read with `tokenize`, so code itself never counts), in C/C++/CUDA/SYCL
sources and in Markdown pages:

- ``shared``: a path into a ``shared/`` folder of notes kept beside the repository (``shared/x.md``,
  ``shared/reference/``; not the prose "shared/private");
- ``user-pain``: "user pain(s)", and ``pain-id``: a pain id such as ``P12`` (``P`` and one or two digits);
- ``issue``: "issue 12" or "issue #12": an issue number of a tracker a reader cannot see (name the upstream
  project's own tracker as ``DeepSpeed #2503`` instead);
- ``leadership``, ``session``: a "leadership" folder, "this session";
- ``abs-path``: an absolute path of one machine (``/work/``, ``/root/``, ``/home/``, ``/Users/``, ``/mnt/``);
- ``probe``: a ``.device_carry`` probe script;
- ``run-id``: a benchmark run id such as "run BK" or "runs BC and BD" (one or two capital letters; not "run CI"
  or "run A/B"), except on the docs pages that record this project's own benchmark runs (`BENCHMARK_PAGES`);
- ``dated``: a date (``2026-11-24``) in a source file: measurements with their dates belong on those pages,
  a docstring keeps the decision and its reason.

Usage: ``python scripts/check_docstrings.py [PATH ...]`` (files or folders; by default the package, its tests,
the benchmarks, examples and scripts, ``setup.py``, ``README.md`` and ``docs/``, less this script and its test,
which spell the patterns out). Exit status 1 with one ``path:line: rule: text`` line per reference, 0 when there
is none; 2 when a path does not exist.
"""

from __future__ import annotations

import io
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PATHS = ("anyaccel", "tests", "benchmarks", "examples", "scripts", "setup.py", "README.md", "docs")
#: Files of the default paths not checked: they spell the patterns out.
EXEMPT = ("scripts/check_docstrings.py", "tests/scripts/test_check_docstrings.py")

PYTHON_SUFFIXES = (".py",)
NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".cuh", ".sycl")
MARKDOWN_SUFFIXES = (".md",)

#: Docs pages (by name, or any page under a ``benchmarks/`` folder) that record this project's own benchmark
#: runs, where a run id names a measurement the page itself describes.
BENCHMARK_PAGES: frozenset[str] = frozenset({"nn_ops.md"})

#: Two capital letters after "run" that are words, not run ids.
_NOT_RUN_IDS = frozenset({"CI", "OK", "I"})

_NUMBERS_HINT = "keep the decision and its reason; measurements go to docs/"

#: (rule, pattern, what to write instead); the patterns see one comment, string or page at a time.
RULES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    # a path into shared/ (shared/reference/x.md, shared/design.md, ``shared/``), not "shared/private" prose
    ("shared", re.compile(r"(?<![\w-])shared/(?![\w-]+(?![\w./-]))"), "name a file of this repository instead"),
    ("user-pain", re.compile(r"\buser[ -]pains?\b", re.IGNORECASE), "say what goes wrong for the user"),
    ("pain-id", re.compile(r"\bP[1-9]\d?\b"), "say what goes wrong for the user"),
    ("issue", re.compile(r"\bissues? #?\d+", re.IGNORECASE), "say what the code guards against"),
    ("leadership", re.compile(r"\bleadership\b", re.IGNORECASE), "say it in place"),
    ("session", re.compile(r"\bthis session\b", re.IGNORECASE), "say what was (not) run and where"),
    ("abs-path", re.compile(r"(?<![\w.~-])/(?:work|root|home|Users|mnt)/"), "a path relative to the repository"),
    ("probe", re.compile(r"\.device_carry\b"), "name a script of this repository"),
    ("run-id", re.compile(r"\bruns? ([A-Z]{1,2})\b(?!/[A-Z]\b)"), _NUMBERS_HINT),
    ("dated", re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"), _NUMBERS_HINT),
)

#: Rules that docs pages are not held to: a page may date its measurements.
_SOURCE_ONLY = frozenset({"dated"})


def _python_texts(text: str) -> Iterator[tuple[int, str]]:
    """``(first line, text)`` of every comment and string literal (f-string parts included)."""
    kinds = {tokenize.COMMENT, tokenize.STRING}
    fstring_middle = getattr(tokenize, "FSTRING_MIDDLE", None)  # Python 3.12+
    if fstring_middle is not None:
        kinds.add(fstring_middle)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in kinds:
            yield tok.start[0], tok.string


def _texts(path: Path) -> Iterator[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix in PYTHON_SUFFIXES:
        yield from _python_texts(text)
    else:  # native sources: comments and strings are most of what can match; Markdown: the page
        yield 1, text


def is_benchmark_page(path: Path) -> bool:
    """Whether ``path`` is a docs page that may cite this project's own benchmark run ids."""
    return path.suffix in MARKDOWN_SUFFIXES and (path.name in BENCHMARK_PAGES or path.parent.name == "benchmarks")


def references(path: Path) -> list[str]:
    """The references outside the repository in one file, as ``path:line: rule: text`` lines."""
    page = path.suffix in MARKDOWN_SUFFIXES
    found = []
    for first_line, text in _texts(path):
        for rule, pattern, hint in RULES:
            if (rule == "run-id" and is_benchmark_page(path)) or (page and rule in _SOURCE_ONLY):
                continue
            for match in pattern.finditer(text):
                if rule == "run-id" and match.group(1) in _NOT_RUN_IDS:
                    continue
                line = first_line + text.count("\n", 0, match.start())
                found.append((line, f"{path}:{line}: {rule}: {match.group(0)!r}  ({hint})"))
    return [entry for _, entry in sorted(found)]


def files(paths: list[Path]) -> Iterator[Path]:
    """The checked files under ``paths`` (files or folders), in a stable order."""
    suffixes = PYTHON_SUFFIXES + NATIVE_SUFFIXES + MARKDOWN_SUFFIXES
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in suffixes
                              and "__pycache__" not in p.parts)
        elif path.is_file():
            yield path


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv[1:]] or [ROOT / p for p in DEFAULT_PATHS]
    exempt = set() if argv[1:] else {ROOT / p for p in EXEMPT}
    missing = [p for p in paths if not p.exists()]
    if missing:
        print(f"check_docstrings: no such file or folder: {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    problems = [line for path in files(paths) if path not in exempt for line in references(path)]
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
