"""Migrate one Python source text: parse, rewrite, verify the result parses."""

from __future__ import annotations

import logging
from collections.abc import Callable

from anyaccel.migrate._libcst import require_libcst

require_libcst()  # raise the actionable MissingLibcstError before the bare libcst imports below

import libcst as cst  # noqa: E402
from libcst.codemod import CodemodContext  # noqa: E402

from anyaccel.migrate.findings import Finding, MigrationResult  # noqa: E402
from anyaccel.migrate.opt_out import opted_out_lines  # noqa: E402
from anyaccel.migrate.screen import cpython_refusal, too_complex  # noqa: E402
from anyaccel.migrate.transformer import CudaToAccelerator  # noqa: E402

logger = logging.getLogger(__name__)


def migrate_source(
    source: str, path: str = "<string>", torch_accelerator: frozenset[str] | None = None,
    on_parsed: Callable[[], None] | None = None,
) -> MigrationResult:
    """Rewrite torch.cuda-specific code in ``source`` to the ``get_accelerator()`` API.

    Pure function: reads no file, writes none. Comments and formatting of untouched code are preserved
    (libcst round-trips the source exactly). ``from anyaccel import get_accelerator`` is added once, after
    the module docstring and ``__future__`` imports, when a rewrite needs it and the module does not already
    import a ``get_accelerator``; imports from torch.cuda that the rewrite leaves unused are removed.

    Args:
        source: Python source text (str; decode files as UTF-8 first, see ``files.read_source``).
        path: the name used in findings.
        torch_accelerator: the ``torch.accelerator`` members rewrites may target; None (the default) detects
            them in the installed torch (``torch_api.torch_accelerator_members``), so the output uses only what
            that torch has.
        on_parsed: called once libcst has parsed the source, before the rewrite (``isolated`` bounds the
            parse and the rewrite separately with it).

    Returns:
        A ``MigrationResult``. When ``source`` does not parse, ``error`` holds a ``parse-error`` finding with
        the line and column libcst reports, and ``rewritten == source``; when CPython's parser refuses it as
        too deeply nested (``screen.cpython_refusal``), a ``too-complex`` finding, and libcst never sees it.

    libcst's native parser can still crash this process (SIGSEGV) on a source CPython accepts, such as an
    ``a and a and ...`` chain of 10,000 terms; for files you did not write, use
    ``isolated.IsolatedMigrator``, which parses in a worker process (``anyaccel migrate`` does).

    Raises:
        RuntimeError: the rewritten code failed to parse, which is a bug in the codemod; the message names
            the file and libcst's error. The caller should leave the file untouched.
    """
    too_deep = cpython_refusal(source)
    if too_deep is not None:
        return too_complex(source, path, too_deep)
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        line, column, message = exc.raw_line, exc.raw_column + 1, exc.message
        try:  # CPython's own parser names the line more precisely; compiling executes nothing
            compile(source, path, "exec", dont_inherit=True)
        except SyntaxError as syntax:
            line, column, message = syntax.lineno or line, syntax.offset or column, syntax.msg
        except ValueError:  # null bytes and the like: keep libcst's position
            pass
        error = Finding(path, line, column, "parse-error", f"does not parse, left untouched: {message}")
        return MigrationResult(original=source, rewritten=source, findings=(), error=error)
    if on_parsed is not None:
        on_parsed()
    transformer = CudaToAccelerator(
        CodemodContext(filename=path), path, opted_out_lines(source), torch_accelerator=torch_accelerator
    )
    rewritten = transformer.transform_module(module).code
    if rewritten != source:
        try:
            cst.parse_module(rewritten)
        except cst.ParserSyntaxError as exc:
            raise RuntimeError(
                f"anyaccel migrate produced code that does not parse for {path} ({exc.message}); "
                "this is a bug, please report it with the file"
            ) from exc
    findings = tuple(sorted(transformer.findings, key=lambda f: (f.line, f.column)))
    logger.debug("%s: %d rewrites, %d findings", path, transformer.rewrites, len(findings))
    return MigrationResult(original=source, rewritten=rewritten, findings=findings)
