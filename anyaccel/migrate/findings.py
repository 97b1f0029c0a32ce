"""What ``anyaccel migrate`` reports: code it left alone, and files it could not process."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Finding:
    """One piece of CUDA-specific code the codemod did not rewrite, or a file it could not process.

    Attributes:
        path: the file, as given on the command line or found under a given directory.
        line: 1-based line number; 0 when the finding concerns the whole file.
        column: 1-based column number; 0 when the finding concerns the whole file.
        kind: a short, stable identifier of the reason (a key of ``rules.REASONS``, or ``parse-error``,
            ``too-complex``, ``too-slow``, ``binary``, ``not-utf8``, ``bad-encoding``, ``notebook``, ``unreadable``,
            ``unwritable``).
        message: the human-readable reason, naming the code and the suggested fix.
    """

    path: str
    line: int
    column: int
    kind: str
    message: str

    def format(self) -> str:
        """Return the finding as ``path:line:column: kind: message`` (compiler style, for editors and CI)."""
        return f"{self.path}:{self.line}:{self.column}: {self.kind}: {self.message}"


@dataclasses.dataclass(frozen=True)
class MigrationResult:
    """The outcome of migrating one source text.

    Attributes:
        original: the source as read (str, BOM removed).
        rewritten: the migrated source; equal to ``original`` when nothing changed.
        findings: CUDA-specific code left alone, in source order.
        error: None on success; a Finding (kind ``parse-error``, or ``too-complex`` / ``too-slow`` from
            ``isolated.IsolatedMigrator``) when the source could not be parsed, in which case
            ``rewritten == original``.
    """

    original: str
    rewritten: str
    findings: tuple[Finding, ...]
    error: Finding | None = None

    @property
    def changed(self) -> bool:
        """True when the migration changed the source."""
        return self.rewritten != self.original
