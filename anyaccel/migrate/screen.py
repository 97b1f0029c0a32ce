"""The screen before libcst: what CPython's own parser refuses as nested or chained too deeply; the results of
a file left untouched as too complex or too slow to migrate.

A leaf of the migrate package (``engine`` and ``isolated`` both use it; see ``isolated`` for why and what
it costs).
"""

from __future__ import annotations

import ast
import warnings

from anyaccel.migrate.findings import Finding, MigrationResult

#: CPython's words for a source nested or chained beyond what its parser takes.
_TOO_DEEP = ("too many nested parentheses", "too many levels of indentation", "too many statically nested blocks")


def cpython_refusal(source: str) -> str | None:
    """Why CPython's parser refuses ``source`` as too deep or too long, or None (it parses, or fails otherwise).

    Args:
        source: Python source text.

    Returns:
        CPython's reason, when it is one of nesting or size; None otherwise.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning and DeprecationWarning of the user's code
            compile(source, "<migrate>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except RecursionError:
        return "CPython's parser ran out of recursion depth on it"
    except MemoryError:
        return "CPython's parser ran out of stack on it"
    except SyntaxError as exc:
        if exc.msg in _TOO_DEEP:
            return f"CPython refuses it: {exc.msg} (line {exc.lineno})"
    except ValueError:  # NUL bytes and the like: read_source skips those already
        return None
    return None


def too_complex(source: str, path: str, why: str) -> MigrationResult:
    """The result for a source left untouched because it is nested or chained too deeply (``why``: the cause)."""
    error = Finding(path, 0, 0, "too-complex",
                    f"nested or chained too deeply to migrate ({why}), left untouched; split the expression or "
                    "the nesting into smaller parts (named intermediate values), or port this file by hand")
    return MigrationResult(original=source, rewritten=source, findings=(), error=error)


def too_slow(source: str, path: str, why: str) -> MigrationResult:
    """The result for a source left untouched because its rewrite ran past its time bound (``why``: how long)."""
    error = Finding(path, 0, 0, "too-slow",
                    f"{why}, left untouched; split the file into smaller modules, or migrate it on a less busy "
                    "machine")
    return MigrationResult(original=source, rewritten=source, findings=(), error=error)
