"""``anyaccel migrate``: rewrite torch.cuda-only code to the accelerator API.

A concrete-syntax-tree codemod built on libcst, so comments and formatting survive. The conversion
tables are in ``rules``, the tree rewrite in ``transformer``, one source text is migrated by
``engine.migrate_source``, file handling (reading, skipping binaries, atomic writes) is in ``files`` and
the command line in ``cli``. See ``docs/migrate.md``.

Importing this package imports no libcst; ``migrate_source`` is loaded on first use.
"""

from __future__ import annotations

from anyaccel.lazy_exports import lazy_exports

__all__ = ["migrate_source", "Finding", "MigrationResult", "MissingLibcstError"]


__getattr__, __dir__ = lazy_exports(__name__, {
    "migrate_source": "anyaccel.migrate.engine",
    "Finding": "anyaccel.migrate.findings",
    "MigrationResult": "anyaccel.migrate.findings",
    "MissingLibcstError": "anyaccel.migrate._libcst",
})
