"""``anyaccel migrate PATH... [--diff | --write | --check]``.

``--diff`` (the default) prints a unified diff and changes nothing; ``--write`` rewrites files in place,
atomically; ``--check`` changes nothing and exits 1 when CUDA-specific code remains (for CI and pre-commit).
Code left alone is reported as ``path:line:column: kind: reason``: on stderr with ``--diff``/``--write``
(so the diff on stdout stays a clean patch), on stdout with ``--check``.

``--write`` follows symbolic links (the file a link names is rewritten, the link stays) and keeps hard
links (such a file is rewritten in place); see ``files.write_atomic``. Files are parsed in a worker process
(``isolated``): a source that crashes or stalls libcst's parser (deep nesting, very long expression chains)
is reported as ``too-complex`` and the run goes on.

Files are decoded as Python decodes them: with the encoding their PEP 263 coding cookie names, else UTF-8
(``files.read_source``); ``--write`` writes them back in the same encoding.

Exit status: 0 on success; 1 when ``--check`` finds CUDA-specific code, when a file does not parse, is too
complex or too slow to migrate, cannot be read or decoded with its declared encoding, is a Jupyter notebook
(not read: the finding says how to export it), or (``--write``) cannot be written, or when libcst is missing.
Binary files and non-UTF-8 files without a coding cookie are skipped with a message; that fails ``--check``
(which cannot vouch for a file it did not read), not ``--diff`` or ``--write``. Importing this module imports no
libcst.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from anyaccel.migrate.isolated import IsolatedMigrator

logger = logging.getLogger(__name__)

#: Finding kinds that make a file count as not processed (exit status 1).
ERROR_KINDS = frozenset({"parse-error", "too-complex", "too-slow", "unreadable", "unwritable", "notebook",
                         "bad-encoding"})
#: Finding kinds that skip a file without failing the run (except ``--check``'s, which did not examine it).
SKIP_KINDS = frozenset({"binary", "not-utf8"})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``migrate`` subcommand's arguments on ``parser`` (called by ``anyaccel.cli``)."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="Python files or directories (searched for *.py)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--diff", dest="mode", action="store_const", const="diff",
                      help="print a unified diff and change nothing (the default)")
    mode.add_argument("--write", dest="mode", action="store_const", const="write",
                      help="rewrite the files in place, atomically")
    mode.add_argument("--check", dest="mode", action="store_const", const="check",
                      help="change nothing; exit 1 when CUDA-specific code remains "
                           "(a '# anyaccel: ignore' comment opts a line out)")
    parser.set_defaults(mode="diff")


def unified_diff(path: str, before: str, after: str) -> str:
    """Return a ``git apply``/``patch -p1`` compatible unified diff of one file (``a/``, ``b/`` prefixes)."""
    lines: list[str] = []
    for line in difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True),
        f"a/{path.lstrip('/')}", f"b/{path.lstrip('/')}"
    ):
        lines.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(lines)


def run(args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run ``anyaccel migrate`` with parsed ``args`` (``paths``: list of str, ``mode``: diff/write/check).

    Args:
        args: the namespace built from ``add_arguments``.
        stdout: where diffs (and findings with ``--check``) go; ``sys.stdout`` when None.
        stderr: where findings go with ``--diff``/``--write``; ``sys.stderr`` when None.

    Returns:
        The exit status described in the module docstring.

    Side effects:
        Imports libcst; starts a worker process (ended before returning); reads every file; with ``--write``
        rewrites changed files (see ``files.write_atomic``).
    """
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    from anyaccel.migrate._libcst import MissingLibcstError

    try:
        from anyaccel.migrate import engine  # noqa: F401  (libcst is there: the worker can parse)
    except MissingLibcstError as exc:
        logger.error("%s", exc)
        return 1
    from anyaccel.migrate.files import iter_python_files
    from anyaccel.migrate.isolated import IsolatedMigrator

    with IsolatedMigrator() as migrator:
        return _run_files(iter_python_files(args.paths), args.mode or "diff", migrator, out, err)


def _run_files(paths: Iterable[str], mode: str, migrator: IsolatedMigrator, out: TextIO, err: TextIO) -> int:
    """Migrate ``paths`` one by one through ``migrator`` (see `run`); returns the exit status."""
    from anyaccel.migrate.files import SourceText, read_source, write_atomic
    from anyaccel.migrate.findings import Finding

    report = out if mode == "check" else err
    failed = False
    remaining = 0
    by_kind: Counter[str] = Counter()
    changed_files = 0
    for path in paths:
        source = read_source(path)
        if isinstance(source, Finding):
            report.write(source.format() + "\n")
            failed = failed or source.kind in ERROR_KINDS or mode == "check"
            continue
        result = migrator.migrate(source.text, path)
        if result.error is not None:
            report.write(result.error.format() + "\n")
            failed = True
            continue
        for finding in result.findings:
            report.write(finding.format() + "\n")
            by_kind[finding.kind] += 1
        remaining += len(result.findings)
        if not result.changed:
            continue
        changed_files += 1
        if mode == "diff":
            out.write(unified_diff(path, result.original, result.rewritten))
        elif mode == "write":
            try:
                write_atomic(path, SourceText(text=result.rewritten, bom=source.bom, encoding=source.encoding))
            except OSError as exc:  # the file is unchanged (write_atomic's promise): report it, go on
                report.write(Finding(path, 0, 0, "unwritable", f"cannot write the file, left unchanged: "
                                     f"{exc.strerror or exc}; make it and its directory writable").format() + "\n")
                failed = True
                continue
            except UnicodeEncodeError as exc:  # nothing written either
                report.write(Finding(path, 0, 0, "unwritable", f"the rewritten text has {exc.object[exc.start]!r}, "
                                     f"which its declared encoding ({source.encoding}) cannot hold, left unchanged; "
                                     "port this file by hand").format() + "\n")
                failed = True
                continue
            logger.info("rewrote %s", path)
        else:
            out.write(f"{path}:0:0: rewritable: CUDA-specific code that 'anyaccel migrate --write' can rewrite\n")
    verb = {"diff": "would rewrite", "write": "rewrote", "check": "would rewrite"}[mode]
    logger.info("%s %d file(s); %d place(s) left for manual porting", verb, changed_files, remaining)
    if by_kind:
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(by_kind.items()))
        logger.info("places that need a person, by kind: %s (each line above says why and what to do)", kinds)
    if mode == "check" and (changed_files or remaining):
        return 1
    return 1 if failed else 0
