"""``anyaccel migrate``: rewrite torch.cuda-only code to the accelerator API.

A concrete-syntax-tree codemod built on libcst, so comments and formatting survive. The conversion
tables are in ``rules``, the tree rewrite in ``transformer``, one source text is migrated by
``engine.migrate_source``, file handling (reading, skipping binaries, atomic writes) is in ``files`` and
the command line in ``cli``. See ``docs/migrate.md``.

Importing this package imports no libcst; ``migrate_source`` is loaded on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["migrate_source", "Finding", "MigrationResult", "MissingLibcstError"]


def __getattr__(name: str) -> Any:
    """Load the public API lazily, so that ``anyaccel --help`` never imports libcst."""
    if name == "migrate_source":
        from anyaccel.migrate.engine import migrate_source

        return migrate_source
    if name in ("Finding", "MigrationResult"):
        from anyaccel.migrate import findings

        return getattr(findings, name)
    if name == "MissingLibcstError":
        from anyaccel.migrate._libcst import MissingLibcstError

        return MissingLibcstError
    raise AttributeError(f"module 'anyaccel.migrate' has no attribute {name!r}")
